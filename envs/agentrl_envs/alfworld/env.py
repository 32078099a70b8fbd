"""ALFWorld (text) behind agentrl's TextEnv contract.

Engines (``engine``): ``"native"`` (default, :mod:`agentrl_envs.alfworld.native`: TextWorld's
play, move for move, ~400x faster; unsupported games and the handcoded expert fall back to
TextWorld) and ``"textworld"`` (the reference: ``PddlEnv`` behind ``AlfredDemangler`` and
``AlfredInfos``, :mod:`agentrl_envs.alfworld.engine`). Games (:mod:`agentrl_envs.alfworld.games`):
the official ``$ALFWORLD_DATA/json_2.1.1`` games, else ``$AGENTRL_ALFWORLD_DIR`` / ``data_dir``,
else an offline generated set (:mod:`agentrl_envs.alfworld.generate`). Experts
(``expert_type``): ``"planner"`` (default; Fast Downward on the task-relevant sub-problem,
:mod:`agentrl_envs.alfworld.planner`, its plan cached and recomputed only after a deviation) and
``"handcoded"`` (ALFWorld's, seeded at every reset). Details: docs/environments.md, "ALFWorld".
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import warnings

from agentrl_envs.alfworld.engine import TextWorldEngine, game_data
from agentrl_envs.alfworld.games import (
    canonical_families,
    canonical_split,
    list_games,
    parse_options,
    resolve_game_root,
)
from agentrl_envs.base import TextEnv, clip

NOTHING_HAPPENS = "Nothing happens."
_TASK_RE = re.compile(r"Your task is to:\s*(.*?)\s*$", re.DOTALL)
_WELCOME_RE = re.compile(r"^\s*-= Welcome to TextWorld, ALFRED! =-\s*")
EXPERT_TYPES = ("planner", "handcoded")
ENGINES = ("native", "textworld")
PROMPT_STYLES = ("default", "brief")
# Commands the brief prompt leaves out of "Here:": navigation has its own line, and examine /
# inventory / look / help only re-read what the prompt already shows.
_NOT_HERE = ("go to ", "examine ", "inventory", "look", "help")
# Commands that change what the agent holds or an object's state ("move" is ALFWorld's put): the
# brief prompt's "Done:" line (with one observation of history, the model would otherwise forget
# it cleaned the apple).
_DONE = ("take ", "move ", "put ", "clean ", "heat ", "cool ", "use ", "slice ")
_NUMBERED = re.compile(r"^(.*\D) (\d+)$")


def compress_places(targets: list[str]) -> str:
    """``["cabinet 1", "cabinet 2", "cabinet 3", "fridge 1"]`` -> ``"cabinet 1-3, fridge 1"``:
    the go-to targets in a few tokens (a run of consecutive numbers becomes ``a-b``)."""
    by: dict[str, list[int]] = {}
    plain: list[str] = []
    for t in targets:
        m = _NUMBERED.match(t)
        if m:
            by.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            plain.append(t)
    parts = []
    for name in sorted(by):
        nums = sorted(set(by[name]))
        runs, start = [], nums[0]
        for a, b in zip(nums, [*nums[1:], None], strict=True):
            if b != a + 1:
                runs.append(f"{start}" if start == a else f"{start}-{a}")
                start = b
        parts.append(f"{name} {', '.join(runs)}")
    return ", ".join(parts + sorted(plain))


def normalize_command(cmd: str) -> str:
    """Lower-case, single spaces, no trailing period: ALFWorld's command spelling."""
    return re.sub(r"\s+", " ", cmd.strip().lower()).rstrip(".").strip()


def split_intro(text: str) -> tuple[str, str]:
    """ALFWorld's first feedback -> (task text, room description)."""
    m = _TASK_RE.search(text)
    task = m.group(1).rstrip(".").strip() if m else ""
    obs = _WELCOME_RE.sub("", text[: m.start()] if m else text).strip()
    return task, obs


class ALFWorldEnv(TextEnv):
    """ALFWorld household tasks, six families: pick, look, clean, heat, cool, pick2.

    ``reset(seed, options={"split": "train"|"valid_seen"|"valid_unseen"|"valid",
    "families": [...], "game_file": path})``: ``seed`` picks game ``seed % n`` of the split's
    sorted game list (after the family filter); ``seed=None`` draws one with the env's RNG;
    ``game_file`` plays that file. The first observation is the room description; the task
    text ("put a clean cup in cabinet") is ``info["task"]``.

    ``step``: reward 1.0 when the goal is reached (the episode terminates), else 0.0. A
    command outside ALFWorld's admissible commands returns "Nothing happens." and the base
    class's penalty, without touching the game (TextWorld would answer the same).
    ``info`` adds ``admissible_actions``, ``state_sig``/``action_sig``, ``game_file``, ``split``.
    """

    env_title = "a household (ALFWorld)"

    def __init__(self, data_dir: str | None = None, expert_type: str = "planner",
                 auto_generate: bool = True, invalid_action_penalty: float = 0.1,
                 history_length: int = 2, render_mode: str | None = None, engine: str = "native",
                 prompt_style: str = "default"):
        """
        Args:
            data_dir: game tree (official ``json_2.1.1`` or ``python -m agentrl_envs.alfworld.generate``
                output). None: ``$ALFWORLD_DATA/json_2.1.1`` if it holds games, else
                ``$AGENTRL_ALFWORLD_DIR``, else the generated default set in
                ``~/.cache/agentrl/alfworld`` (base: ``$AGENTRL_CACHE``).
            expert_type: ``"planner"`` (Fast Downward, optimal, full knowledge) or
                ``"handcoded"`` (ALFWorld's heuristic explorer) for :meth:`expert_action`.
            auto_generate: build the default generated set on first use when no games are
                found (48 games, ~2 s of CPU each: ~1-2 min on 2 idle cores); False raises.
            invalid_action_penalty: subtracted from the reward of a malformed or inadmissible
                action (BiPACE App. J).
            history_length: (observation, action) pairs shown in the prompt.
            render_mode: only "ansi" (``render()`` returns the last observation).
            engine: ``"native"`` (agentrl's engine, the same plays ~400x faster; games it does
                not implement and the handcoded expert use TextWorld) or ``"textworld"`` (the
                reference TextWorld stack).
            prompt_style: ``"default"`` (BiPACE App. J: task, history, observation, every
                admissible command) or ``"brief"`` (for a 135M model on CPU, where prompt length
                is the cost: goal, the state-changing commands done so far, the current
                observation, the go-to targets in ranges and the other admissible commands; no
                history and no format line, left to the ``<action>`` prefill).
        """
        super().__init__(invalid_action_penalty=invalid_action_penalty,
                         history_length=history_length, render_mode=render_mode)
        if expert_type not in EXPERT_TYPES:
            raise ValueError(f"unknown expert_type {expert_type!r}; valid: {', '.join(EXPERT_TYPES)}")
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt_style {prompt_style!r}; valid: {', '.join(PROMPT_STYLES)}")
        self.expert_type = expert_type
        self.engine = engine
        self.prompt_style = prompt_style
        self._done: list[str] = []  # the episode's state-changing commands (brief prompt)
        self.data_dir = data_dir
        self.auto_generate = auto_generate
        self._root: str | None = None
        self._engines: dict[str, object] = {}
        self._eng = None           # engine playing the current game
        self._planner = None
        self._game_file: str | None = None
        self._game_data: dict = {}
        self._game_id = ""
        self._started = False
        self._plan: list[str] | None = None
        self._last_valid = True

    # --- games ------------------------------------------------------------------------------
    @property
    def root(self) -> str:
        """Root of the game tree in use (resolved, and generated if needed, on first use)."""
        if self._root is None:
            self._root = resolve_game_root(self.data_dir, self.auto_generate)
        return self._root

    def games(self, split: str = "train", families=None) -> list[tuple[str, str]]:
        """Sorted (game_file, family) pairs of ``split``, restricted to ``families``."""
        fams = set(canonical_families(families))
        return [g for g in list_games(self.root, canonical_split(split)) if g[1] in fams]

    # --- TextEnv hooks ----------------------------------------------------------------------
    def _pick_game(self, seed: int | None, options) -> tuple[str, str, str | None]:
        """(split, game file, family or None) of the reset: ``game_file``, else game
        ``seed % n`` of the split's sorted list (after the family filter)."""
        split, fams = parse_options(options)
        if options.get("game_file"):
            return split, os.path.abspath(str(options["game_file"])), None
        games = [g for g in list_games(self.root, split) if g[1] in fams]
        if not games:
            raise ValueError(f"no ALFWorld games for split={split!r}, "
                             f"families={options.get('families')} under {self.root}")
        idx = seed % len(games) if seed is not None else int(self.np_random.integers(len(games)))
        return (split, *games[idx])

    def _reset_task(self, seed, options):
        split, game_file, family = self._pick_game(seed, options)
        if self.expert_type == "handcoded":
            # AlfredExpert's handcoded agent breaks ties with the global `random`
            random.seed(hashlib.sha1(f"{game_file}|{seed}".encode()).hexdigest())
        if game_file != self._game_file:
            self._eng = self._load(game_file)
            self._game_file = game_file
            self._game_data = game_data(game_file)
        self._eng.reset()
        if family is None:
            from agentrl_envs.alfworld.families import TASK_TYPE_TO_FAMILY

            with open(os.path.join(os.path.dirname(game_file), "traj_data.json")) as f:
                family = TASK_TYPE_TO_FAMILY.get(json.load(f)["task_type"], "unknown")
        self._started = True
        walkthrough = self._game_data.get("walkthrough")
        self._plan = list(walkthrough) if walkthrough else None
        self._last_valid = True
        self._done = []
        self._game_id = hashlib.sha1(os.path.relpath(game_file, os.path.dirname(
            os.path.dirname(os.path.dirname(game_file)))).encode()).hexdigest()[:12]
        task, obs = split_intro(self._eng.feedback)
        return task, obs, family, {"game_file": game_file, "split": split}

    def _load(self, game_file: str):
        """The engine for ``game_file``, with the game loaded (see the module docstring)."""
        kind = "textworld" if self.engine == "textworld" or self.expert_type == "handcoded" else "native"
        if kind == "native":
            from agentrl_envs.alfworld.native import UnsupportedGame

            try:
                eng = self._engine("native")
                eng.load(game_file)
                return eng
            except UnsupportedGame as e:
                warnings.warn(f"ALFWorld native engine: {e}; this game is played on TextWorld",
                              stacklevel=3)
        eng = self._engine("textworld")
        eng.load(game_file)
        return eng

    def _engine(self, kind: str):
        if kind not in self._engines:
            if kind == "native":
                from agentrl_envs.alfworld.native import NativeEngine

                self._engines[kind] = NativeEngine()
            else:
                self._engines[kind] = TextWorldEngine("handcoded" if self.expert_type == "handcoded" else None)
        return self._engines[kind]

    # --- resume: the native engine's fact set is its whole state; TextWorld's is replayed -----------
    @property
    def resume_kind(self) -> str:
        from agentrl_envs.alfworld.native import NativeEngine

        return "snapshot" if isinstance(self._eng, NativeEngine) else "replay"

    def _snapshot_state(self) -> dict:
        return {"engine": self._eng.state(), "plan": None if self._plan is None else list(self._plan),
                "last_valid": self._last_valid, "done": list(self._done)}

    def _restore_state(self, state: dict) -> None:
        self._eng.set_state(state["engine"])
        self._plan = None if state["plan"] is None else list(state["plan"])
        self._last_valid, self._done = bool(state["last_valid"]), list(state["done"])

    def _execute(self, action):
        if not self._started:
            raise RuntimeError("call reset() before step()")
        cmd = normalize_command(action)
        if cmd not in self._eng.admissible:
            self._last_valid = False
            return NOTHING_HAPPENS, 0.0, False, False, {}
        self._last_valid = True
        if cmd.startswith(_DONE):
            self._done.append(cmd)
        before = self._eng.dynamic_facts()
        self._eng.step(cmd)
        if self._plan and cmd == self._plan[0]:
            self._plan = self._plan[1:]
        elif self._eng.dynamic_facts() != before:
            self._plan = None          # deviation: replan on the next expert_action()
        won = self._eng.won
        return self._eng.feedback.strip(), (1.0 if won else 0.0), won, True, {"won": won}

    def prompt(self, obs, info, history, step, history_length=None) -> str:
        if self.prompt_style == "brief":
            return self.brief_prompt(obs, info)
        return super().prompt(obs, info, history, step, history_length)

    def brief_prompt(self, obs: str, info: dict) -> str:
        """Goal, what was done (take/put/clean/heat/cool/use), the current observation (the
        room's first description is the "Go to" line, so it is not repeated), the go-to targets
        and the other admissible commands."""
        adm = info.get("admissible_actions") or []
        lines = [f"Goal: {info.get('task', self._task)}."]
        if self._done:
            lines.append("Done: " + "; ".join(self._done))
        if self._steps > 0:
            lines.append(f"Now: {clip(obs)}")
        places = [a[len("go to "):] for a in adm if a.startswith("go to ")]
        if places:
            lines.append("Go to: " + compress_places(places))
        here = [a for a in adm if not a.startswith(_NOT_HERE)]
        if here:
            lines.append("Here: " + "; ".join(here))
        return "\n".join(lines)

    def admissible_actions(self) -> list[str] | None:
        if not self._started:
            return None
        return list(self._eng.admissible)

    def expert_action(self) -> str | None:
        if not self._started or self._eng.won:
            return None
        if self.expert_type == "handcoded":
            plan = self._eng.expert_plan
            return plan[0] if plan else None
        if not self._plan or self._plan[0] not in self._eng.admissible:
            if self._planner is None:
                from agentrl_envs.alfworld.planner import SubproblemPlanner

                self._planner = SubproblemPlanner()
            self._plan = self._eng.plan(self._planner)
        return self._plan[0] if self._plan else None

    def signatures(self, action: str | None) -> dict[str, str]:
        """``state_sig``: hash of the game id and its dynamic facts (agent location, held
        objects, open receptacles, object positions, clean/hot/cool/toggled/sliced flags) after
        the step, so equal states reached in any order share it. ``action_sig``: the
        normalized command; "invalid" for a malformed or inadmissible one; "" at reset."""
        sig = self.state_key()
        if sig is None:
            return {}
        if action is None:
            a = "" if self._steps == 0 else "invalid"
        else:
            a = normalize_command(action) if self._last_valid else "invalid"
        return {"state_sig": sig, "action_sig": a}

    def state_key(self) -> str | None:
        """The game id and its dynamic facts, hashed (``signatures``); None before a game starts."""
        if not self._started:
            return None
        facts = self._eng.dynamic_facts()
        return hashlib.sha1((self._game_id + "|" + ";".join(facts)).encode()).hexdigest()[:16]

    def close(self):
        for obj in [*getattr(self, "_engines", {}).values(), getattr(self, "_planner", None)]:
            if obj is not None:
                try:
                    obj.close()
                except Exception:
                    pass
        self._planner = None
        self._engines = {}
        super().close()
