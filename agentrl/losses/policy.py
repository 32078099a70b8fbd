"""The GRPO family of policy losses: four surrogates, five reductions, TRL 1.16's eight loss types.

Surrogates, per token before the mask, with r = exp(logp - logp_old) per token, or per row at
``ratio_level`` 'sequence' (GSPO, arXiv 2507.18071: the exponential of the row's mean log-ratio);
sg() stops the gradient:

    clip   -min(min(r, delta) A, clip(r, 1 - eps_low, 1 + eps_high) A)     PPO/GRPO, arXiv 2402.03300 Eq. 3
    cispo  -sg(min(r, eps_high)) A logp                                    CISPO, arXiv 2506.13585
    sapo   -(4 / tau) sigmoid(tau (r - 1)) A,  tau = tau_pos if A > 0 else tau_neg     arXiv 2511.20347
    vespo  -sg(phi(w)) A logp,  phi(w) = exp(lam + k ln w - lam w)                     arXiv 2602.10693

(``delta`` caps the unclipped ratio: TRL's dual clip. VESPO's w is the row's ratio, the product of
its token ratios, times the rollout correction's weights; k, lam are k_pos, lam_pos where A >= 0,
else k_neg, lam_neg; phi(1) = 1.) Every composed loss then takes, per token (``composed_loss``):

    loss_t = surrogate_t * w_t + beta * KL_t,   KL_t = exp(ref - logp) - (ref - logp) - 1

w_t the rollout correction's weight (1 without one; VESPO folds it into its w instead), KL_t the
k3 estimator (times r with ``kl_bias_correction``). Reductions of the masked loss_t:

    token_mean               sum / the optimizer step's loss tokens on this rank (``settings.tokens``)
    token_mean_micro         sum / this micro-batch's loss tokens / accumulation (not split invariant)
    seq_mean_token_mean      mean over rows of each row's token mean / accumulation
    seq_mean_token_sum       mean over rows of each row's token sum / accumulation
    seq_mean_token_sum_norm  sum / (rows x max_completion_length) / accumulation (arXiv 2503.20783)

TRL's ``loss_type`` names, each checked against TRL's own ``_compute_loss`` on one batch in
tests/trainer/test_losses.py: dapo, bnpo, grpo, dr_grpo, luspo = clip + token_mean,
token_mean_micro, seq_mean_token_mean, seq_mean_token_sum_norm, seq_mean_token_sum (LUSPO, arXiv
2602.05261); cispo = cispo + token_mean; sapo = sapo + seq_mean_token_mean; vespo = vespo +
token_mean.
"""

from __future__ import annotations

import math

import torch

from agentrl.registry import Param

from .batch import LossBatch, LossOutput, LossSettings
from .compose import register_loss_type
from .registry import register_reduction, register_surrogate
from .terms import masked_mean, old_logps, row_means


# ----------------------------------------------------------------------------------- surrogates
@register_surrogate("clip")
def clipped_surrogate(b: LossBatch, s: LossSettings, ratio: torch.Tensor) -> tuple[torch.Tensor, LossOutput]:
    """PPO's clipped surrogate with the dual clip; logs how often each side clips."""
    clipped = torch.clamp(ratio, 1 - s.epsilon_low, 1 + s.epsilon_high)
    capped = ratio if s.delta is None else torch.clamp(ratio, max=s.delta)
    per_token = -torch.min(capped * b.advantages, clipped * b.advantages)
    out = LossOutput(loss=per_token.new_zeros(()))
    low = ((ratio < 1 - s.epsilon_low) & (b.advantages < 0)).float()
    high = ((ratio > 1 + s.epsilon_high) & (b.advantages > 0)).float()
    out.means.update({"clip_ratio/low_mean": masked_mean(low, b.mask), "clip_ratio/high_mean": masked_mean(high, b.mask),
                      "clip_ratio/region_mean": masked_mean(torch.clamp(low + high, max=1.0), b.mask)})
    out.extremes.update({"clip_ratio/low_min": ("min", row_means(low, b.mask)),
                         "clip_ratio/high_max": ("max", row_means(high, b.mask))})
    return per_token, out


@register_surrogate("cispo")
def cispo(b: LossBatch, s: LossSettings, ratio: torch.Tensor) -> tuple[torch.Tensor, LossOutput]:
    """REINFORCE weighted by the ratio capped at ``epsilon_high`` (the cap itself, not 1 + eps: TRL's
    reading of CISPO's eps_max; ScaleRL, arXiv 2510.13786, recommends 5): every token keeps a
    gradient, the capped weight carries none."""
    per_token = -torch.clamp(ratio, max=s.epsilon_high).detach() * b.advantages * b.logps
    out = LossOutput(loss=per_token.new_zeros(()))
    out.means["cispo_clip_ratio"] = masked_mean(((ratio > s.epsilon_high) & (b.advantages > 0)).float(), b.mask)
    return per_token, out


SAPO_PARAMS = {
    "sapo_temperature_pos": Param(1.0, "SAPO's gate temperature where A > 0 (TRL's key).", "float", lo=1e-6),
    "sapo_temperature_neg": Param(1.05, "SAPO's gate temperature where A <= 0 (TRL's key).", "float", lo=1e-6),
}


@register_surrogate("sapo", params=SAPO_PARAMS)
def sapo(b: LossBatch, s: LossSettings, ratio: torch.Tensor) -> tuple[torch.Tensor, LossOutput]:
    """A smooth gate instead of the clip: sigmoid(tau (r - 1)) 4 / tau has slope 1 at r = 1 and
    fades as the ratio leaves it, faster for the larger temperature."""
    tau = torch.where(b.advantages > 0, s.options["sapo_temperature_pos"], s.options["sapo_temperature_neg"])
    per_token = -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * b.advantages
    return per_token, LossOutput(loss=per_token.new_zeros(()))


VESPO_PARAMS = {
    "vespo_k_pos": Param(2.0, "VESPO's power k where A >= 0: how fast small ratios are down-weighted (TRL's key).",
                         "float", lo=0.0),
    "vespo_lambda_pos": Param(3.0, "VESPO's decay lambda where A >= 0: how fast large ratios are down-weighted "
                              "(TRL's key).", "float", lo=0.0),
    "vespo_k_neg": Param(3.0, "VESPO's power k where A < 0 (TRL's key).", "float", lo=0.0),
    "vespo_lambda_neg": Param(2.0, "VESPO's decay lambda where A < 0 (TRL's key).", "float", lo=0.0),
}
VESPO_LOG_FLOOR = math.log(1e-8)
"""The lower clamp of VESPO's log-weights (as its authors' code: log w >= ln 1e-8)."""


@torch.no_grad()
def vespo_weights(b: LossBatch, s: LossSettings) -> torch.Tensor:
    """phi(w) per token (B, T), detached: w = exp of the row's summed token log-ratios (each clamped
    to +-20, whatever ``ratio_level`` says) plus the log of the correction's weights (per token, or
    once per row; each clamped to [ln 1e-8, 20]), the sum clamped to [ln 1e-8, 20]; k, lambda by
    the sign of each token's advantage (A = 0 takes the positive pair)."""
    log_w = (torch.clamp(b.logps - old_logps(b), -20.0, 20.0) * b.mask).sum(-1, keepdim=True)
    c = b.correction
    if c is not None:  # the weights are 1 (log 0) off the loss tokens
        log_w = log_w + torch.log(c.weights if c.per_row is None else c.per_row).clamp(VESPO_LOG_FLOOR, 20.0).sum(
            -1, keepdim=True)
    log_w = log_w.clamp(VESPO_LOG_FLOOR, 20.0)
    pos = b.advantages >= 0
    o = s.options
    k = torch.where(pos, o["vespo_k_pos"], o["vespo_k_neg"])
    lam = torch.where(pos, o["vespo_lambda_pos"], o["vespo_lambda_neg"]).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


@register_surrogate("vespo", params=VESPO_PARAMS, folds_correction=True)
def vespo(b: LossBatch, s: LossSettings, ratio: torch.Tensor) -> tuple[torch.Tensor, LossOutput]:
    """REINFORCE weighted by a gamma-shaped function of the row's ratio: phi(1) = 1, phi -> 0 for
    ratios far below or above 1 (soft, asymmetric in the advantage's sign). Its row ratio is the
    product of the token ratios at any ``ratio_level`` (``ratio`` unused)."""
    phi = vespo_weights(b, s)
    per_token = -phi * b.advantages * b.logps
    out = LossOutput(loss=per_token.new_zeros(()))
    out.means["vespo/phi_seq_mean"] = masked_mean(phi, b.mask)
    return per_token, out


# ----------------------------------------------------------------------------------- reductions
@register_reduction("token_mean")
def token_mean(x: torch.Tensor, m: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """Every token of the optimizer step weighs the same (DAPO, arXiv 2503.14476)."""
    return x.sum() / max(s.tokens, 1.0)


@register_reduction("token_mean_micro", split_invariant=False)
def token_mean_micro(x: torch.Tensor, m: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """Token mean over this micro-batch: depends on how rows are split into micro-batches."""
    return x.sum() / m.sum().clamp(min=1.0) / s.accumulation


@register_reduction("seq_mean_token_mean")
def seq_mean_token_mean(x: torch.Tensor, m: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """Mean over rows of each row's token mean (GRPO's original length normalisation)."""
    return (x.sum(-1) / m.sum(-1).clamp(min=1.0)).mean() / s.accumulation


@register_reduction("seq_mean_token_sum")
def seq_mean_token_sum(x: torch.Tensor, m: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """Mean over rows of each row's token sum: a row weighs by its length (LUSPO)."""
    return x.sum(-1).mean() / s.accumulation


@register_reduction("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(x: torch.Tensor, m: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """Token sum over rows x a constant length (Dr. GRPO: no length bias)."""
    return x.sum() / (x.size(0) * s.max_completion_length) / s.accumulation


# ----------------------------------------------------------------------------------- TRL's loss types
for _name, _surrogate, _reduction in [("dapo", "clip", "token_mean"), ("bnpo", "clip", "token_mean_micro"),
                                      ("grpo", "clip", "seq_mean_token_mean"),
                                      ("dr_grpo", "clip", "seq_mean_token_sum_norm"),
                                      ("luspo", "clip", "seq_mean_token_sum"), ("cispo", "cispo", "token_mean"),
                                      ("sapo", "sapo", "seq_mean_token_mean"), ("vespo", "vespo", "token_mean")]:
    register_loss_type(_name, _surrogate, _reduction)
