"""Policy losses: pure functions from one micro-batch's log-probs and advantages to a loss.

A loss is composed of parts registered at their definition (a taken name refused), verl's
``agg_loss`` factoring: a *surrogate* gives the per-token policy term, a *reduction* turns the
masked per-token loss into the micro-batch's scalar. A ``loss_type`` names one composition
(``register_loss_type("dapo", "clip", "token_mean")``: TRL 1.16's names) and any
``"surrogate+reduction"`` names one too, so a new surrogate composes with every reduction (APPO's
Eq. 7: ``appo+token_mean``). A loss that is no such composition registers whole
(``@register_policy_loss``). Each part declares what it needs when it registers: a surrogate its
params (``agentrl.registry.Param``; a recipe's ``loss_kwargs``, or TRL's key of the same name)
and whether it folds the rollout correction in itself; a reduction whether it is split
invariant (the gradient does not depend on how rows are cut into micro-batches).

The trainer computes a micro-batch's log-probs once, builds a ``LossBatch`` and calls
:func:`compute`: the batch in float32, the rollout correction's weights when the sampler's own
log-probs are given (``agentrl.losses.correction``), the loss, and which of its inputs and terms
are not finite (the trainer's guard then refuses the update). The parts of the GRPO family are in
``agentrl.losses.policy``; an algorithm with its own surrogate registers it in its own file
(APPO's Eq. 7: ``agentrl.algorithms.appo``). The registries are ``agentrl.losses.registry``, the
data ``agentrl.losses.batch``, the terms surrogates share ``agentrl.losses.terms``, the composition
frame and the lookup by name ``agentrl.losses.compose``.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import torch

# The parts, bottom up, each importing only those below it: registry < correction < batch <
# terms < compose < policy; none imports this ``__init__`` (no cycle through the package).
from . import policy  # noqa: F401  (registers the GRPO family)
from .batch import LossBatch, LossOutput, LossSettings
from .compose import (
    compose,
    get_policy_loss,
    is_split_invariant,
    loss_options,
    policy_loss,
    register_loss_type,
)
from .correction import Correction, CorrectionSettings, correction_weights
from .registry import (
    PolicyLoss,
    Reduction,
    Surrogate,
    get_rollout_correction,
    get_surrogate,
    policy_loss_names,
    reduction_names,
    register_policy_loss,
    register_reduction,
    register_rollout_correction,
    register_surrogate,
    rollout_correction_names,
    surrogate_names,
)


# ----------------------------------------------------------------------------------- computing
def prepared(batch: LossBatch) -> LossBatch:
    """``batch`` as the losses read it: float32 (ratios and KL are exponentials of differences of
    log-probs, which bf16's 8-bit mantissa rounds by up to 0.4%), and 0 wherever no loss is taken
    (env tokens, padding, fillers): a value there must not reach the loss or its gradient, and a
    multiplication by the mask would let a NaN or inf through (0 x inf is NaN, in the backward too)."""
    keep = batch.mask.bool()

    def clean(name: str, t):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        t = t.float()
        return t if name == "mask" or t.shape != keep.shape else torch.where(keep, t, torch.zeros_like(t))

    return LossBatch(**{f.name: clean(f.name, getattr(batch, f.name)) for f in fields(batch)})


def nonfinite_parts(batch: LossBatch, out: LossOutput) -> list[str]:
    """Names of the inputs (at loss tokens) and loss terms that hold NaN or inf; empty when the
    loss is finite (one device sync per micro-batch on the common path). The behaviour log-probs
    are left out: a NaN there is an unscored token, which the correction reads as no evidence."""
    if bool(torch.isfinite(out.loss).all()):
        return []
    m = batch.mask.bool()
    bad = []
    for f in fields(batch):
        t = getattr(batch, f.name)
        if f.name in ("mask", "behaviour_logps") or not isinstance(t, torch.Tensor):
            continue
        if not bool(torch.isfinite(t[m] if t.shape == m.shape else t).all()):
            bad.append(f.name)
    bad += [f"{k} term" for k, v in out.terms.items() if not bool(torch.isfinite(v).all())]
    return bad or ["loss"]


def rollout_correction(batch: LossBatch, settings: CorrectionSettings) -> Correction | None:
    """The correction's weights of a prepared batch, or None (correction off, or no behaviour
    log-probs). The learner's side is the old log-probs under the sampler's processing when the
    sampler truncated (``correction_logps``), else the old log-probs (``logps`` detached when
    on-policy): both sides of the ratio are then the same distribution of different weights."""
    if not settings.active or batch.behaviour_logps is None:
        return None
    learner = batch.correction_logps
    if learner is None:
        learner = batch.logps.detach() if batch.old_logps is None else batch.old_logps
    return correction_weights(learner, batch.behaviour_logps, batch.mask, settings)


def _call(name: str, entry: PolicyLoss, batch: LossBatch, settings: LossSettings) -> Any:
    """The loss on ``batch``; a plug-in's exception is one line naming it and its file's line."""
    from agentrl.plugins import is_plugin, plugin_raised

    try:
        return entry.fn(batch, settings)
    except Exception as e:
        if entry.surrogate is not None or not is_plugin(entry.fn):
            raise
        raise plugin_raised(f"policy loss {name!r}", entry.fn.__module__, e) from None


def checked_output(name: str, entry: PolicyLoss, out: Any, batch: LossBatch) -> LossOutput:
    """A loss's return value if it keeps the contract: a ``LossOutput`` whose ``loss`` is a
    floating tensor of one element, with a gradient when the log-probs have one, and whose terms
    are tensors; else a one-line ``PluginOutputError`` naming the loss, what it returned and what
    was expected (a vector would otherwise fail in ``backward`` with "grad can be implicitly
    created only for scalar outputs"). A NaN is no contract breach: the non-finite guard refuses
    that update (``nonfinite_parts``)."""
    from agentrl.plugins import PluginOutputError, describe_value

    fn = entry.fn
    who = f"policy loss {name!r}" + ("" if entry.surrogate else f" ({fn.__module__}.{fn.__qualname__})")
    if not isinstance(out, LossOutput):
        raise PluginOutputError(f"{who} returned {describe_value(out)}; expected an agentrl.losses.LossOutput")
    loss = out.loss
    if not isinstance(loss, torch.Tensor) or not loss.is_floating_point() or loss.numel() != 1:
        raise PluginOutputError(f"{who} returned a loss that is {describe_value(loss)}; expected a scalar floating "
                                "tensor (reduce over rows and tokens, e.g. .sum() / settings.tokens)")
    if batch.logps.requires_grad and not loss.requires_grad:
        raise PluginOutputError(f"{who} returned a loss without a gradient; expected a tensor computed from "
                                "batch.logps (a constant, a .detach() or a .item() cannot train)")
    for k, v in out.terms.items():
        if not isinstance(v, torch.Tensor):
            raise PluginOutputError(f"{who} returned term {k!r} as {describe_value(v)}; expected a tensor")
    return out


def compute(name: str, batch: LossBatch, settings: LossSettings) -> tuple[LossOutput, list[str]]:
    """The loss ``name`` (``policy_loss``) on ``batch`` (``prepared``, with its rollout correction),
    its declared params' defaults under ``settings.options``; and what in it is not finite (empty
    when the loss is finite). The correction's metrics join the loss's."""
    entry = policy_loss(name)
    batch = prepared(batch)
    batch.correction = rollout_correction(batch, settings.correction)
    if entry.params:
        settings = replace(settings, options={**{k: p.default for k, p in entry.params.items()}, **settings.options})
    out = checked_output(name, entry, _call(name, entry, batch, settings), batch)
    if batch.correction is not None:
        out.means.update(batch.correction.means)
        out.extremes.update(batch.correction.extremes)
    return out, nonfinite_parts(batch, out)


__all__ = ["Correction", "CorrectionSettings", "LossBatch", "LossOutput", "LossSettings", "PolicyLoss", "Reduction",
           "Surrogate", "compose",
           "compute", "correction_weights", "get_policy_loss", "get_rollout_correction", "get_surrogate",
           "is_split_invariant", "loss_options", "nonfinite_parts", "policy_loss", "policy_loss_names", "prepared",
           "reduction_names", "register_loss_type", "register_policy_loss", "register_reduction",
           "register_rollout_correction", "register_surrogate", "rollout_correction", "rollout_correction_names",
           "surrogate_names"]
