"""The envs of one rollout, behind one batch interface: ``reset_many`` / ``step_many`` / prompts.

``run_episodes`` touches envs only through an env batch: ``reset_many`` once for all slots,
``step_many`` once per turn for all active slots, and the two prompt builders. ``InProcessEnvs``
is the plain implementation (envs in this process, one call after another). A pool of worker
processes implements the same methods (``EnvBatch`` below) and drops in through
``run_episodes(..., envs=pool)``: the batched calls are where it runs the envs in parallel, and
where a crash or a timeout becomes an ``EnvFailure`` that ends only the episode concerned.
``TimedEnvs`` wraps any batch to add the seconds of its calls to a ``RolloutTiming``.

Slots are indices 0..n-1; slot i plays task i of a ``run_episodes`` call. A batch may be reused
across calls (``reset_many`` starts every slot afresh); its owner closes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from agentrl_envs.probe import make_env

from agentrl.rollout.prompts import turn_message, user_prompt


@dataclass
class EnvFailure:
    """An env call that raised, died or timed out; ``run_episodes`` ends that episode as an error
    (failed + truncated, ``Episode.error`` = ``reason``) and training goes on."""

    reason: str
    """One line: the call (``reset`` / ``step``), the exception type and its message."""


def _failure(call: str, e: BaseException) -> EnvFailure:
    return EnvFailure(f"{call}: {type(e).__name__}: {e}")


class EnvBatch(Protocol):
    """What ``run_episodes`` needs from a batch of n envs (``InProcessEnvs`` is one)."""

    def reset_many(self, items: list[tuple[int, int | None, dict]]) -> list[tuple[str, dict] | EnvFailure]:
        """Reset slots: items are (slot, seed, options); one (obs, info) or failure per item."""

    def step_many(self, items: list[tuple[int, str]]) -> list[tuple[str, float, bool, bool, dict] | EnvFailure]:
        """Step slots: items are (slot, response text); gymnasium's 5-tuple or a failure per item."""

    def user_prompt(self, i: int, obs: str, info: dict, history: list[tuple[str, str]], t: int, h: int) -> str:
        """Slot i's full user message (task + last h (obs, action) pairs + obs)."""

    def turn_message(self, i: int, obs: str, info: dict, t: int) -> str:
        """Slot i's user message for a later turn of a growing sequence."""

    def max_episode_steps(self) -> int | None:
        """The env's registered step limit (None when it has none)."""

    def close(self) -> None:
        """Close every env (and stop workers, for a pool)."""


class InProcessEnvs:
    """n envs made with ``gymnasium.make`` in this process; calls run one after another.

    A bad env id or bad kwargs raise a one-line ValueError here (a config error, not an episode
    error). An exception inside ``reset``/``step`` becomes an ``EnvFailure`` for that item only.
    The prompt builders raise what the env raises (``run_episodes`` ends that episode).
    """

    def __init__(self, env_id: str, env_kwargs: dict, n: int):
        self.env_id = env_id
        self.envs: list[Any] = []
        try:
            for _ in range(n):
                self.envs.append(make_env(env_id, env_kwargs))
        except ValueError:
            self.close()
            raise

    def reset_many(self, items: list[tuple[int, int | None, dict]]) -> list[tuple[str, dict] | EnvFailure]:
        out: list[tuple[str, dict] | EnvFailure] = []
        for i, seed, options in items:
            try:
                obs, info = self.envs[i].reset(seed=seed, options=options)
                out.append((obs, info))
            except Exception as e:
                out.append(_failure("reset", e))
        return out

    def step_many(self, items: list[tuple[int, str]]) -> list[tuple[str, float, bool, bool, dict] | EnvFailure]:
        out: list[tuple[str, float, bool, bool, dict] | EnvFailure] = []
        for i, response in items:
            try:
                out.append(tuple(self.envs[i].step(response)))
            except Exception as e:
                out.append(_failure("step", e))
        return out

    def snapshot_many(self, slots: list[int]) -> list[tuple[str, Any] | EnvFailure]:
        """Each slot's (``resume_kind``, snapshot or None): optional, for a checkpoint of episodes in
        flight (``agentrl.rollout.continuous``; the pools have it too)."""
        out: list[tuple[str, Any] | EnvFailure] = []
        for i in slots:
            u = self.envs[i].unwrapped
            kind = getattr(u, "resume_kind", "restart")
            try:
                out.append((kind, u.snapshot() if kind == "snapshot" else None))
            except Exception as e:
                out.append(_failure("snapshot", e))
        return out

    def restore_many(self, items: list[tuple[int, int | None, dict, Any]]) -> list[None | EnvFailure]:
        """Reset each slot with (slot, seed, options, snapshot) and set the snapshot."""
        from agentrl_envs.base import restore_in_flight

        out: list[None | EnvFailure] = []
        for i, seed, options, snap in items:
            try:
                self.envs[i].reset(seed=seed, options=options)
                restore_in_flight(self.envs[i], snap)
                out.append(None)
            except Exception as e:
                out.append(_failure("restore", e))
        return out

    def user_prompt(self, i: int, obs: str, info: dict, history: list[tuple[str, str]], t: int, h: int) -> str:
        return user_prompt(self.envs[i].unwrapped, obs, info, history, t, h)

    def turn_message(self, i: int, obs: str, info: dict, t: int) -> str:
        return turn_message(self.envs[i].unwrapped, obs, info, t)

    def max_episode_steps(self) -> int | None:
        spec = self.envs[0].spec if self.envs else None
        return spec.max_episode_steps if spec is not None else None

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # closing is best effort: a broken env must not hide the result
                pass
        self.envs = []


class TimedEnvs:
    """An env batch that adds the seconds of every call to ``timing.env_s`` (a ``RolloutTiming``);
    other attributes (a pool's optional fast paths) pass through untimed. It lives here, not with
    ``run_episodes``, because the contexts call it: the rollout hands it down, nothing calls back
    into ``agentrl.rollout.episodes`` (``tests/trainer/test_round_trips.py``)."""

    _TIMED = ("reset_many", "step_many", "user_prompt", "turn_message")

    def __init__(self, envs: EnvBatch, timing: Any):
        self._envs, self._timing = envs, timing

    def __getattr__(self, name: str):
        fn = getattr(self._envs, name)
        if name not in self._TIMED:
            return fn

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._timing.env_s += time.perf_counter() - t0

        return timed
