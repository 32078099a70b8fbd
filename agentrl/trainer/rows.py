"""Training rows per rank: the same row count on every rank (ZeRO-3 needs equal forwards).

Rows per rank vary with episode lengths. Every rank trains on R rows: R = max over ranks of the
local row count, capped by ``max_rows_per_rank``, rounded up to a multiple of
``steps_per_generation`` (TRL splits the buffer into that many micro-steps). Short ranks add
filler rows (one pad token, loss mask 0: no gradient, not counted in the DAPO normaliser
``num_items_in_batch``); ranks over the cap keep R rows drawn uniformly (seeded by the caller).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agentrl.rollout.contexts import Row


@dataclass
class RowCounts:
    """What ``balance_rows`` did on this rank (logged as ``rows/*``)."""

    real: int
    """Rows the episodes produced here."""
    target: int
    """R: rows every rank trains on."""
    filler: int
    """Masked filler rows added."""
    dropped: int
    """Rows left out because of ``max_rows_per_rank``."""


def row_target(n_max: int, cap: int | None, steps_per_generation: int) -> int:
    """R = min(max(n_max, 1), cap) rounded up to a multiple of ``steps_per_generation``.

    E.g. n_max 5, no cap, 2 micro-steps: R = 6; n_max 9, cap 4, 3 micro-steps: R = 6.
    """
    r = max(n_max, 1)
    if cap is not None:
        r = min(r, cap)
    return int(math.ceil(r / steps_per_generation) * steps_per_generation)


def balance_rows(rows: list[Row], target: int, pad_id: int, rng: np.random.Generator) -> tuple[list[Row], RowCounts]:
    """``target`` rows: ``rows`` (a uniform sample in their order when there are more) + fillers."""
    n_real = len(rows)
    dropped = 0
    if n_real > target:
        keep = sorted(rng.choice(n_real, size=target, replace=False).tolist())
        dropped = n_real - target
        rows = [rows[i] for i in keep]
    filler = target - len(rows)
    rows = rows + [Row(prompt=[pad_id], completion=[pad_id], loss_mask=[0], adv=[0.0])] * filler
    return rows, RowCounts(real=n_real, target=target, filler=filler, dropped=dropped)
