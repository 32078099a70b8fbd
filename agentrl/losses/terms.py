"""The terms every surrogate shares, on a ``LossBatch``: the old log-probs, the log-ratio, the k3
KL estimator, and the masked means the metrics report. Their own module, below ``compose`` and
``policy``: the composition frame calls a surrogate, the surrogate calls these, and nothing calls
back into the frame (``tests/trainer/test_round_trips.py``)."""

from __future__ import annotations

import torch

from .batch import LossBatch, LossSettings


def old_logps(b: LossBatch) -> torch.Tensor:
    """The log-probs the rows were generated with (``logps`` detached when on-policy)."""
    return b.logps.detach() if b.old_logps is None else b.old_logps


def log_ratio(b: LossBatch, s: LossSettings) -> torch.Tensor:
    """log r: (B, T) per token, or (B, 1) per row at ``ratio_level`` 'sequence'."""
    lr = b.logps - old_logps(b)
    if s.ratio_level == "sequence":
        return ((lr * b.mask).sum(-1) / b.mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    return lr


def kl_k3(b: LossBatch) -> torch.Tensor:
    """The k3 estimator of KL(policy || reference) per token (non-negative, 0 where they agree)."""
    d = b.ref_logps - b.logps
    return torch.exp(d) - d - 1


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum, count) of ``x`` over the mask's tokens (the trainer divides after summing over ranks)."""
    x = x.expand_as(mask)
    return (x * mask).sum().detach(), mask.sum().detach()


def row_means(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's mean of ``x`` over its mask's tokens (rows without any: NaN, skipped by min/max)."""
    x = x.expand_as(mask)
    return ((x * mask).sum(-1) / mask.sum(-1)).detach()
