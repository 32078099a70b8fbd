"""The learner's state in one place, owned by the trainer and handed down.

``LearnerState`` is what the learner-side handles (``agentrl.algorithms.learner.Learner``, the update
runners, the producer's views of the model) may read: the counters, whether this is training, the
guard's verdict, the algorithm's state between iterations, the metric sink, the seeds of the row
generators, and the objects TRL's loop trains (model, optimizer, scheduler). Only the trainer writes
it (``AgentGRPOTrainer._sync_state`` after TRL's loop moves, ``_gather_and_credit`` for the algorithm's
state, ``_close_step`` for the verdict), so a handle holds this object and never the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


class MetricSink:
    """Values for this logging step's metrics, by mode (TRL's metric buffer behind it: TRL averages
    and clears what is appended here when it logs)."""

    def __init__(self, buffer: dict[str, dict[str, list[float]]]):
        self._buffer = buffer

    def append(self, name: str, value: float, mode: str = "train") -> None:
        self._buffer[mode][name].append(float(value))

    def mode(self, mode: str) -> dict[str, list[float]]:
        """The mode's buffer, name -> values (for a step that appends many)."""
        return self._buffer[mode]


@dataclass
class LearnerState:
    """What the learner's handles read (module docstring); written by the trainer only."""

    metrics: MetricSink
    """Where metric values go (``append(name, value, mode)``)."""
    seed: int
    rank: int
    world: int
    step: int = 0
    """Optimizer steps done (the policy version)."""
    micro_step: int = 0
    """Training micro-steps done (counting the current one once its micro-step has run)."""
    skip_update: bool = False
    """Whether the non-finite guard refused the optimizer step that ends at this micro-step."""
    algorithm_state: Any = None
    """What the algorithm's ``advantages`` hook returned last (e.g. CCPO's running statistics)."""
    model: Any = None
    """The trained model as TRL's loop holds it (wrapped by DDP / DeepSpeed in training)."""
    model_wrapped: Any = None
    """The model TRL generates with (``unwrap_model_for_generation``'s input)."""
    optimizer: Any = None
    lr_scheduler: Any = None

    @property
    def training(self) -> bool:
        """Whether the model is training (False in evaluation)."""
        return bool(self.model is not None and self.model.training)

    def row_rng(self) -> np.random.Generator:
        """The generator that picks rows to drop or repeat: seeded per run, optimizer step and rank."""
        return np.random.default_rng([self.seed, self.step, self.rank])

    def torch_rng(self) -> torch.Generator:
        """A torch generator seeded like ``row_rng`` (a shuffled split of the rows into micro-batches)."""
        return torch.Generator().manual_seed(int(self.row_rng().integers(2**62)))
