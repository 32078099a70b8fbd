"""Test envs for the env workers: one that aborts its process, one that hangs, one that sleeps.

``agentrl-test/Crash-v0``: count upwards like ``tests/trainer/count_env.py`` (step t is correct
when the body is ``str(t + 1)``; ``options["length"]`` steps, default 3), except that the body
``abort`` calls ``os.abort()`` (the process dies with SIGABRT, as a crashing compiled engine
would), ``hang`` sleeps for an hour (a wedged call), ``raise`` raises (an ordinary env
error, which must not cost the worker), and ``lock`` / ``local`` answer (without counting the
step) with an ``info`` that cannot be pickled back to the trainer: a ``threading.Lock``
(``TypeError``) or a function defined in ``_execute`` (``AttributeError``). The first observation carries the process id and the
number of envs made in the process, so a test can tell a reused env from a rebuilt one.

``agentrl-test/Sleep-v0``: the same counting game whose reset and step sleep
``options["sleep_ms"]`` (default 20 ms) without using a core: env time that keeps falling with
more workers when the cores are not the limit (``agentrl bench rollout --env
tests.rollout.crash_envs:agentrl-test/Sleep-v0``).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from agentrl_envs.base import TextEnv
from gymnasium.envs.registration import register, registry

CRASH_ID = "agentrl-test/Crash-v0"
SLEEP_ID = "agentrl-test/Sleep-v0"


class CrashEnv(TextEnv):
    env_title = "a counting game"
    made = 0
    """Envs made in this process (a test checks that resets reuse them)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        CrashEnv.made += 1

    def _reset_task(self, seed, options: dict[str, Any]):
        self._length = int(options.get("length", 3))
        self._t = 0
        return f"count from 1 to {self._length}", f"Say 1. (seed {seed}, pid {os.getpid()}, made {CrashEnv.made})", "count", {}

    def _execute(self, action: str):
        body = action.strip()
        if body == "abort":
            os.abort()
        if body == "hang":
            time.sleep(3600)
        if body == "raise":
            raise RuntimeError("crash env failure (test)")
        if body == "lock":  # pickling it: TypeError: cannot pickle '_thread.lock' object
            return f"Say {self._t + 1}.", 0.0, False, True, {"handle": threading.Lock()}
        if body == "local":  # pickling it: AttributeError: Can't pickle local object '...<lambda>'
            return f"Say {self._t + 1}.", 0.0, False, True, {"callback": lambda: None}
        ok = body == str(self._t + 1)
        self._t += 1
        done = self._t >= self._length
        return (f"Say {self._t + 1}." if not done else "Done."), float(ok), done, body.isdigit(), {}

    def expert_action(self):
        return str(self._t + 1) if self._t < self._length else None


class SleepEnv(CrashEnv):
    def _reset_task(self, seed, options: dict[str, Any]):
        self._sleep_s = float(options.get("sleep_ms", 20)) / 1e3
        time.sleep(self._sleep_s)
        return super()._reset_task(seed, {"length": options.get("length", 5)})

    def _execute(self, action: str):
        time.sleep(self._sleep_s)
        return super()._execute(action)


for _id, _cls in ((CRASH_ID, CrashEnv), (SLEEP_ID, SleepEnv)):
    if _id not in registry:
        register(id=_id, entry_point=_cls, max_episode_steps=20)
