"""``agentrl-test/ParityMath-v0``: MathAnswer with a grader a random tiny model can pass.

The real verifier gives a random-init tiny model R = 0 on every answer, so every advantage would
be 0 and no weight would move. Here an answer is right when its character count is odd (like the
counting env's parity variant): rewards then spread inside groups, and the trainer's plumbing
(roles, counterfactuals, credit, blocks, checkpoints) is exercised with real gradients. The
verifier itself is tested on real answers in tests/tasks and tests/collab/test_math_env.py.
"""

from agentrl_envs.math_answer import MathAnswerEnv
from gymnasium.envs.registration import register, registry


class ParityMathEnv(MathAnswerEnv):
    def step(self, response):
        obs, reward, term, trunc, info = super().step(response)
        if self._grade:
            right = len(response) % 2 == 1
            reward = 1.0 if right else (-1.0 if self.scale == "pm1" else 0.0)
            info["won"] = right
        return obs, reward, term, trunc, info


if "agentrl-test/ParityMath-v0" not in registry:
    register(id="agentrl-test/ParityMath-v0", entry_point=ParityMathEnv, max_episode_steps=1)
