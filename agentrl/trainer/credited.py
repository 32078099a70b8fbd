"""The credit glue between the trainer and ``agentrl.credit``: one iteration's step records of all
ranks, their advantages and this rank's slice of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentrl.records import StepRecord


def credit_requirements(name: str, kw: dict[str, Any]) -> frozenset:
    from agentrl import credit

    return frozenset(credit.requirements(name, **kw))


@dataclass
class Credited:
    """The global step records of one iteration with their advantages."""

    records: list[StepRecord]
    """All ranks' records, rank by rank."""
    advantages: np.ndarray
    """One advantage per record (the credit module's output)."""
    diagnostics: dict[str, Any]
    """The credit module's diagnostics (logged as ``credit/<name>``)."""
    offset: int
    """Index of this rank's first record in ``records``."""
    n_local: int
    """Number of this rank's records."""
    seconds: float
    """Time spent gathering and computing credit."""
    per_token: dict[str, np.ndarray] = field(default_factory=dict)
    """traj_id -> token advantages replacing that episode's per-record ones (the algorithm's)."""

    def local(self) -> np.ndarray:
        """This rank's advantages, aligned with its episodes' steps."""
        return self.advantages[self.offset: self.offset + self.n_local]
