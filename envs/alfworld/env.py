"""ALFWorld (text) behind agentrl's TextEnv contract.

Engine: the real ``alfworld`` stack, as ``AlfredTWEnv`` builds it: TextWorld's ``PddlEnv``
(PDDL domain ``alfred.pddl`` + grammar ``alfred.twl2``) wrapped by ``AlfredDemangler``
(readable names such as "apple 1") and ``AlfredInfos``; ALFWorld's handcoded expert through
``AlfredExpert`` when asked for.

Games: see :mod:`envs.alfworld.games` (official ``$ALFWORLD_DATA`` games when present, else an
offline generated set, built lazily on first use).

Expert (``expert_type``):

* ``"planner"`` (default): the Fast Downward plan that ``AlfredExpert(expert_type="planner")``
  exposes as ``extra.expert_plan`` (TextWorld's ``PddlState.replan``, the same call), computed
  *on demand* in :meth:`ALFWorldEnv.expert_action` and cached per state, instead of after every
  step: on kitchen games replanning costs ~0.2 s, more than the step itself. Optimal, offline,
  deterministic; it sees the full state (where every object is).
* ``"handcoded"``: ``AlfredExpert(expert_type="handcoded")``, ALFWorld's heuristic explorer
  (partial observability). It falls back to ``random.choice`` over admissible commands when
  stuck and can fail; it is seeded per reset for determinism.

Performance: translating a game's PDDL (Fast Downward's Python translator) is ~85% of a reset;
the translation is cached per problem text (:data:`_SAS_CACHE`), so re-resetting the same
game (GRPO groups) skips it. The loaded game is kept while the same game is reset again.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import OrderedDict
from typing import Any

from envs.alfworld.games import (
    canonical_families,
    canonical_split,
    list_games,
    resolve_game_root,
)
from envs.base import TextEnv

NOTHING_HAPPENS = "Nothing happens."
_TASK_RE = re.compile(r"Your task is to:\s*(.*?)\s*$", re.DOTALL)
_WELCOME_RE = re.compile(r"^\s*-= Welcome to TextWorld, ALFRED! =-\s*", re.DOTALL)
# Facts whose change is an effect of the agent's actions (the rest are static or bookkeeping
# such as checked/examined): the state signature hashes these.
_DYNAMIC_PREDICATES = {"atlocation", "holds", "opened", "inreceptacle", "isclean", "ishot",
                       "iscool", "istoggled", "ison", "issliced", "inreceptacleobject"}
_SAS_CACHE: OrderedDict = OrderedDict()
_SAS_CACHE_SIZE = 64


def normalize_command(cmd: str) -> str:
    """Lower-case, single spaces, no trailing period: ALFWorld's command spelling."""
    return re.sub(r"\s+", " ", cmd.strip().lower()).rstrip(".").strip()


def _cached_pddl2sas(original):
    def pddl2sas(domain, problem, verbose=False, optimize=False):
        key = (hashlib.sha1(domain.encode()).hexdigest(), hashlib.sha1(problem.encode()).hexdigest(),
               bool(optimize))
        hit = _SAS_CACHE.get(key)
        if hit is None:
            hit = original(domain, problem, verbose=verbose, optimize=optimize)
            _SAS_CACHE[key] = hit
            while len(_SAS_CACHE) > _SAS_CACHE_SIZE:
                _SAS_CACHE.popitem(last=False)
        else:
            _SAS_CACHE.move_to_end(key)
        return hit
    return pddl2sas


class _TranslationCache:
    """Context in which TextWorld's PddlState reuses Fast Downward translations.

    ``PddlState`` reads the translated task (types, objects, init, actions) and loads the SAS
    text into its own copy of libdownward; neither is mutated, so sharing them is safe.
    """

    def __enter__(self):
        import fast_downward

        self._mod = fast_downward
        self._orig = fast_downward.pddl2sas
        fast_downward.pddl2sas = _cached_pddl2sas(self._orig)

    def __exit__(self, *exc):
        self._mod.pddl2sas = self._orig
        return False


def make_tw_env(expert_type: str | None):
    """PddlEnv -> AlfredDemangler -> AlfredInfos [-> AlfredExpert(handcoded)]."""
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import (
            AlfredDemangler,
            AlfredExpert,
            AlfredInfos,
        )
        from textworld.envs import PddlEnv
    except ImportError as e:  # the optional extra is missing
        raise ImportError("ALFWorldEnv needs the alfworld extra: "
                          "pip install alfworld==0.4.2 textworld==1.7.0 "
                          "(or pip install -e '.[alfworld]')") from e
    infos = textworld.EnvInfos(admissible_commands=True, facts=True, won=True,
                               extras=["gamefile"])
    env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
    if expert_type == "handcoded":
        env = AlfredExpert(env, expert_type="handcoded")   # keyword: positional fills `env`
    return env


def _pddl_env(env):
    while hasattr(env, "_wrapped_env"):
        env = env._wrapped_env
    return env


class ALFWorldEnv(TextEnv):
    """ALFWorld household tasks (six families: pick, look, clean, heat, cool, pick2).

    ``reset(seed, options={"split": "train"|"valid_seen"|"valid_unseen"|"valid",
    "families": [...]})``: the seed picks game ``seed % n`` of the split's sorted game list
    (filtered by families); ``seed=None`` draws one with the env's RNG.
    Reward 1.0 when the goal is reached (the episode then terminates), else 0.0; a command
    that is not admissible (or a malformed response) yields "Nothing happens." and the base
    class's penalty, and does not touch the game.
    """

    env_title = "a household (ALFWorld)"

    def __init__(self, data_dir: str | None = None, expert_type: str = "planner",
                 auto_generate: bool = True, invalid_action_penalty: float = 0.1,
                 history_length: int = 2, render_mode: str | None = None):
        """
        Args:
            data_dir: game tree (official ``json_2.1.1`` or generated by
                ``python -m envs.alfworld.generate``). None: ``$ALFWORLD_DATA/json_2.1.1`` if
                present, else ``$AGENTRL_ALFWORLD_DIR``, else the generated default set.
            expert_type: ``"planner"`` (Fast Downward, optimal) or ``"handcoded"`` (ALFWorld's
                heuristic agent) for :meth:`expert_action`.
            auto_generate: build the default generated set on first use if it is missing
                (~3-6 min on one core); False raises instead.
            invalid_action_penalty: subtracted from the reward of a malformed or
                inadmissible action (BiPACE App. J).
            history_length: (observation, action) pairs shown in the prompt.
            render_mode: only "ansi" (returns the last observation).
        """
        super().__init__(invalid_action_penalty=invalid_action_penalty,
                         history_length=history_length, render_mode=render_mode)
        if expert_type not in ("planner", "handcoded"):
            raise ValueError(f"unknown expert_type {expert_type!r}; valid: planner, handcoded")
        self.expert_type = expert_type
        self.data_dir = data_dir
        self.auto_generate = auto_generate
        self._root: str | None = None
        self._tw = make_tw_env(expert_type)   # fails early and clearly without the extra
        self._game_file: str | None = None
        self._game_id = ""
        self._state = None
        self._plan: list[str] | None = None
        self._last_valid = True

    # --- games ------------------------------------------------------------------------------
    @property
    def root(self) -> str:
        if self._root is None:
            self._root = resolve_game_root(self.data_dir, self.auto_generate)
        return self._root

    def games(self, split: str = "train", families=None) -> list[tuple[str, str]]:
        """Sorted (game_file, family) pairs of ``split``, restricted to ``families``."""
        fams = set(canonical_families(families))
        return [g for g in list_games(self.root, canonical_split(split)) if g[1] in fams]

    # --- TextEnv hooks ----------------------------------------------------------------------
    def _reset_task(self, seed, options):
        unknown = set(options) - {"split", "families", "game_file"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; valid: split, families, game_file")
        split = canonical_split(options.get("split", "train"))
        if options.get("game_file"):
            game_file, family = str(options["game_file"]), None
        else:
            games = self.games(split, options.get("families"))
            if not games:
                raise ValueError(f"no ALFWorld games for split={split!r}, families="
                                 f"{options.get('families')} under {self.root}")
            idx = (seed % len(games)) if seed is not None else int(self.np_random.integers(len(games)))
            game_file, family = games[idx]
        if self.expert_type == "handcoded":
            # the handcoded agent breaks ties with the global `random`: pin it per episode
            random.seed(hashlib.sha1(f"{game_file}|{seed}".encode()).hexdigest())
        with _TranslationCache():
            if game_file != self._game_file:
                self._tw.load(game_file)
                self._game_file = game_file
            state = self._tw.reset()
        self._state = state
        self._plan = None
        self._last_valid = True
        self._game_id = hashlib.sha1(game_file.encode()).hexdigest()[:12]
        text = state.feedback
        m = _TASK_RE.search(text)
        task = m.group(1).rstrip(".") if m else ""
        obs = _WELCOME_RE.sub("", text[: m.start()] if m else text).strip()
        if family is None:
            from envs.alfworld.generate import TASK_TYPE_TO_FAMILY
            import json
            import os
            with open(os.path.join(os.path.dirname(game_file), "traj_data.json")) as f:
                family = TASK_TYPE_TO_FAMILY.get(json.load(f)["task_type"], "unknown")
        return task, obs, family, {"game_file": game_file, "split": split}

    def _execute(self, action):
        cmd = normalize_command(action)
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        if cmd not in self._state["admissible_commands"]:
            self._last_valid = False
            return NOTHING_HAPPENS, 0.0, False, False, {}
        self._last_valid = True
        state, _, _ = self._tw.step(cmd)
        self._state = state
        self._plan = None
        won = bool(state["won"])
        return state.feedback.strip(), (1.0 if won else 0.0), won, True, {"won": won}

    def admissible_actions(self) -> list[str] | None:
        if self._state is None:
            return None
        return list(self._state["admissible_commands"])

    def expert_action(self) -> str | None:
        if self._state is None or self._state["won"]:
            return None
        if self.expert_type == "handcoded":
            plan = self._state.get("extra.expert_plan") or []
            return plan[0] if plan else None
        if self._plan is None:
            pddl = _pddl_env(self._tw)
            self._plan = list(pddl._pddl_state.replan(pddl._entity_infos) or [])
        return self._plan[0] if self._plan else None

    def signatures(self, action: str | None) -> dict[str, str]:
        """state_sig: hash of the game's dynamic facts (agent location, held objects, open
        receptacles, object positions and clean/hot/cool/toggled/sliced flags) after the step,
        so equal states reached in any order share it; action_sig: the normalized command,
        "invalid" for a malformed or inadmissible one, "" at reset."""
        if self._state is None:
            return {}
        facts = sorted(
            f"{p.name.lower()}({','.join(v.name for v in p.arguments)})"
            for p in self._state["facts"] if p.name.lower() in _DYNAMIC_PREDICATES)
        sig = hashlib.sha1((self._game_id + "|" + ";".join(facts)).encode()).hexdigest()[:16]
        if self._steps == 0 and action is None:
            a = ""
        elif action is None or not self._last_valid:
            a = "invalid"
        else:
            a = normalize_command(action)
        return {"state_sig": sig, "action_sig": a}

    def close(self):
        if getattr(self, "_tw", None) is not None:
            try:
                self._tw.close()
            except Exception:
                pass
        super().close()
