"""``Learner``: the handle an algorithm's learner-side parts get (its update runner, its
policies' training side), instead of the trainer; the trainer (``agentrl.trainer``) builds it.

Where rows train needs: the run's settings, the trained model and its optimizer, the learner's
counters (optimizer step, micro-step, training or evaluation), the collectives that keep ranks'
row counts equal, the seeded generators that pick and split rows, a metric sink, the guard's
verdict on the current optimizer step, the loss's split invariance and the algorithm's state
between iterations. The handle holds those as plain data and the trainer's ``LearnerState``
(``agentrl.trainer.state``: the counters, the verdict, the models as TRL's loop holds them now,
written by the trainer only), and nothing of the trainer itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from agentrl.rollout.ranks import Ranks


class Learner:
    """The learner-side handle (module docstring).

    Args:
        state: the trainer's ``LearnerState`` (read here, never written).
        config: the run's config (``AgentRLConfig``).
        tokenizer: the policy's tokenizer.
        accelerator: the run's ``accelerate.Accelerator`` (device, DeepSpeed plugin, collectives).
        sampling: ``temperature`` and TRL's ``generation_kwargs``.
        decay_parameter_names: model -> the parameters the Trainer's optimizer applies weight decay to.
        split_invariant: whether the loss ignores how rows are split into micro-batches.
        is_deepspeed: whether DeepSpeed runs the model.
    """

    def __init__(self, state, config, tokenizer, accelerator, *, sampling: dict[str, Any],
                 decay_parameter_names: Callable[[Any], list[str]], split_invariant: bool, is_deepspeed: bool):
        self._state = state
        self.config = config
        """The run's config (``AgentRLConfig``)."""
        self.tokenizer = tokenizer
        self.accelerator = accelerator
        """The run's ``accelerate.Accelerator`` (device, DeepSpeed plugin)."""
        self.sampling = dict(sampling)
        """The run's sampling settings: ``temperature`` and TRL's ``generation_kwargs``."""
        self._decay = decay_parameter_names
        self.split_invariant = bool(split_invariant)
        """Whether the loss ignores how rows are split into micro-batches."""
        self.is_deepspeed = bool(is_deepspeed)
        self.ranks = Ranks.of(accelerator)
        """The training processes (``max``: a lock-step collective)."""

    # ------------------------------------------------------------------ models
    @property
    def model(self):
        """The trained model as TRL's loop holds it (wrapped by DDP / DeepSpeed in training)."""
        return self._state.model

    @property
    def unwrapped_model(self):
        return self.accelerator.unwrap_model(self._state.model)

    @property
    def optimizer(self):
        """The trainer's optimizer (None before training starts)."""
        return self._state.optimizer

    def decay_parameter_names(self, model) -> list[str]:
        """The parameters the Trainer's optimizer applies weight decay to (for a role's own optimizer)."""
        return self._decay(model)

    # ------------------------------------------------------------------ counters and verdicts
    @property
    def step(self) -> int:
        """Optimizer steps done (the policy version)."""
        return int(self._state.step)

    @property
    def micro_step(self) -> int:
        """Training micro-steps done (counting the current one once its micro-step has run)."""
        return int(self._state.micro_step)

    @property
    def training(self) -> bool:
        """Whether the model is training (False in evaluation)."""
        return self._state.training

    @property
    def skip_update(self) -> bool:
        """Whether the non-finite guard refused the optimizer step that ends at this micro-step."""
        return bool(self._state.skip_update)

    def learning_rate(self) -> float:
        """The schedule's learning rate now."""
        return float(self._state.lr_scheduler.get_last_lr()[0])

    @property
    def algorithm_state(self) -> Any:
        """What the algorithm's ``advantages`` hook returned last (the trainer replaces it)."""
        return self._state.algorithm_state

    # ------------------------------------------------------------------ rows, collectives, logs
    def row_rng(self) -> np.random.Generator:
        """The generator that picks rows to drop or repeat: seeded per run, optimizer step and rank."""
        return self._state.row_rng()

    def torch_rng(self) -> torch.Generator:
        """A torch generator seeded like ``row_rng`` (a shuffled split of the rows into micro-batches)."""
        return self._state.torch_rng()

    def max_over_ranks(self, n: int) -> int:
        """The largest ``n`` any rank holds (every rank must call it)."""
        return self.ranks.max(n)

    def sum_over_ranks(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` summed over every rank (every rank must call it)."""
        return self.accelerator.gather(x).sum()

    def log_metric(self, name: str, value: float, mode: str = "train") -> None:
        """Add a value to this logging step's ``name`` (values are averaged when logged)."""
        self._state.metrics.append(name, value, mode)

    @property
    def should_save(self) -> bool:
        return bool(self.config.should_save)
