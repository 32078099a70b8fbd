"""``Player``: the handle an algorithm's producer-side hooks get.

What is played (``Algorithm.roll_out``: the initial episodes, APPO's branches, a collaboration's
roles and ratings) needs a few things only: play tasks with the current policy (``play``, over the
run's persistent env batch), the policy's generate and tokenizer, the rollout settings, the
policy version and whether this is training, a collective to keep ranks in lock-step
(``any_rank``), and for APPO a no-grad forward of the policy and its reference (``score``). The
player gives exactly those and nothing of the trainer; it times what it does (``times``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from agentrl.config import rollout_settings
from agentrl.producer.generation import PolicyGeneration
from agentrl.rollout.episodes import Episode, RolloutTiming, run_episodes
from agentrl.rollout.ranks import Ranks
from agentrl.rollout.settings import RolloutSettings

ScoreFn = Callable[..., "tuple[np.ndarray, np.ndarray | None, np.ndarray | None]"]


class Player:
    """The producer-side handle (module docstring).

    Args:
        config: the run's config (its rollout keys: env, context, turns, budgets, workers).
        generation: the trained policy's generate (``PolicyGeneration``).
        tokenizer: the policy's tokenizer.
        ranks: the training processes.
        score: ``(prompts, completions, entropy, reference) -> (log-probs, entropies, reference
            log-probs)`` of completion tokens under the policy (no grad), or None where the
            producer has no such forward.
        progress: show a bar over turns.
    """

    def __init__(self, config, generation: PolicyGeneration, tokenizer, ranks: Ranks, score: ScoreFn | None = None,
                 progress: bool = False):
        self.config = config
        self.generation = generation
        self.tokenizer = tokenizer
        self.ranks = ranks
        self._score = score
        self.progress = progress
        self.step = 0
        """The policy version playing (optimizer steps applied to its weights)."""
        self.training = True
        """Whether the episodes train (False in evaluation)."""
        self.timing = RolloutTiming()
        self._envs = None
        self._plays = 0

    # ------------------------------------------------------------------ what hooks use
    def settings(self, **overrides) -> RolloutSettings:
        """``RolloutSettings`` from the config (+ ``overrides``, any of its fields)."""
        c, g = self.config, self.generation
        after = g.setup.fingerprint_layer is not None and not g.fingerprints_with_generate
        return rollout_settings(
            c, progress=self.progress, sync=self.ranks.max if self.ranks.world > 1 else None,
            pad_batch=g.setup.engine == "vllm", fingerprints_after=self._fingerprints_after if after else None,
            **overrides)

    def play(self, tasks: list[dict], generate=None, tokenizer=None, **overrides) -> list[Episode]:
        """Play ``tasks`` with the current policy (collective: all ranks call it together), or with
        ``generate`` (token-id prompts -> completions) and its ``tokenizer`` (e.g. a role's policy).
        ``overrides`` are ``RolloutSettings`` fields (e.g. ``env_kwargs``, ``context_mode``)."""
        settings = self.settings(**overrides)
        self.generation.begin_play(self.step, self.training, self._plays)
        self._plays += 1
        return run_episodes(tasks, generate or self.generation, tokenizer or self.tokenizer, settings,
                            envs=self._env_batch(settings, len(tasks)), timing=self.timing)

    def generate(self, prompts: list[list[int]]):
        """The current policy's completions of ``prompts`` (one turn)."""
        return self.generation(prompts)

    def any_rank(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank (every rank must call it)."""
        return self.ranks.max(int(bool(flag))) > 0

    def score(self, prompts: list[list[int]], completions: list[list[int]], entropy: bool = False,
              reference: bool = False):
        """(log-probs, entropies or None, reference log-probs or None) of ``completions`` after
        ``prompts``, (N, T) float32 numpy, no grad."""
        if self._score is None:
            raise RuntimeError("this producer has no forward of the policy to score completions with")
        return self._score(prompts, completions, entropy=entropy, reference=reference)

    # ------------------------------------------------------------------ for the source
    def begin(self, step: int, training: bool) -> None:
        """A new iteration at optimizer step ``step``: its plays are counted from 0, its times from 0."""
        self.step, self.training, self._plays = step, training, 0
        self.timing = RolloutTiming()
        self.generation.reset_counters()

    def times(self, rollout_s: float) -> RolloutTiming:
        """The iteration's cost: ``rollout_s`` of wall time, the env batch's and the generation's."""
        g = self.generation
        return RolloutTiming(wall_s=rollout_s, env_s=self.timing.env_s, generate_s=g.seconds,
                             fingerprint_s=g.fingerprint_seconds + self.timing.fingerprint_s, turns=self.timing.turns,
                             tokens=g.tokens)

    def close(self) -> None:
        if self._envs is not None:
            self._envs.close()
            self._envs = None

    def _fingerprints_after(self, prompts: list[list[int]]) -> list[list[float]]:
        chunk = max(1, self.config.per_device_train_batch_size)
        return self.generation.fingerprints_after(prompts, chunk, self.ranks.max)

    def _env_batch(self, settings: RolloutSettings, n: int):
        """This rank's env batch, made at the first rollout and kept for the run: its envs are
        reset, not rebuilt, every iteration. ``env_workers`` > 0: a worker pool; 0: ``LocalEnvs``
        in this process. None (a fresh in-process batch) for a rollout with other env settings
        (a hook's override)."""
        c = self.config
        if (settings.env_id, settings.env_kwargs) != (c.env_id, dict(c.env_kwargs or {})):
            return None
        from agentrl.rollout.env_pool import LocalEnvs, WorkerEnvs, default_workers

        if self._envs is None:
            w = default_workers(n, self.ranks.world) if c.env_workers == "auto" else int(c.env_workers)
            self._envs = (WorkerEnvs(c.env_id, dict(c.env_kwargs or {}), n, workers=w, timeout_s=c.env_timeout_s)
                          if w > 0 else LocalEnvs(c.env_id, dict(c.env_kwargs or {}), n))
        self._envs.resize(n)
        return self._envs


def shape_rewards(episodes: list[Episode], bonus: float) -> None:
    """Add ``bonus`` (``valid_action_reward``) to accepted actions; the env's own reward is kept as
    ``info.env_reward``."""
    for ep in episodes:
        for r in ep.steps:
            r.info["env_reward"] = r.reward
            if bonus and r.valid:
                r.reward = r.reward + bonus


__all__ = ["Player", "Ranks", "shape_rewards"]
