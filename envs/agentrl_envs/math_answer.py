"""``agentrl/MathAnswer-v0``: one math problem, one answer, graded by the verifier.

A one-step env for collaborations (``agentrl.collab``; CCPO/SEPO, arXiv 2603.21563): ``reset``
gives the problem, ``step(response)`` grades the response's last ``\\boxed{}`` against the gold
answer with math-verify (``agentrl_envs.tasks.math.verify_response``) and ends the episode. Roles
that do not answer (the Thinker) play with the reset option ``grade: false``: their step scores
0 and ends the episode too. The prompt is not the env's: each role's context renders its own
template from ``info["problem"]``.

Problems: reasoning-gym generators (offline; ``tasks``, ``size`` per split, ``seed``; the valid
split draws from generator seeds offset by ``VALID_SEED_OFFSET``) or, for GPU runs, benchmark
files or hub datasets per split (``benchmarks={"train": {"name": "math", "path": ...}}``, the
kwargs of ``agentrl_envs.tasks.benchmarks.load_benchmark``). ``reset(seed=s)`` plays problem
``s % len(split)``, so seeds 0..n-1 are n distinct problems.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from agentrl_envs.base import MAX_ACTION, MAX_TEXT, PRINTABLE, clip, to_printable
from agentrl_envs.tasks.math import (
    MathProblem,
    check_scale,
    last_boxed,
    reasoning_gym_problems,
    verify_response,
)

SPLITS = ("train", "valid")
VALID_SEED_OFFSET = 100_000
RESET_KEYS = ("split", "grade")


@functools.lru_cache(maxsize=16)
def _generated(split: str, tasks: tuple[str, ...], size: int, seed: int) -> tuple[MathProblem, ...]:
    base = seed + (VALID_SEED_OFFSET if split == "valid" else 0)
    return tuple(reasoning_gym_problems(list(tasks), n=size, seed=base))


def _loaded(spec: dict[str, Any]) -> tuple[MathProblem, ...]:
    from agentrl_envs.tasks.benchmarks import load_benchmark

    spec = dict(spec)
    if "name" not in spec:
        raise ValueError(f"benchmarks: each split needs a 'name' (and optional path, split, limit); got {spec}")
    return tuple(load_benchmark(spec.pop("name"), **spec))


class MathAnswerEnv(gym.Env):
    """One problem per episode, one graded answer (see the module docstring)."""

    metadata = {"render_modes": ["ansi"]}
    resume_kind = "replay"
    """An episode in flight has had no step yet (its one answer ends it): its seeded reset is all."""

    def __init__(self, tasks: list[str] | tuple[str, ...] = ("basic_arithmetic",), size: int = 200, seed: int = 0,
                 scale: str = "01", benchmarks: dict[str, dict] | None = None, render_mode: str | None = None):
        """
        Args:
            tasks: reasoning-gym dataset names (``agentrl_envs.tasks.math.MATH_TASKS``).
            size: generated problems per split.
            seed: generator seed of the train split.
            scale: verifier reward, '01' (1/0, CCPO) or 'pm1' (+1/-1, SEPO's R_ver).
            benchmarks: split -> ``load_benchmark`` kwargs; replaces the generated problems of
                that split.
        """
        self.scale = check_scale(scale)
        if isinstance(tasks, str):
            tasks = [tasks]
        if not tasks or size < 1:
            raise ValueError(f"MathAnswer: needs at least one task and size >= 1, got tasks={tasks}, size={size}")
        bad = sorted(set(benchmarks or {}) - set(SPLITS))
        if bad:
            raise ValueError(f"MathAnswer: benchmarks has unknown split {bad[0]!r}; valid: {', '.join(SPLITS)}")
        self._args = (tuple(tasks), int(size), int(seed))
        self._benchmarks = dict(benchmarks or {})
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_TEXT, min_length=0, charset=PRINTABLE)
        self.action_space = spaces.Text(max_length=MAX_ACTION, min_length=0, charset=PRINTABLE)
        self.problem: MathProblem | None = None
        self._grade = True

    def problems(self, split: str) -> tuple[MathProblem, ...]:
        if split in self._benchmarks:
            return _loaded(self._benchmarks[split])
        return _generated(split, *self._args)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        bad = sorted(set(options) - set(RESET_KEYS))
        if bad:
            raise ValueError(f"unknown reset option(s) {bad}; valid: {', '.join(RESET_KEYS)}")
        split = options.get("split") or "train"
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        problems = self.problems(split)
        if not problems:
            raise ValueError(f"MathAnswer: split {split!r} has no problems")
        self.problem = problems[(seed or 0) % len(problems)]
        self._grade = bool(options.get("grade", True))
        q = to_printable(self.problem.question)
        return q, {"task": q, "problem": q, "task_family": self.problem.source, "won": False,
                   "problem_id": self.problem.id}

    def step(self, response: str):
        if self.problem is None:
            raise RuntimeError("MathAnswer: step before reset")
        text = response if isinstance(response, str) else str(response)
        boxed = last_boxed(text)
        reward = verify_response(text, self.problem.answer, self.scale) if self._grade else 0.0
        info = {"task": self.problem.question, "task_family": self.problem.source,
                "won": bool(self._grade and reward > 0), "action_valid": True,
                "action": clip(boxed if boxed is not None else text, MAX_ACTION), "gold": self.problem.answer}
        return "", float(reward), True, False, info

    def render(self):
        return self.problem.question if self.problem else ""
