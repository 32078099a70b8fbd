"""Which roles train when: ``RoleSchedule`` (role blocks or every role) and role-ordered optimizer steps: every role of a collaboration trains on every rollout, each with
its own policy (``role_schedule: both`` with ``collab_policies: lora | full``).

Separate policies share one model and one optimizer (``agentrl.policies.swap``): an
optimizer step can only train the policy that is loaded. So a rollout's rows are ordered by role
and its optimizer steps take the roles in turn (Thinker first): with ``k`` optimizer steps per
rollout (``steps_per_generation / gradient_accumulation_steps``, a multiple of the number of
roles ``n``), role ``r`` trains in steps ``r*k/n .. (r+1)*k/n - 1`` on its own rows only, and the
trainer activates its policy (weights and AdamW state) before the step's first micro-batch.
A policy's update therefore reads only its role's rows, and each policy's AdamW state steps
``k/n`` times per rollout, exactly as if it had its own optimizer (``tests/collab/test_policies.py``).

Shared across the policies: the learning-rate schedule (one optimizer step counter; a role's
steps get the learning rate of their position, e.g. Thinker at steps 0, 2, 4 ... and Solver at
1, 3, 5 ... with two roles and k = 2) and ``max_steps``, which counts every role's steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from agentrl.rollout.contexts import Row
from agentrl.rollout.rows import (
    RowCounts,
    balance_rows,
    length_grouped_micro_batches,
    row_target,
    take,
    trim_padding,
)


@dataclass(frozen=True)
class RoleSchedule:
    """Which roles train at an optimizer step (pure in the step, so a resume continues it)."""

    roles: tuple[str, ...]
    """Role names in acting order."""
    kind: str = "blocks"
    """'blocks': one role per block of ``block_steps`` steps, in order; 'both': every role."""
    block_steps: int = 10
    """Steps per block (arXiv 2603.21563 Theorem 4.1 and the authors' code: 10)."""

    def trained(self, step: int) -> tuple[str, ...]:
        if self.kind == "both":
            return self.roles
        return (self.roles[(step // self.block_steps) % len(self.roles)],)


@dataclass(frozen=True)
class RoleSteps:
    """Where each role's rows go in a rollout's micro-batches (module docstring)."""

    n_roles: int
    """Roles trained per rollout, in acting order."""
    steps_per_generation: int
    """TRL's micro-batches per rollout (``steps_per_generation``)."""
    grad_accum: int
    """Micro-batches per optimizer step (``gradient_accumulation_steps``)."""

    def __post_init__(self):
        if self.steps_per_generation % (self.grad_accum * self.n_roles):
            raise ValueError(f"steps_per_generation ({self.steps_per_generation}) must be a multiple of "
                             f"gradient_accumulation_steps ({self.grad_accum}) x roles ({self.n_roles})")

    @property
    def micro_per_role(self) -> int:
        """Micro-batches of one role per rollout (a role's row count is rounded to a multiple)."""
        return self.steps_per_generation // self.n_roles

    def role_at(self, micro_step: int) -> int:
        """Index of the role whose rows micro-step ``micro_step`` (TRL's ``_step``) trains.
        E.g. 2 roles, steps_per_generation 4, accumulation 2: micro-steps 0-1 -> 0, 2-3 -> 1, 4 -> 0."""
        return (micro_step % self.steps_per_generation) // self.micro_per_role

    def balance(self, rows_by_role: list[list[Row]], n_max: int, cap: int | None, pad_id: int,
                rng: np.random.Generator) -> tuple[list[Row], RowCounts]:
        """Every role's rows padded (or sampled) to the same count R, concatenated in role order.

        ``n_max``: the largest row count of any role on any rank; ``cap``: ``max_rows_per_rank``,
        split evenly between the roles. R = min(n_max, cap / n) rounded up to a multiple of
        ``micro_per_role``; e.g. rows 5 and 4, no cap, 2 micro-batches per role: R = 6, fillers 1 and 2.
        """
        target = row_target(n_max, cap // self.n_roles if cap else None, self.micro_per_role)
        out: list[Row] = []
        total = RowCounts(real=0, target=0, filler=0, dropped=0)
        for rows in rows_by_role:
            got, c = balance_rows(rows, target, pad_id, rng)
            out += got
            total = RowCounts(total.real + c.real, total.target + c.target, total.filler + c.filler,
                              total.dropped + c.dropped)
        return out, total

    def micro_batches(self, batch: dict[str, torch.Tensor], by_length: bool,
                      count: Callable[[torch.Tensor], torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """The rollout's micro-batches in training order: role after role, each role's rows cut
        into its optimizer steps (contiguous: a step holds whole prompt groups where sizes allow),
        each step into ``grad_accum`` micro-batches (grouped by length when ``by_length``: the
        step's gradient does not depend on the grouping then, see ``length_grouped_micro_batches``).

        ``num_items_in_batch`` of every micro-batch is set so that the token-mean loss (``dapo``)
        divides by the tokens of that optimizer step, across ranks (``count``: the all-rank sum of
        a local count), not by those of the whole rollout: its normaliser is
        ``num_items_in_batch * gradient_accumulation_steps / steps_per_generation``
        (``agentrl.trainer.update.loss_settings``).
        """
        rows = batch["input_ids"].shape[0]
        steps = self.steps_per_generation // self.grad_accum
        if rows % self.steps_per_generation:
            raise ValueError(f"{rows} rows do not split into {self.steps_per_generation} micro-batches")
        size = rows // steps
        out = []
        for s in range(steps):
            step = take(batch, torch.arange(s * size, (s + 1) * size))
            items = count(step["loss_mask"].sum())
            step["num_items_in_batch"] = items * self.steps_per_generation / self.grad_accum
            if by_length:
                out += length_grouped_micro_batches(step, self.grad_accum)
            else:
                m = size // self.grad_accum
                out += [trim_padding(take(step, torch.arange(i * m, (i + 1) * m)))
                        for i in range(self.grad_accum)]
        return out
