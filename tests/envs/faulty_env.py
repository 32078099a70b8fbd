"""``agentrl/Faulty-v0``: a tiny text env whose ``crash`` command raises, for the server tests
(``agentrl-envs serve tests.envs.faulty_env:agentrl/Faulty-v0``). Registered on import.

Its task is to reach 3 by ``add 1`` commands (+1 reward when it does); ``crash`` raises
RuntimeError inside ``step``, as a broken engine would; ``abort`` kills the process (SIGABRT, as
a segfault in a compiled engine would) and ``hang`` sleeps for a minute.
"""

from __future__ import annotations

import os
import time

from agentrl_envs.base import TextEnv
from gymnasium.envs.registration import register, registry


class FaultyEnv(TextEnv):
    env_title = "a counter"

    def _reset_task(self, seed, options):
        self.n = 0
        return "reach 3", f"count {self.n}", "count", {}

    def _execute(self, action):
        if action == "crash":
            raise RuntimeError("the engine broke")
        if action == "abort":
            os.abort()
        if action == "hang":
            time.sleep(60)
        if action != "add 1":
            return f"unknown command {action!r}", 0.0, False, False, {}
        self.n += 1
        won = self.n >= 3
        return f"count {self.n}", 1.0 if won else 0.0, won, True, {"won": won}

    def expert_action(self):
        return "add 1"


if "agentrl/Faulty-v0" not in registry:
    register(id="agentrl/Faulty-v0", entry_point=FaultyEnv, max_episode_steps=10)
