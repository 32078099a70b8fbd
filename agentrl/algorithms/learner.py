"""``Learner``: the handle an algorithm's learner-side parts get (its update runner, its
policies' training side), instead of the trainer; the trainer (``agentrl.trainer``) builds it.

Where rows train needs: the run's settings, the trained model and its optimizer, the learner's
counters (optimizer step, micro-step, training or evaluation), the collectives that keep ranks'
row counts equal, the seeded generators that pick and split rows, a metric sink, the guard's
verdict on the current optimizer step, the loss's split invariance, the algorithm's state
between iterations and the model folder writer. The handle exposes those, read through to the
trainer at the moment of the call, and nothing else of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agentrl.rollout.ranks import Ranks


class Learner:
    """The learner-side handle (module docstring)."""

    def __init__(self, trainer):
        self._t = trainer
        self.ranks = Ranks.of(trainer.accelerator)
        """The training processes (``max``: a lock-step collective)."""

    # ------------------------------------------------------------------ settings and models
    @property
    def config(self):
        """The run's config (``AgentRLConfig``)."""
        return self._t.args

    @property
    def tokenizer(self):
        return self._t.processing_class

    @property
    def model(self):
        """The trained model as the trainer holds it (wrapped by DDP / DeepSpeed in training)."""
        return self._t.model

    @property
    def unwrapped_model(self):
        return self._t.accelerator.unwrap_model(self._t.model)

    @property
    def optimizer(self):
        """The trainer's optimizer (None before training starts)."""
        return self._t.optimizer

    @property
    def accelerator(self):
        """The run's ``accelerate.Accelerator`` (device, DeepSpeed plugin)."""
        return self._t.accelerator

    @property
    def is_deepspeed(self) -> bool:
        return bool(self._t.is_deepspeed_enabled)

    @property
    def sampling(self) -> dict[str, Any]:
        """The run's sampling settings: ``temperature`` and TRL's ``generation_kwargs``."""
        return {"temperature": self._t.temperature, "generation_kwargs": dict(self._t.generation_kwargs)}

    def decay_parameter_names(self, model) -> list[str]:
        """The parameters the Trainer's optimizer applies weight decay to (for a role's own optimizer)."""
        return self._t.get_decay_parameter_names(model)

    # ------------------------------------------------------------------ counters and verdicts
    @property
    def step(self) -> int:
        """Optimizer steps done (the policy version)."""
        return int(self._t.state.global_step)

    @property
    def micro_step(self) -> int:
        """Training micro-steps done (counting the current one once its micro-step has run)."""
        return self._t.micro_step

    @property
    def training(self) -> bool:
        """Whether the model is training (False in evaluation)."""
        return bool(self._t.model.training)

    @property
    def skip_update(self) -> bool:
        """Whether the non-finite guard refused the optimizer step that ends at this micro-step."""
        return bool(self._t.skip_update)

    @property
    def split_invariant(self) -> bool:
        """Whether the loss ignores how rows are split into micro-batches."""
        return self._t.loss_is_split_invariant()

    def groups_rows_by_length(self) -> bool:
        return self._t.groups_rows_by_length()

    def learning_rate(self) -> float:
        """The schedule's learning rate now."""
        return float(self._t.lr_scheduler.get_last_lr()[0])

    @property
    def algorithm_state(self) -> Any:
        """What the algorithm's ``advantages`` hook returned last (checkpointed by its runner)."""
        return self._t.algorithm_state

    @algorithm_state.setter
    def algorithm_state(self, value: Any) -> None:
        self._t.algorithm_state = value

    # ------------------------------------------------------------------ rows, collectives, logs
    def row_rng(self) -> np.random.Generator:
        """The generator that picks rows to drop or repeat: seeded per run, optimizer step and rank."""
        return np.random.default_rng([self.config.seed, self.step, self.ranks.rank])

    def torch_rng(self) -> torch.Generator:
        """A torch generator seeded like ``row_rng`` (a shuffled split of the rows into micro-batches)."""
        return torch.Generator().manual_seed(int(self.row_rng().integers(2**62)))

    def max_over_ranks(self, n: int) -> int:
        """The largest ``n`` any rank holds (every rank must call it)."""
        return self.ranks.max(n)

    def sum_over_ranks(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` summed over every rank (every rank must call it)."""
        return self._t.accelerator.gather(x).sum()

    def log_metric(self, name: str, value: float, mode: str = "train") -> None:
        """Add a value to this logging step's ``name`` (values are averaged when logged)."""
        self._t.log_metric(name, value, mode)

    # ------------------------------------------------------------------ folders
    @property
    def should_save(self) -> bool:
        return bool(self._t.args.should_save)

    def save_model(self, output_dir: str) -> None:
        """The trained model (or adapter) as it is now into ``output_dir`` (collective under ZeRO-3)."""
        self._t.save_model(output_dir, _internal_call=True)
