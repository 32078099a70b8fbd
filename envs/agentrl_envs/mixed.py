"""Several envs in one run: ``env_id: agentrl/Mixed-v0`` with the env list in ``env_kwargs``.

    env_id: agentrl/Mixed-v0
    env_kwargs:
      envs:
        - {id: agentrl/TextCraft-v0, weight: 2, kwargs: {prompt_style: compact}, options: {families: [depth2]}}
        - {id: agentrl/FiniteMDP-v0, weight: 1}
        - {id: "openenv:http://127.0.0.1:8000", weight: 1, name: counter, kwargs: {success_reward: 1}}

A task seed picks its env: the seeds cycle through a pattern in which env i takes ``weight_i`` of
every ``sum(weights)`` consecutive seeds (weights are positive integers), so the share of each
env among a run's tasks is its weight's, exactly over every full cycle, and every rollout of a
task (a GRPO group: one seed) plays the same env. Credit is computed per group as with one env.
The chosen env is reset with the seed and its entry's ``options`` (over the recipe's reset
options, which go to every env: leave them empty when the envs differ). ``info["task_family"]``
is the env's ``name`` (default: the id's short name, ``TextCraft``), so the per-family metrics
(``env/success/<family>``, ``env/return/<family>``) are per env, and ``info["env_id"]`` says
which env played. Prompts, turn messages and the expert are the chosen env's own. The mix has no
step limit of its own: each env ends at its own (set the recipe's ``max_turns``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium import spaces

from agentrl_envs.base import MAX_ACTION, MAX_TEXT, PRINTABLE, restore_in_flight
from agentrl_envs.prompts import turn_message, user_prompt

ENTRY_KEYS = ("id", "weight", "kwargs", "options", "name")


def short_name(env_id: str) -> str:
    """``agentrl/TextCraft-v0`` -> ``TextCraft``; an ``openenv:`` URL -> ``openenv``."""
    if env_id.startswith("openenv:"):
        rest = env_id[len("openenv:"):]
        return "openenv" if "://" in rest else rest
    return env_id.split(":")[-1].rsplit("/", 1)[-1].split("-v")[0]


def check_entries(envs: Any) -> list[dict[str, Any]]:
    """The env list, checked: each entry an ``id`` with a positive integer ``weight`` (default 1)
    and optional ``kwargs``, ``options`` and ``name`` (distinct names). ValueError in one line."""
    if not isinstance(envs, list) or not envs:
        raise ValueError("agentrl/Mixed-v0 needs env_kwargs envs: a non-empty list of {id, weight, kwargs, options, name}")
    out = []
    for n, e in enumerate(envs):
        e = {"id": e} if isinstance(e, str) else e
        if not isinstance(e, dict) or not isinstance(e.get("id"), str):
            raise ValueError(f"envs[{n}] must be an env id or a mapping with an 'id', got {e!r}")
        unknown = sorted(set(e) - set(ENTRY_KEYS))
        if unknown:
            raise ValueError(f"envs[{n}] ({e['id']}): unknown key(s) {unknown}; valid: {', '.join(ENTRY_KEYS)}")
        w = e.get("weight", 1)
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ValueError(f"envs[{n}] ({e['id']}): weight must be a positive integer, got {w!r}")
        for key in ("kwargs", "options"):
            if not isinstance(e.get(key) or {}, dict):
                raise ValueError(f"envs[{n}] ({e['id']}): {key} must be a mapping, got {e[key]!r}")
        out.append({"id": e["id"], "weight": w, "kwargs": dict(e.get("kwargs") or {}),
                    "options": dict(e.get("options") or {}), "name": str(e.get("name") or short_name(e["id"]))})
    names = [e["name"] for e in out]
    if len(set(names)) < len(names):
        raise ValueError(f"two envs share a name in {names}: give each a distinct 'name'")
    return out


def env_of_seed(weights: list[int], seed: int) -> int:
    """The index of the env that plays task ``seed`` (module docstring)."""
    pattern = [i for i, w in enumerate(weights) for _ in range(w)]
    return pattern[int(seed) % len(pattern)]


class MixedEnv(gym.Env):
    """Several envs behind one gymnasium env, one per task seed (module docstring)."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, envs: list[Any]):
        from agentrl_envs.probe import make_env

        self.entries = check_entries(envs)
        self.envs = [make_env(e["id"], e["kwargs"]) for e in self.entries]
        self.observation_space = spaces.Text(max_length=MAX_TEXT, min_length=0, charset=PRINTABLE)
        self.action_space = spaces.Text(max_length=MAX_ACTION, min_length=0, charset=PRINTABLE)
        self.current = 0

    def _tag(self, info: dict[str, Any]) -> dict[str, Any]:
        e = self.entries[self.current]
        return {**info, "task_family": e["name"], "env_id": e["id"]}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.current = env_of_seed([e["weight"] for e in self.entries], seed or 0)
        opts = {**(options or {}), **self.entries[self.current]["options"]}
        obs, info = self.envs[self.current].reset(seed=seed, options=opts or None)
        return obs, self._tag(info)

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.envs[self.current].step(action)
        return obs, reward, terminated, truncated, self._tag(info)

    # --- the chosen env's prompts and expert -----------------------------------------------------
    def prompt(self, obs: str, info: dict[str, Any], history: list[tuple[str, str]], step: int,
               history_length: int | None = None) -> str:
        h = len(history) if history_length is None else history_length
        return user_prompt(self.envs[self.current].unwrapped, obs, info, history, step, h)

    def turn_prompt(self, obs: str, info: dict[str, Any], step: int) -> str:
        return turn_message(self.envs[self.current].unwrapped, obs, info, step)

    def expert_action(self) -> str | None:
        return self.envs[self.current].unwrapped.expert_action()

    # --- resume: the chosen env's way (TextEnv.resume_kind); another kind of env restarts ---------
    @property
    def resume_kind(self) -> str:
        return getattr(self.envs[self.current].unwrapped, "resume_kind", "restart")

    def snapshot(self):
        return self.envs[self.current].unwrapped.snapshot()

    def restore(self, snap) -> None:
        restore_in_flight(self.envs[self.current], snap)

    def render(self):
        return self.envs[self.current].render()

    def close(self):
        for env in self.envs:
            env.close()
