"""Policy losses: pure functions from one micro-batch's log-probs and advantages to a loss.

Each loss is registered at its definition (``@register_policy_loss("name")``, a taken name
refused) and called as ``loss_fn(batch, settings) -> LossOutput``. The trainer computes the
micro-batch's log-probs once, builds a ``LossBatch`` and calls :func:`compute`, which runs the
loss in float32 and says which of its inputs and terms are not finite (the trainer's guard then
refuses the update). The GRPO family (TRL's ``dapo``, ``bnpo``, ``grpo``, ``dr_grpo``
normalisations over a clipped surrogate, the dual clip, GSPO's sequence-level ratio and the k3 KL
term) is in ``agentrl.losses.policy``; an algorithm with its own loss registers it in its own
file (APPO's Eq. 7: ``agentrl.algorithms.appo``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

# ----------------------------------------------------------------------------------- registries
# Each registry is a name -> entry table with one decorator that refuses a taken name.
CorrectionFn = Callable[..., Any]
"""``fn(d, mask, settings) -> Treated``: a rollout correction (``agentrl.losses.correction``)."""
_CORRECTIONS: dict[str, CorrectionFn] = {}


def _add(table: dict[str, Any], kind: str, name: str, entry: Any) -> None:
    if name in table:
        held = table[name]
        raise ValueError(f"{kind} {name!r} is already registered ({getattr(held, 'fn', held).__qualname__})")
    table[name] = entry


def register_rollout_correction(name: str) -> Callable[[CorrectionFn], CorrectionFn]:
    """Decorator: register a rollout correction under ``name`` (a taken name is a ValueError)."""

    def deco(fn: CorrectionFn) -> CorrectionFn:
        _add(_CORRECTIONS, "rollout correction", name, fn)
        return fn

    return deco


def rollout_correction_names() -> list[str]:
    return sorted(_CORRECTIONS)


def get_rollout_correction(name: str) -> CorrectionFn:
    if name not in _CORRECTIONS:
        raise KeyError(f"unknown rollout correction {name!r}; registered: {', '.join(sorted(_CORRECTIONS))}")
    return _CORRECTIONS[name]


from .correction import Correction, CorrectionSettings, correction_weights  # noqa: E402  (registers the built-in ones)


@dataclass
class LossBatch:
    """One micro-batch, every tensor (B, T) over the completion positions."""

    logps: torch.Tensor
    """Log-probs of the completion tokens under the policy being trained (with grad)."""
    advantages: torch.Tensor
    """Per-token advantages (a row's record advantage repeated, or an algorithm's token values)."""
    mask: torch.Tensor
    """1 where a token carries loss (model tokens of real rows), 0 at env tokens, padding, fillers."""
    old_logps: torch.Tensor | None = None
    """Log-probs when the rows were generated; None: on-policy (``logps`` detached)."""
    ref_logps: torch.Tensor | None = None
    """Reference-model log-probs (needed when ``beta`` > 0)."""
    entropy: torch.Tensor | None = None
    """Per-token entropy of the policy (metrics only)."""
    behaviour_logps: torch.Tensor | None = None
    """The sampler's own log-probs of the tokens it drew (NaN where it could not score one); None:
    no rollout correction."""


@dataclass(frozen=True)
class LossSettings:
    """The loss's knobs (from the recipe) and the normalisers of this micro-batch."""

    epsilon_low: float = 0.2
    """Lower clip of the ratio: 1 - epsilon_low."""
    epsilon_high: float = 0.2
    """Upper clip of the ratio: 1 + epsilon_high."""
    delta: float | None = None
    """Dual clip: the unclipped ratio is capped at delta (None: no cap)."""
    beta: float = 0.0
    """Weight of the k3 KL term to the reference."""
    ratio_level: str = "token"
    """'token' (PPO/GRPO) or 'sequence' (GSPO: the mean log-ratio over a row's loss tokens)."""
    kl_bias_correction: bool = False
    """Multiply the KL term by the importance ratio (TRL's use_bias_correction_kl)."""
    accumulation: float = 1.0
    """Micro-batches per optimizer step (1 in evaluation): the per-micro-batch normalisers divide by it."""
    tokens: float = 1.0
    """``dapo``: loss tokens of the optimizer step on this rank (global count / processes)."""
    max_completion_length: int = 1
    """``dr_grpo``: the constant length every row is normalised by."""
    options: dict[str, Any] = field(default_factory=dict)
    """A loss's own knobs (e.g. APPO's Eq. 7 settings)."""

    def with_options(self, **options) -> LossSettings:
        return replace(self, options={**self.options, **options})


@dataclass
class LossOutput:
    """What a loss returns."""

    loss: torch.Tensor
    """Scalar to backpropagate."""
    means: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """Metric name -> (sum, count) on this micro-batch; the trainer sums both over ranks."""
    extremes: dict[str, tuple[str, torch.Tensor]] = field(default_factory=dict)
    """Metric name -> ('min' | 'max', values per row); the trainer takes it over ranks."""
    terms: dict[str, torch.Tensor] = field(default_factory=dict)
    """Named parts of the loss (scalars, e.g. 'policy', 'kl') for the non-finite report."""
    debug: dict[str, Any] = field(default_factory=dict)
    """Anything a loss wants tests and tools to see (numpy arrays, not logged)."""


LossFn = Callable[[LossBatch, LossSettings], LossOutput]
_LOSSES: dict[str, LossFn] = {}


def register_policy_loss(name: str) -> Callable[[LossFn], LossFn]:
    """Decorator: register a policy loss under ``name`` (a taken name is a ValueError)."""

    def deco(fn: LossFn) -> LossFn:
        if name in _LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered ({_LOSSES[name].__qualname__})")
        _LOSSES[name] = fn
        return fn

    return deco


def policy_loss_names() -> list[str]:
    _builtin()
    return sorted(_LOSSES)


def get_policy_loss(name: str) -> LossFn:
    _builtin()
    if name not in _LOSSES:
        raise KeyError(f"unknown policy loss {name!r}; registered: {', '.join(sorted(_LOSSES))}")
    return _LOSSES[name]


def _builtin() -> None:
    from . import policy  # noqa: F401  (registers the GRPO family)


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
    loss is finite (one device sync per micro-batch on the common path)."""
    if bool(torch.isfinite(out.loss).all()):
        return []
    m = batch.mask.bool()
    bad = []
    for f in fields(batch):
        t = getattr(batch, f.name)
        if f.name == "mask" or not isinstance(t, torch.Tensor):
            continue
        if not bool(torch.isfinite(t[m] if t.shape == m.shape else t).all()):
            bad.append(f.name)
    bad += [f"{k} term" for k, v in out.terms.items() if not bool(torch.isfinite(v).all())]
    return bad or ["loss"]


def compute(name: str, batch: LossBatch, settings: LossSettings) -> tuple[LossOutput, list[str]]:
    """The registered loss ``name`` on ``batch`` (``prepared``), and what in it is not finite
    (empty when the loss is finite)."""
    batch = prepared(batch)
    out = get_policy_loss(name)(batch, settings)
    return out, nonfinite_parts(batch, out)


__all__ = ["Correction", "CorrectionSettings", "LossBatch", "LossOutput", "LossSettings", "compute",
           "correction_weights", "get_policy_loss", "get_rollout_correction", "nonfinite_parts", "policy_loss_names",
           "prepared", "register_policy_loss", "register_rollout_correction", "rollout_correction_names"]
