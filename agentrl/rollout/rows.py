"""Training rows per rank: the same row count on every rank (ZeRO-3 needs equal forwards).

Rows per rank vary with episode lengths. Every rank trains on R rows: R = max over ranks of the
local row count, capped by ``max_rows_per_rank``, rounded up to a multiple of
``steps_per_generation`` (TRL splits the buffer into that many micro-steps). Short ranks add
filler rows (one pad token, loss mask 0: no gradient, not counted in the DAPO normaliser
``num_items_in_batch``); ranks over the cap keep R rows drawn uniformly (seeded by the caller).

Before that, ``per_episode`` / ``episode_rows`` turn episodes and their records' advantages into
rows (one offset loop for every caller). Then the update: ``length_grouped_micro_batches`` cuts the R rows into TRL's micro-batches by
length and trims each one's padding, so the update computes few padding positions.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from agentrl.rollout.contexts import Row
from agentrl.rollout.episodes import Episode


def per_episode(episodes: list[Episode], values: Sequence) -> Iterator[tuple[Episode, Sequence]]:
    """(episode, its slice of ``values``) for each episode with steps. ``values`` holds one entry
    per step record, episode after episode: the order the trainer gathers records in."""
    i = 0
    for ep in episodes:
        n = len(ep.steps)
        if n:
            yield ep, values[i: i + n]
        i += n


def episode_rows(ep: Episode, adv: Sequence, per_token: dict[str, np.ndarray] | None = None) -> list[Row]:
    """The episode's rows from the context that played it; ``per_token[traj_id]`` (an algorithm's
    token-level advantages, e.g. APPO's Eq. 6) replaces the per-record ones where given."""
    rows = ep.context.rows(ep, adv)
    tok = (per_token or {}).get(ep.traj_id)
    if tok is None:
        return rows
    return [replace(r, adv=[float(x) for x in tok]) for r in rows]


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


# ------------------------------------------------------------------ micro-batches without padding waste
# Columns of TRL's training batch by how they are padded: prompts on the left, completions on
# the right. Any other key (e.g. num_items_in_batch, a 0-d tensor) is shared by every micro-batch.
_PROMPT_KEYS = ("prompt_ids", "prompt_mask")
_COMPLETION_KEYS = ("completion_ids", "completion_mask", "tool_mask", "advantages", "old_per_token_logps",
                    "ref_per_token_logps")


def real_token_share(micro_batches: list[dict[str, torch.Tensor]]) -> float:
    """Real tokens / positions the update computes (prompt + completion widths x rows)."""
    real = sum(int(mb["prompt_mask"].sum() + mb["completion_mask"].sum()) for mb in micro_batches)
    computed = sum(mb["prompt_mask"].numel() + mb["completion_mask"].numel() for mb in micro_batches)
    return real / max(computed, 1)


def trim_padding(mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the prompt columns that are padding in every row (left) and the completion columns
    that are padding in every row (right). Padding is masked out of attention and loss, so the
    rows' log-probs are unchanged (up to float rounding: left-trimming shifts absolute positions,
    which rotary attention sees only as relative ones)."""
    out = dict(mb)
    p_any = mb["prompt_mask"].any(0).nonzero()
    start = int(p_any[0]) if len(p_any) else 0
    c_any = mb["completion_mask"].any(0).nonzero()
    end = int(c_any[-1]) + 1 if len(c_any) else 1
    for k in _PROMPT_KEYS:
        out[k] = mb[k][:, start:]
    for k in _COMPLETION_KEYS:
        if isinstance(mb.get(k), torch.Tensor) and mb[k].dim() == 2:
            out[k] = mb[k][:, :end]
    return out


def length_grouped_micro_batches(batch: dict[str, torch.Tensor], n: int) -> list[dict[str, torch.Tensor]]:
    """Split ``batch`` into ``n`` equal micro-batches of rows of similar length, each trimmed.

    Rows are sorted by real length (prompt + completion), cut into ``n`` contiguous chunks and
    each chunk loses its all-padding columns. The sum of the micro-batch losses is the same as
    for any other split into equal chunks whenever the loss normalisation does not depend on the
    chunk's content (every TRL loss type except ``bnpo``, whose denominator is the chunk's own
    token count), so one optimizer step over all of them gives the same gradient.
    """
    lengths = batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)
    order = torch.argsort(lengths.cpu(), stable=True).to(lengths.device)
    rows = lengths.shape[0]
    size = rows // n
    out = []
    for i in range(n):
        idx = order[i * size:(i + 1) * size]
        mb = {k: v[idx] if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == rows else v
              for k, v in batch.items()}
        out.append(trim_padding(mb))
    return out
