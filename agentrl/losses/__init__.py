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
(APPO's Eq. 7: ``agentrl.algorithms.appo``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from agentrl.registry import Param, Registry, resolve_params, unknown_name

# ----------------------------------------------------------------------------------- registries
# Each registry is an ``agentrl.registry.Registry`` (the one registrar: a taken name refused in
# one line, an unknown one answered with a did-you-mean); the entries are kept as dataclasses.
CorrectionFn = Callable[..., Any]
"""``fn(d, mask, settings) -> Treated``: a rollout correction (``agentrl.losses.correction``)."""
SurrogateFn = Callable[..., Any]
"""``fn(batch, settings, ratio) -> (per_token (B, T), LossOutput)``: the policy term before the
mask; ``ratio`` is exp(logp - logp_old) at ``settings.ratio_level``, (B, T) or (B, 1)."""
ReductionFn = Callable[..., torch.Tensor]
"""``fn(masked per-token loss, mask, settings) -> scalar``."""


@dataclass(frozen=True)
class Surrogate:
    fn: SurrogateFn
    params: dict[str, Param]
    """Its own settings (``LossSettings.options``): from ``loss_kwargs`` or TRL's key of the same name."""
    folds_correction: bool
    """It applies the rollout correction itself (VESPO); else the per-token term is multiplied by it."""


@dataclass(frozen=True)
class Reduction:
    fn: ReductionFn
    split_invariant: bool
    """The gradient does not depend on how the rows are cut into micro-batches."""


@dataclass(frozen=True)
class PolicyLoss:
    fn: Callable[..., Any]
    """``fn(batch, settings) -> LossOutput``."""
    split_invariant: bool = True
    params: dict[str, Param] = field(default_factory=dict)
    surrogate: str | None = None
    """The surrogate of a composed loss (None: a loss registered whole)."""
    reduction: str | None = None


_CORRECTIONS: Registry = Registry("rollout correction")
_SURROGATES: Registry = Registry("surrogate", entry=lambda name, fn, a: Surrogate(fn, dict(a.get("params") or {}),
                                                                                 bool(a.get("folds_correction"))))
_REDUCTIONS: Registry = Registry("reduction", entry=lambda name, fn, a: Reduction(fn, a.get("split_invariant", True)))
_LOSSES: Registry = Registry("policy loss", entry=lambda name, fn, a: PolicyLoss(fn, a.get("split_invariant", True),
                                                                                 dict(a.get("params") or {})))


def _get(table: Registry, name: str) -> Any:
    """``table``'s entry of ``name``; a one-line KeyError (did-you-mean, the registered names) otherwise."""
    _builtin()
    if name not in table:
        raise KeyError(unknown_name(table.kind, name, sorted(table)))
    return table[name]


def register_rollout_correction(name: str) -> Callable[[CorrectionFn], CorrectionFn]:
    """Decorator: register a rollout correction under ``name``."""
    return _CORRECTIONS.register(name)


def register_surrogate(name: str, *, params: dict[str, Param] | None = None,
                       folds_correction: bool = False) -> Callable[[SurrogateFn], SurrogateFn]:
    """Decorator: register a surrogate under ``name`` with its declared params."""
    return _SURROGATES.register(name, params=params, folds_correction=folds_correction)


def register_reduction(name: str, *, split_invariant: bool = True) -> Callable[[ReductionFn], ReductionFn]:
    """Decorator: register a reduction under ``name``."""
    return _REDUCTIONS.register(name, split_invariant=split_invariant)


def register_policy_loss(name: str, *, split_invariant: bool = True,
                         params: dict[str, Param] | None = None) -> Callable[[Callable], Callable]:
    """Decorator: register a whole loss ``fn(batch, settings) -> LossOutput`` under ``name``. A
    whole loss applies the rollout correction itself, if at all (``batch.correction``)."""
    return _LOSSES.register(name, split_invariant=split_invariant, params=params)


def register_loss_type(name: str, surrogate: str, reduction: str) -> None:
    """Register ``name`` as the loss ``surrogate`` + ``reduction`` (both registered already)."""
    _LOSSES.add(name, _composed(surrogate, reduction), by=f"{__name__}.register_loss_type")


def compose(surrogate: str, reduction: str) -> str:
    """The loss name of ``surrogate`` composed with ``reduction``."""
    return f"{surrogate}+{reduction}"


def _composed(surrogate: str, reduction: str) -> PolicyLoss:
    from .policy import composed_loss

    s, r = _get(_SURROGATES, surrogate), _get(_REDUCTIONS, reduction)
    return PolicyLoss(composed_loss(s, r), r.split_invariant, s.params, surrogate, reduction)


def policy_loss(name: str) -> PolicyLoss:
    """A registered loss, or the composition a ``"surrogate+reduction"`` name gives."""
    _builtin()
    if name not in _LOSSES and name.count("+") == 1:
        return _composed(*name.split("+"))
    return _get(_LOSSES, name)


def get_policy_loss(name: str) -> Callable[..., Any]:
    """The loss function of ``name`` (``policy_loss``)."""
    return policy_loss(name).fn


def get_surrogate(name: str) -> Surrogate:
    return _get(_SURROGATES, name)


def get_rollout_correction(name: str) -> CorrectionFn:
    return _get(_CORRECTIONS, name)


def policy_loss_names() -> list[str]:
    _builtin()
    return sorted(_LOSSES)


def surrogate_names() -> list[str]:
    _builtin()
    return sorted(_SURROGATES)


def reduction_names() -> list[str]:
    _builtin()
    return sorted(_REDUCTIONS)


def rollout_correction_names() -> list[str]:
    return sorted(_CORRECTIONS)


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


def _builtin() -> None:
    from . import policy  # noqa: F401  (registers the GRPO family)


from .correction import Correction, CorrectionSettings, correction_weights  # noqa: E402  (registers the modes)


# ----------------------------------------------------------------------------------- data
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
    correction: Correction | None = None
    """Not an input: :func:`compute` fills it from ``behaviour_logps`` when the correction is on."""


@dataclass(frozen=True)
class LossSettings:
    """The loss's knobs (from the recipe) and the normalisers of this micro-batch."""

    epsilon_low: float = 0.2
    """Lower clip of the ratio: 1 - epsilon_low."""
    epsilon_high: float = 0.2
    """Upper clip of the ratio: 1 + epsilon_high (``cispo``: the cap of the ratio itself)."""
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
    """``token_mean`` (dapo): loss tokens of the optimizer step on this rank (global count / processes)."""
    max_completion_length: int = 1
    """``seq_mean_token_sum_norm`` (dr_grpo): the constant length every row is normalised by."""
    correction: CorrectionSettings = field(default_factory=CorrectionSettings)
    """The rollout correction (applied when the batch has ``behaviour_logps``)."""
    options: dict[str, Any] = field(default_factory=dict)
    """A loss's own knobs: its declared params (``loss_options``) or an algorithm's (APPO's Eq. 7)."""

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
    log-probs). The learner's side is the old log-probs (``logps`` detached when on-policy)."""
    if not settings.active or batch.behaviour_logps is None:
        return None
    learner = batch.logps.detach() if batch.old_logps is None else batch.old_logps
    return correction_weights(learner, batch.behaviour_logps, batch.mask, settings)


def compute(name: str, batch: LossBatch, settings: LossSettings) -> tuple[LossOutput, list[str]]:
    """The loss ``name`` (``policy_loss``) on ``batch`` (``prepared``, with its rollout correction),
    its declared params' defaults under ``settings.options``; and what in it is not finite (empty
    when the loss is finite). The correction's metrics join the loss's."""
    entry = policy_loss(name)
    batch = prepared(batch)
    batch.correction = rollout_correction(batch, settings.correction)
    if entry.params:
        settings = replace(settings, options={**{k: p.default for k, p in entry.params.items()}, **settings.options})
    out = entry.fn(batch, settings)
    if batch.correction is not None:
        out.means.update(batch.correction.means)
        out.extremes.update(batch.correction.extremes)
    return out, nonfinite_parts(batch, out)


__all__ = ["Correction", "CorrectionSettings", "LossBatch", "LossOutput", "LossSettings", "PolicyLoss", "compose",
           "compute", "correction_weights", "get_policy_loss", "get_rollout_correction", "get_surrogate",
           "is_split_invariant", "loss_options", "nonfinite_parts", "policy_loss", "policy_loss_names", "prepared",
           "reduction_names", "register_loss_type", "register_policy_loss", "register_reduction",
           "register_rollout_correction", "register_surrogate", "rollout_correction", "rollout_correction_names",
           "surrogate_names"]
