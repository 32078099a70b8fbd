"""Every credit estimator scored against the truth on the same sampled batches.

For each batch (B tasks x G rollouts of a known tabular policy on a generated MDP) and each
estimator: ``corr`` (Pearson with A^pi), ``sign`` (sign agreement where A^pi != 0), ``cos``
(cosine of the batch's policy-gradient estimate with the exact dJ/dtheta) and ``bias`` (the same
for the expected estimate, :func:`mean_direction_cosine`). Replicates are MDP seeds (mean +- s.e.
over seeds); ``grpo_equivalent`` is how many of GRPO's batches reach this estimator's cosine at
one batch. Definitions: agentrl/credit/README.md, "Against the truth".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from agentrl_envs.mdp import FiniteMDP, MDPConfig, generate

from agentrl.credit import Batch, available, compare, compute, parse_spec, requirements
from agentrl.credit.registry import lookup
from agentrl.truth.exact import Truth, truth
from agentrl.truth.loglinear import make_policy
from agentrl.truth.sample import Sample, sample_batch

VARIANTS = ("gigpo:norm=mean", "gigpo:episode_stats=steps:episode_singleton=raw", "bigpo:embedder=hash_ngram",
            "hgpo:base_group=true", "rtmc:signature=history", "gigpo:gamma=0.95", "bipace_q:gamma=0.95",
            "rtmc:gamma=0.95")
"""Scored beside the registered defaults: GiGPO without the std division, GiGPO as its authors'
code computes the episode term, BiGPO on a text-only fingerprint, HGPO with its authors'
base_group item, RTMC without the env's state signature, and three estimators at their papers'
discount 0.95 against the undiscounted truth (the mismatch, measured once)."""
TRUTH_GAMMA = 1.0
"""The truth's discount (J is the undiscounted return, as the episode terms of GRPO & co. are), and
every estimator's ``gamma`` unless its label sets one: the estimators are run at the truth's
discount, so that a discount mismatch is measured (``gigpo:gamma=0.95``) and not built in."""
GRPO_MULTIPLES = (1, 2, 4, 8, 16, 32)
"""Batch multiples m at which GRPO's cosine is measured for ``grpo_equivalent``."""


@dataclass(frozen=True)
class Contender:
    """An estimator as raced: ``label`` (``name:key=value:...``), registered name and kwargs."""

    label: str
    name: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def kw(self) -> dict[str, Any]:
        return dict(self.kwargs)


def parse_contender(item: str) -> Contender:
    """``"bigpo:embedder=hash_ngram:eps=0.1"`` -> Contender (``agentrl.credit.parse_spec``)."""
    try:
        name, kw = parse_spec(item)
    except ValueError as e:
        raise ValueError(f"estimator {item.strip()!r}: {e}") from None
    return Contender(item.strip(), name, tuple(sorted(kw.items())))


def default_contenders() -> list[str]:
    """Every registered estimator that reads step records, then :data:`VARIANTS`."""
    return [*available("step"), *VARIANTS]


def not_runnable() -> dict[str, str]:
    """Registered estimators that cannot run on step records, with the reason."""
    return {n: "reads collaboration records (roles, counterfactual runs), not step records"
            for n in available("collab")}


# ============================================================================ per-batch scores
def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation; 0 when either side is constant."""
    sx, sy = x.std(), y.std()
    if sx < 1e-12 or sy < 1e-12:
        return 0.0
    return float(np.mean((x - x.mean()) * (y - y.mean())) / (sx * sy))


def sign_agreement(est: np.ndarray, true: np.ndarray, tol: float = 1e-9) -> float:
    """Share of records with |true| > tol whose estimate has the same sign (a zero is wrong)."""
    m = np.abs(true) > tol
    return compare.sign_agreement(est[m], true[m])  # an estimate of 0 never matches a nonzero sign


def cosine(u: np.ndarray, v: np.ndarray) -> float:
    """Cosine of two flattened arrays; 0 when either is zero."""
    nu, nv = float(np.linalg.norm(u)), float(np.linalg.norm(v))
    if nu < 1e-300 or nv < 1e-300:
        return 0.0
    return float(np.dot(u.ravel(), v.ravel()) / (nu * nv))


def mean_direction_cosine(grads: list[np.ndarray], true: np.ndarray) -> float:
    """cos(E[g], true) from n independent draws g_1..g_n, without the noise that the cosine of
    their plain mean keeps: E[g].true is estimated by mean(g).true, and |E[g]|^2 by the
    unbiased U-statistic (|sum g|^2 - sum |g|^2) / (n (n - 1)). Clipped to [-1, 1]; NaN for
    n < 2 or when the estimated |E[g]|^2 is not positive (no detectable mean direction)."""
    n = len(grads)
    if n < 2:
        return float("nan")
    flat = np.stack([g.ravel() for g in grads])
    total = flat.sum(0)
    sq = (float(total @ total) - float((flat * flat).sum())) / (n * (n - 1))
    nt = float(np.linalg.norm(true))
    if sq <= 0 or nt == 0:
        return float("nan")
    return float(np.clip(float(total @ true.ravel()) / n / (np.sqrt(sq) * nt), -1.0, 1.0))


def gradient_estimate(policy, smp: Sample, adv: np.ndarray) -> np.ndarray:
    """g_hat = sum_i A_hat_i dlog pi(a_i|s_i)/dtheta / (number of rollouts), in the policy's parameters."""
    return policy.score_sample(smp, adv) / smp.n_rollouts


def estimator_kwargs(c: Contender, gamma: float = TRUTH_GAMMA) -> dict[str, Any]:
    """The contender's kwargs, with ``gamma`` set to the truth's where the label does not set it."""
    kw = c.kw
    if "gamma" not in kw and "gamma" in lookup(c.name).params:
        kw["gamma"] = gamma
    return kw


def advantages(c: Contender, batch: Batch, gamma: float = TRUTH_GAMMA) -> np.ndarray:
    return compute(c.name, batch, **estimator_kwargs(c, gamma)).step_advantages


def needs_fingerprint(contenders: list[Contender]) -> bool:
    return any("fingerprint" in requirements(c.name, **c.kw) for c in contenders)


# ============================================================================ one MDP instance
@dataclass
class SeedScores:
    """One MDP seed's numbers: per (G, label) the means over its batches."""

    seed: int
    corr: dict[tuple[int, str], float] = field(default_factory=dict)
    sign: dict[tuple[int, str], float] = field(default_factory=dict)
    cos: dict[tuple[int, str], float] = field(default_factory=dict)
    bias: dict[tuple[int, str], float] = field(default_factory=dict)
    grpo_cos_by_m: dict[int, float] = field(default_factory=dict)


def setting(cfg: MDPConfig, seed: int, init_scale: float, gamma: float,
            policy: str = "tabular") -> tuple[FiniteMDP, Any, Truth]:
    """The MDP instance, its seeded policy of kind ``policy`` and their truth for ``seed``."""
    mdp = generate(cfg, seed)
    pol = make_policy(policy, mdp, seed, scale=init_scale)
    return mdp, pol, truth(mdp, pol, gamma)


def score_seed(cfg: MDPConfig, seed: int, contenders: list[Contender], batches: int, B: int, Gs: tuple[int, ...],
               G_main: int, init_scale: float = 1.0, gamma: float = TRUTH_GAMMA,
               policy: str = "tabular") -> SeedScores:
    """Score every contender on ``batches`` batches for each G, plus GRPO's cosine at batch
    multiples (``GRPO_MULTIPLES``) at ``G_main``; under the policy of kind ``policy``."""
    mdp, pol, tr = setting(cfg, seed, init_scale, gamma, policy)
    out = SeedScores(seed)
    pi = pol.act_probs
    for G in Gs:
        rng = np.random.default_rng([seed, G, 0x53434F])
        acc: dict[str, dict[str, list]] = {c.label: {"corr": [], "sign": [], "cos": [], "g": []} for c in contenders}
        for _ in range(batches):
            smp = sample_batch(mdp, pi, B, G, rng)
            true_a = tr.A[smp.t, smp.s, smp.a]
            batch = Batch.from_records(smp.records)
            for c in contenders:
                adv = advantages(c, batch, gamma)
                g = gradient_estimate(pol, smp, adv)
                a = acc[c.label]
                a["corr"].append(pearson(adv, true_a))
                a["sign"].append(sign_agreement(adv, true_a))
                a["cos"].append(cosine(g, tr.grad))
                a["g"].append(g)
        for lab, a in acc.items():
            out.corr[(G, lab)] = float(np.mean(a["corr"]))
            out.sign[(G, lab)] = float(np.nanmean(a["sign"])) if not np.isnan(a["sign"]).all() else float("nan")
            out.cos[(G, lab)] = float(np.mean(a["cos"]))
            out.bias[(G, lab)] = mean_direction_cosine(a["g"], tr.grad)
    out.grpo_cos_by_m = grpo_cos_by_multiple(mdp, pol, tr, B, G_main, seed)
    return out


def grpo_cos_by_multiple(mdp: FiniteMDP, pol, tr: Truth, B: int, G: int, seed: int,
                         multiples: tuple[int, ...] = GRPO_MULTIPLES) -> dict[int, float]:
    """GRPO's mean cosine when the gradients of m independent batches are averaged (a batch of
    m*B tasks: GRPO's statistics never cross groups, so this is exactly the bigger batch)."""
    rng = np.random.default_rng([seed, G, 0x475250])
    pool = max(multiples)
    grads = []
    for _ in range(pool):
        smp = sample_batch(mdp, pol.act_probs, B, G, rng)
        grads.append(gradient_estimate(pol, smp, compute("grpo", smp.records).step_advantages))
    out = {}
    for m in multiples:
        sums = [np.mean(grads[i:i + m], axis=0) for i in range(0, pool - m + 1, m)]
        out[m] = float(np.mean([cosine(g, tr.grad) for g in sums]))
    return out


def grpo_equivalent(cos: float, grpo_by_m: dict[int, float]) -> float | None:
    """Batch multiple m at which GRPO's cosine reaches ``cos`` (linear in log2 m between the
    measured multiples); ``m < 1`` (0.0) when GRPO's single batch already does better, None when
    even the largest multiple does not reach it."""
    ms = sorted(grpo_by_m)
    ys = [grpo_by_m[m] for m in ms]
    if cos < ys[0]:
        return 0.0
    for (m0, y0), (m1, y1) in zip(zip(ms, ys, strict=True), zip(ms[1:], ys[1:], strict=True), strict=False):
        if y0 <= cos <= y1 and y1 > y0:
            x0, x1 = math.log2(m0), math.log2(m1)
            return float(2 ** (x0 + (cos - y0) / (y1 - y0) * (x1 - x0)))
    return None
