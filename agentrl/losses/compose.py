"""Composed policy losses: the frame that turns a surrogate and a reduction into a loss, and the
lookup of a loss by name (a registered one, or the composition ``"surrogate+reduction"`` names).
The terms every surrogate shares are ``agentrl.losses.terms``. The frame, per token (``composed_loss``):

    loss_t = surrogate_t * w_t + beta * KL_t,   KL_t = exp(ref - logp) - (ref - logp) - 1

w_t the rollout correction's weight (1 without one; a surrogate that folds it in, VESPO, is not
multiplied by it), KL_t the k3 estimator (times r with ``kl_bias_correction``), then reduced by the
reduction. The parts are in ``agentrl.losses.registry``; the GRPO family in ``agentrl.losses.policy``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from agentrl.registry import resolve_params

from .batch import LossBatch, LossOutput, LossSettings
from .registry import LOSSES, PolicyLoss, Reduction, Surrogate, get, get_reduction, get_surrogate
from .terms import kl_k3, log_ratio, masked_mean


# ----------------------------------------------------------------------------------- the frame
def composed_loss(surrogate: Surrogate, reduction: Reduction):
    """The loss ``surrogate`` + ``reduction``: the per-token surrogate times the rollout
    correction's weights (unless the surrogate folds them in), plus the KL term, reduced."""

    def loss(b: LossBatch, s: LossSettings) -> LossOutput:
        ratio = torch.exp(log_ratio(b, s))  # one node: the surrogate and the KL term share its gradient
        per_token, out = surrogate.fn(b, s, ratio)
        if b.correction is not None and not surrogate.folds_correction:
            per_token = per_token * b.correction.weights
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
        out.loss = reduction.fn(per_token * b.mask, b.mask, s)
        return out

    return loss


# ----------------------------------------------------------------------------------- by name
def register_loss_type(name: str, surrogate: str, reduction: str) -> None:
    """Register ``name`` as the loss ``surrogate`` + ``reduction`` (both registered already)."""
    LOSSES.add(name, _composed(surrogate, reduction), by=f"{__name__}.register_loss_type")


def compose(surrogate: str, reduction: str) -> str:
    """The loss name of ``surrogate`` composed with ``reduction``."""
    return f"{surrogate}+{reduction}"


def _composed(surrogate: str, reduction: str) -> PolicyLoss:
    s, r = get_surrogate(surrogate), get_reduction(reduction)
    return PolicyLoss(composed_loss(s, r), r.split_invariant, s.params, surrogate, reduction)


def policy_loss(name: str) -> PolicyLoss:
    """A registered loss, or the composition a ``"surrogate+reduction"`` name gives."""
    if name not in LOSSES and name.count("+") == 1:
        return _composed(*name.split("+"))
    return get(LOSSES, name)


def get_policy_loss(name: str) -> Callable[..., Any]:
    """The loss function of ``name`` (``policy_loss``)."""
    return policy_loss(name).fn


def is_split_invariant(name: str) -> bool:
    """Whether loss ``name``'s gradient ignores how rows are split into micro-batches."""
    return policy_loss(name).split_invariant


def loss_options(name: str, recipe: Any) -> dict[str, Any]:
    """Loss ``name``'s declared params from a recipe (a config or any object with its keys): each
    from the recipe's key of the same name where it has one (TRL's ``sapo_temperature_pos``, ...),
    else from its ``loss_kwargs``, else the default. ValueError (one line) on an unknown name, a
    bad value, or a recipe key repeated inside ``loss_kwargs``."""
    params = policy_loss(name).params
    given = dict(getattr(recipe, "loss_kwargs", None) or {})
    top = {k: getattr(recipe, k) for k in params if hasattr(recipe, k)}
    twice = sorted(set(given) & set(top))
    if twice:
        raise ValueError(f"loss_kwargs: {twice[0]} is a recipe key of its own; set it there, not in loss_kwargs")
    return resolve_params(params, {**top, **given}, f"loss_type {name!r}")
