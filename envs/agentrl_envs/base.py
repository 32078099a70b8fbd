"""Common contract of agentrl's text environments.

Every env is a gymnasium.Env with printable-text observations and actions: ``reset(seed, options)``
is deterministic; ``step(response)`` takes the model's raw response, executes the body of its
first well-formed ``<action>...</action>`` and answers a malformed or rejected one with the env's
message plus ``-invalid_action_penalty`` (never raising on model output); ``info`` carries the
task, family, ``won``, ``action_valid``, ``action`` and, where the env has them, admissible
actions and RTMC signatures; ``prompt`` renders the user message (BiPACE App. J) and
``expert_action`` the expert's next move. Subclasses implement ``_reset_task`` and ``_execute``;
they inherit parsing, the penalty, step counting, the info keys and the prompt. The full
contract: docs/environments.md.
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from agentrl_envs.actions import parse_action

PRINTABLE = string.printable
MAX_TEXT = 200_000
MAX_ACTION = 4096  # the action space's max_length
ECHO_CHARS = 200  # how much of the model's own command an error message may quote

MALFORMED_MESSAGE = "Invalid response: write exactly one command inside <action>...</action>."


def to_printable(text: str) -> str:
    """Map text onto the printable charset of the observation space (unicode -> '?')."""
    return "".join(c if c in PRINTABLE else "?" for c in text)[:MAX_TEXT]


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut marked by "...".

    Env messages quote the model's command ("Could not execute ..."); unclipped, one
    200k-character response would be echoed into every later prompt.
    """
    return text if len(text) <= limit else text[:limit - 3] + "..."


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of ``text``, marker included within ``limit`` characters (tool
    output: the end of a traceback matters as much as its start)."""
    if len(text) <= limit:
        return text
    room = limit - len("\n[...  characters truncated ...]\n") - len(str(len(text)))
    if room < 2:
        return text[:limit]
    head, tail = room - room // 2, room // 2
    return f"{text[:head]}\n[... {len(text) - head - tail} characters truncated ...]\n{text[len(text) - tail:]}"


def parse_reset_options(options: dict[str, Any] | None, splits, families, extra_keys=(),
                        default_split: str = "train", split_aliases: dict[str, str] | None = None,
                        family_aliases: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """Check the common reset options of every env; return (split, families).

    ``options`` may hold ``split`` (one of ``splits``, or a key of ``split_aliases``),
    ``families`` (a name or a non-empty list of names of ``families``, or keys of
    ``family_aliases``; default all) and the env-specific ``extra_keys`` (checked by the env).
    Anything else is a one-line ValueError in one wording for every env:
    ``unknown <what> <value>; valid: <choices>``.
    """
    options = options or {}
    allowed = ("split", "families", *extra_keys)
    bad = sorted(set(options) - set(allowed), key=str)
    if bad:
        raise ValueError(f"unknown reset option(s) {bad}; valid: {', '.join(allowed)}")
    split_aliases, family_aliases = split_aliases or {}, family_aliases or {}
    split = options.get("split", default_split)
    if not isinstance(split, str) or split_aliases.get(split, split) not in splits:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join([*splits, *split_aliases])}")
    fams = options.get("families")
    valid_fams = ", ".join(families)
    if fams is None:
        return split_aliases.get(split, split), list(families)
    if isinstance(fams, str):
        fams = [fams]
    elif not isinstance(fams, (list, tuple)):
        raise ValueError(f"families must be a name or a list of names, got {clip(repr(fams))}; "
                         f"valid: {valid_fams}")
    if not fams:
        raise ValueError(f"families must not be empty; valid: {valid_fams}")
    out = []
    for f in fams:
        name = family_aliases.get(f, f) if isinstance(f, str) else None  # a list is unhashable
        if name is None or name not in families:
            raise ValueError(f"unknown task family {clip(repr(f))}; valid: {valid_fams}")
        out.append(name)
    return split_aliases.get(split, split), out


def restore_in_flight(env, snap: dict[str, Any]) -> None:
    """``env`` (``gym.make``'s wrappers around an env whose ``resume_kind`` is ``"snapshot"``), just
    reset with the episode's seed and options, back to ``snap``: the env's state and the step
    counts of its wrappers (``TimeLimit``), so the step limit falls where it would have."""
    env.unwrapped.restore(snap)
    while env is not None:
        if hasattr(env, "_elapsed_steps"):
            env._elapsed_steps = int(snap["steps"])
        env = getattr(env, "env", None)


class EnvContractError(TypeError):
    """A ``TextEnv`` subclass returned what its contract does not allow (``_reset_task``, ``_execute``):
    a bug in the env's code, said in one line, not an episode's bad luck."""


class TextEnv(gym.Env):
    """Base class: parsing, penalty, info keys, prompt. See the module docstring."""

    metadata = {"render_modes": ["ansi"]}
    env_title = "a text environment"
    """Human-readable name used in the prompt ("a household", "Minecraft crafting", ...)."""

    def __init__(self, invalid_action_penalty: float = 0.1, history_length: int = 2,
                 render_mode: str | None = None):
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.history_length = int(history_length)
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_TEXT, min_length=0, charset=PRINTABLE)
        self.action_space = spaces.Text(max_length=MAX_ACTION, min_length=0, charset=PRINTABLE)
        self._obs = ""
        self._task = ""
        self._family = ""
        self._won = False
        self._steps = 0

    # --- to implement -------------------------------------------------------------------------
    def _reset_task(self, seed: int | None, options: dict[str, Any]) -> tuple[str, str, str, dict]:
        """Load the task for ``seed``; return (task_text, first_obs, task_family, extra_info)."""
        raise NotImplementedError

    def _execute(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """Run a parsed action; return (obs, reward, terminated, valid, extra_info).

        ``valid=False`` means the env rejected the command (unknown, inadmissible): the base
        class then subtracts the invalid-action penalty. Set ``extra_info["won"]`` on success.
        """
        raise NotImplementedError

    def expert_action(self) -> str | None:
        """The expert's next action body in the current state (None if it has none)."""
        raise NotImplementedError

    def admissible_actions(self) -> list[str] | None:
        """Valid commands in the current state, where the env can list them."""
        return None

    def signatures(self, action: str | None) -> dict[str, str]:
        """Optional RTMC signatures: {"state_sig": ..., "action_sig": ...}."""
        return {}

    # --- resuming an episode in flight (agentrl's lossless resume; docs/training.md) -------------
    resume_kind = "replay"
    """How a checkpoint resumes an episode of this env that was in flight: ``"snapshot"`` (``snapshot``
    / ``restore`` below: the env's state saved and set again), ``"replay"`` (the default: a
    ``reset`` with the episode's seed and options, then its responses stepped again; the TextEnv
    contract makes both deterministic, and the resume checks the last observation), or
    ``"restart"`` (neither holds: the episode is played again from its reset)."""

    def snapshot(self) -> dict[str, Any]:
        """The state of the episode in progress (``resume_kind`` ``"snapshot"``): what ``restore``
        needs on an env freshly reset with the episode's seed and options, picklable."""
        return {"obs": self._obs, "task": self._task, "family": self._family, "won": self._won,
                "steps": self._steps, "env": self._snapshot_state()}

    def restore(self, snap: dict[str, Any]) -> None:
        """Back to ``snap`` (from ``snapshot``); the env was just reset with the episode's seed and
        options, so read-only task data (recipes, a game's layout) comes from that reset."""
        self._obs, self._task, self._family = snap["obs"], snap["task"], snap["family"]
        self._won, self._steps = bool(snap["won"]), int(snap["steps"])
        self._restore_state(snap["env"])

    def _snapshot_state(self) -> Any:
        """A subclass's own mutable state (``resume_kind = "snapshot"`` envs implement both)."""
        raise NotImplementedError(f"{type(self).__name__} has no snapshot (its resume_kind is {self.resume_kind!r})")

    def _restore_state(self, state: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no snapshot (its resume_kind is {self.resume_kind!r})")

    def state_key(self) -> str | None:
        """The identity of the current state, equal exactly when the env's state is (two texts of
        one state may differ, two states may read alike), sent as ``info["state_key"]`` after
        every reset and step; state-matching credit keys steps by it (agentrl/credit/README.md,
        "State key"). None (the default): the env does not know its state, and credit falls
        back to the observation text."""
        return None

    # --- shared machinery ---------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        self._task, obs, self._family, extra = self._checked("_reset_task", self._reset_task(seed, options),
                                                             "(task, first observation, task family, extra info dict)")
        self._obs = to_printable(obs)
        self._won = False
        self._steps = 0
        info = self._info(action=None, valid=True, extra=extra)
        return self._obs, info

    def step(self, response: str):
        self._steps += 1
        action = parse_action(response if isinstance(response, str) else str(response))
        if action is None:
            obs, reward, terminated, valid, extra = MALFORMED_MESSAGE, 0.0, False, False, {}
        else:
            obs, reward, terminated, valid, extra = self._checked(
                "_execute", self._execute(action), "(observation, reward, terminated, valid, extra info dict)")
        if not valid:
            reward = float(reward) - self.invalid_action_penalty
        self._won = bool(extra.pop("won", self._won))
        self._obs = to_printable(obs)
        info = self._info(action=action, valid=valid, extra=extra)
        info["penalty"] = 0.0 if valid else float(self.invalid_action_penalty)  # already in ``reward``
        return self._obs, float(reward), bool(terminated), False, info

    def _checked(self, method: str, out: Any, want: str) -> tuple:
        """``out`` if it is the tuple ``method`` promises (its length, a dict last, a finite number
        as ``_execute``'s reward); else an ``EnvContractError`` naming the method, what it returned
        and what was expected (instead of an unpacking error inside gymnasium's wrappers)."""
        n = want.count(",") + 1
        ok = isinstance(out, (tuple, list)) and len(out) == n and isinstance(out[-1], dict)
        if ok and method == "_execute":
            r = out[1]
            ok = isinstance(r, (int, float)) and not isinstance(r, bool) and r == r and abs(r) != float("inf")
        if not ok:
            got = (f"a {type(out).__name__} of {len(out)} item(s): {', '.join(type(v).__name__ for v in out)}"
                   if isinstance(out, (tuple, list)) else f"a {type(out).__name__}")
            raise EnvContractError(f"{type(self).__module__}.{type(self).__qualname__}.{method} returned {got}; "
                                   f"expected {want}" + (" with a finite number as reward" if method == "_execute"
                                                         else ""))
        return tuple(out)

    def _info(self, action: str | None, valid: bool, extra: dict) -> dict[str, Any]:
        # the action text (and its signature) is bounded by the action space's length: a
        # runaway response must not ride along in every record/log that keeps ``info``
        info: dict[str, Any] = {
            "task": self._task,
            "task_family": self._family,
            "won": self._won,
            "action_valid": valid,
            "action": None if action is None else clip(action, MAX_ACTION),
        }
        adm = self.admissible_actions()
        if adm is not None:
            info["admissible_actions"] = adm
        info.update({k: clip(v, MAX_ACTION) if isinstance(v, str) else v
                     for k, v in self.signatures(action).items()})
        key = self.state_key()
        if key is not None:  # never clipped: a key is exact or it is nothing (envs send short hashes)
            info["state_key"] = key
        info.update(extra)
        return info

    def render(self):
        return self._obs

    # --- prompt (BiPACE App. J contract) ------------------------------------------------------
    def prompt(self, obs: str, info: dict[str, Any], history: list[tuple[str, str]], step: int,
               history_length: int | None = None) -> str:
        """User message for one step. The first step omits history (App. J)."""
        h = self.history_length if history_length is None else history_length
        lines = [f"You are an agent in {self.env_title}. Your task: {info.get('task', self._task)}"]
        recent = history[-h:] if h > 0 else []
        if step > 0 and recent:
            lines.append(f"You have taken {step} step(s). Your last {len(recent)} observation(s) and action(s):")
            for o, a in recent:
                lines.append(f"Observation: {o}\nAction: {a}")
        lines.append(f"Current observation: {obs}")
        adm = info.get("admissible_actions")
        if adm:
            lines.append("Admissible actions: " + ", ".join(adm))
        lines.append("Reply with your next command inside <action>...</action>.")
        return "\n".join(lines)
