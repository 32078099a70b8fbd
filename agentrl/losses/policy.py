"""The GRPO family of policy losses: one clipped surrogate, four ways to normalise it.

Per token (PPO's clipped objective with GRPO's k3 KL term, arXiv 2402.03300 Eq. 3-4):

    r      = exp(logp - logp_old)                 (GSPO, arXiv 2507.18071: one r per row, the
                                                   exponential of the row's mean log-ratio)
    loss_t = -min(min(r, delta) * A, clip(r, 1 - eps_low, 1 + eps_high) * A) + beta * KL_t
    KL_t   = exp(ref - logp) - (ref - logp) - 1   (times r with kl_bias_correction)

``delta`` caps the unclipped ratio (the dual clip TRL calls ``delta``). The registered names are
TRL's ``loss_type`` values and reduce the masked per-token loss as TRL 1.16 does, so a recipe's
``loss_type`` picks the same loss it always did (tests/trainer/test_losses.py checks each against
TRL's own ``_compute_loss`` on one batch):

    dapo     sum over the optimizer step's loss tokens (``settings.tokens``)
    bnpo     mean over this micro-batch's loss tokens, / accumulation
    grpo     mean over rows of each row's token mean, / accumulation
    dr_grpo  sum / (rows x max_completion_length), / accumulation
"""

from __future__ import annotations

import torch

from . import LossBatch, LossOutput, LossSettings, register_policy_loss


def log_ratio(b: LossBatch, s: LossSettings) -> torch.Tensor:
    """log r: (B, T) per token, or (B, 1) per row at ``ratio_level`` 'sequence'."""
    old = b.logps.detach() if b.old_logps is None else b.old_logps
    lr = b.logps - old
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


def clipped_surrogate(b: LossBatch, s: LossSettings) -> tuple[torch.Tensor, LossOutput]:
    """The per-token loss (B, T) before masking, and the metrics and terms every form logs."""
    ratio = torch.exp(log_ratio(b, s))
    clipped = torch.clamp(ratio, 1 - s.epsilon_low, 1 + s.epsilon_high)
    capped = ratio if s.delta is None else torch.clamp(ratio, max=s.delta)
    per_token = -torch.min(capped * b.advantages, clipped * b.advantages)
    out = LossOutput(loss=per_token.new_zeros(()))
    out.terms["policy"] = (per_token * b.mask).sum().detach()
    if s.beta != 0.0:
        kl = kl_k3(b)
        if s.kl_bias_correction:
            kl = kl * ratio
        per_token = per_token + s.beta * kl
        out.terms["kl"] = (kl * b.mask).sum().detach()
        out.means["kl"] = masked_mean(kl.detach(), b.mask)
    if b.entropy is not None:
        out.means["entropy"] = masked_mean(b.entropy.detach(), b.mask)
    low = ((ratio < 1 - s.epsilon_low) & (b.advantages < 0)).float()
    high = ((ratio > 1 + s.epsilon_high) & (b.advantages > 0)).float()
    out.means.update({"clip_ratio/low_mean": masked_mean(low, b.mask), "clip_ratio/high_mean": masked_mean(high, b.mask),
                      "clip_ratio/region_mean": masked_mean(torch.clamp(low + high, max=1.0), b.mask)})
    out.extremes.update({"clip_ratio/low_min": ("min", row_means(low, b.mask)),
                         "clip_ratio/high_max": ("max", row_means(high, b.mask))})
    return per_token, out


def _reduced(b: LossBatch, s: LossSettings, reduce) -> LossOutput:
    per_token, out = clipped_surrogate(b, s)
    out.loss = reduce(per_token * b.mask, b.mask, s)
    return out


@register_policy_loss("dapo")
def dapo(b: LossBatch, s: LossSettings) -> LossOutput:
    """Token sum over the optimizer step's loss-token count (every token weighs the same)."""
    return _reduced(b, s, lambda x, m, s: x.sum() / max(s.tokens, 1.0))


@register_policy_loss("bnpo")
def bnpo(b: LossBatch, s: LossSettings) -> LossOutput:
    """Token mean over this micro-batch (depends on how rows are split into micro-batches)."""
    return _reduced(b, s, lambda x, m, s: x.sum() / m.sum().clamp(min=1.0) / s.accumulation)


@register_policy_loss("grpo")
def grpo(b: LossBatch, s: LossSettings) -> LossOutput:
    """Mean over rows of each row's token mean (GRPO's original length normalisation)."""
    return _reduced(b, s, lambda x, m, s: (x.sum(-1) / m.sum(-1).clamp(min=1.0)).mean() / s.accumulation)


@register_policy_loss("dr_grpo")
def dr_grpo(b: LossBatch, s: LossSettings) -> LossOutput:
    """Token sum over rows x a constant length (Dr. GRPO, arXiv 2503.20783: no length bias)."""
    return _reduced(b, s, lambda x, m, s: x.sum() / (x.size(0) * s.max_completion_length) / s.accumulation)
