"""An env's user messages, asked the same way by every door: agentrl's rollout, the OpenEnv
server, the TRL tool classes.

``user_prompt`` is a window prompt (task + the last ``h`` (observation, action) pairs + the
observation), ``turn_message`` a later turn of a growing conversation. Both call the env's own
builders (``prompt``, and ``turn_prompt`` where the env has one) with the arguments it accepts, so
an env written to the four-argument contract of ``TextEnv.prompt`` still works. ``history_entry``
is the one rule for what a step adds to the history those prompts read.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from agentrl_envs.actions import parse_action


@functools.cache
def _takes_history_length(env_cls: type) -> bool:
    """Whether ``env_cls.prompt`` accepts ``history_length`` (once per class: it is asked on
    every turn of every episode)."""
    try:
        params = inspect.signature(env_cls.prompt).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "history_length" or p.kind is p.VAR_KEYWORD for p in params)


def user_prompt(env, obs: str, info: dict[str, Any], history: list[tuple[str, str]], step: int, h: int) -> str:
    """The env's full user message: task + the last ``h`` (observation, action) pairs + ``obs``.
    ``env`` is the unwrapped env (its ``prompt`` method)."""
    recent = history[-h:] if h > 0 else []
    if _takes_history_length(type(env)):
        return env.prompt(obs, info, recent, step, history_length=h)
    return env.prompt(obs, info, recent, step)  # an env with only the contract's four arguments


def turn_message(env, obs: str, info: dict[str, Any], step: int) -> str:
    """The user message of a later turn in a growing sequence: the new observation (+ the
    admissible actions where the env lists them). An env may define ``turn_prompt(obs, info, step)``."""
    fn = getattr(env, "turn_prompt", None)
    if callable(fn):
        return fn(obs, info, step)
    lines = [f"Observation: {obs}"]
    adm = info.get("admissible_actions")
    if adm:
        lines.append("Admissible actions: " + ", ".join(adm))
    return "\n".join(lines)


def history_entry(info: dict[str, Any], response: str) -> str:
    """What a step's action is in the history a later prompt shows: the action the env parsed,
    else the body of the response's ``<action>``, else the raw response (a malformed one)."""
    return info.get("action") or parse_action(response) or response
