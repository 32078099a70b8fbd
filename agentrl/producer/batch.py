"""What a rollout source hands the learner: one iteration's episodes, the policy version that
played them and what playing them cost; and the interface every source implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentrl.rollout.episodes import RolloutTiming

if TYPE_CHECKING:
    from agentrl.rollout.episode import Episode


@dataclass
class RolloutBatch:
    """One iteration's episodes on this rank, as the learner receives them."""

    episodes: list[Episode]
    """This rank's episodes in task order, the algorithm's extra ones (branches, counterfactuals)
    after them; rewards already shaped."""
    version: int
    """The policy version (optimizer steps applied) whose weights played them."""
    times: RolloutTiming = field(default_factory=RolloutTiming)
    """What playing them cost: wall (the algorithm's ``roll_out``), env and generate seconds, the
    fingerprints', generated tokens."""
    wait_s: float | None = None
    """The learner's seconds inside ``next`` (None: the rollout's own, ``times.wall_s``)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The source's own metrics of the iteration (``async/*``)."""
    sampler_differs: bool = False
    """Whether the distribution the tokens were drawn from can differ from the learner's (vLLM,
    ``sampler_dtype``; an asynchronous source's older weights: set it whenever ``version`` may lag
    the learner): the learner then corrects with the episodes' behaviour log-probs
    (``agentrl.trainer.update.corrects``). False: the sampler is the learner."""


class RolloutSource(Protocol):
    """Where the learner's batches come from. The learner calls ``next`` once per iteration with
    the iteration's task rows (TRL's sampler: ``task_id``, ``task_seed``, ``task_options``, each
    task ``num_generations`` times) and its optimizer step, and ``publish`` after every optimizer
    step."""

    def next(self, rows: list[dict[str, Any]], step: int, training: bool = True) -> RolloutBatch:
        """The batch the learner trains on at optimizer step ``step`` (a collective across the
        training processes)."""

    def publish(self, version: int) -> None:
        """The learner's weights are now at ``version`` (optimizer steps applied)."""

    def close(self) -> None:
        """Release envs, workers and processes."""
