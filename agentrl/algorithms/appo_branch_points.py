"""APPO's branch-point selection (arXiv:2606.12384 Eqs. 3-5): where in an initial rollout to branch.

Choosing branch points is a rollout decision (which continuations to sample), not credit: it
lives with the APPO algorithm, and ``agentrl.credit.appo`` keeps the advantage formulas (Eqs. 6-7).
Every function here is pure (arrays in, arrays out) with an exact-value test in
``tests/credit/test_appo.py``. Token arrays are ``(N, T)`` as in ``agentrl.credit.appo``: ``mask``
marks the model's own tokens (the z-scores' population), ``eligible`` the candidates.

Branch points (Eqs. 3-5)
------------------------
* Entropy H_t (Eq. 3): ``entropy_from_logits(logits, temperature)`` is the paper's full-vocabulary
  entropy of softmax(z / tau); ``entropy_from_topk(logprobs)`` is the authors' code's truncated
  entropy over the generator's top-k log-probs (k = 10 there), not renormalised by default.
* Future value Omega (Eq. 4): ``future_value(log_ratio, mask, gamma)`` =
  exp(sum_{k >= t} gamma^(k-t) log rho_k) over model tokens; each log-ratio and the exponent are
  clamped to +-20 (the code's clamp), so Omega is finite. Masked positions get exactly 1.
* Score (Eq. 5): ``branch_score`` = Z(clip(Omega, 1 - eps', 1 + eps')) * Z(H), Z the z-score
  within the rollout over its model tokens (``mask``; whitespace-only tokens count in the mean
  and std, as in the authors' code, which drops them only when it collects candidates) with the
  population std + 1e-6 (the code; the paper does not say). eps' = 0.2 (the code's [0.8, 1.2]; the paper gives no value).
  ``score="entropy"`` is Table 4's pure-entropy ablation (Z(H) alone). A product of two z-scores
  is also large when both are very negative, so the code's strict rule first takes tokens with
  both z > 0 (``strict_candidates``).
  When a rollout's clipped Omega is constant, Z(Omega) is 0 everywhere and every score ties at 0;
  ``flat_omega="entropy"`` (default) then ranks that rollout by Z(H) alone, ``"keep"`` keeps the
  zeros (ties are broken by position, i.e. the earliest tokens win). "Constant" means a
  population std <= ``flat_tol`` (1e-6), so rounding noise in a ratio that should be 1 does not
  pick the branch points.
* Selection: ``select_branch_points(score, mask, budget, scope=...)``. ``scope="rollout"`` is the
  paper (top-B per rollout, Table 3's N x B); ``scope="prompt"`` is the authors' code (one pool of
  B points over the prompt's N rollouts). ``preferred`` (the strict rule) ranks its tokens first,
  the rest fill by score; ``repeat=True`` cycles the chosen points until the budget is met (the
  code's fill for short rollouts). Ties break by (rollout, position) so results are reproducible.
  ``choose_branch_points`` chains score, strict rule and selection (paper: per rollout, not
  strict; code: per prompt, strict).

What Omega means at rollout time (our choice)
---------------------------------------------
Eq. 4 compares pi_theta with pi_old. At rollout time the rollouts were just sampled from the
current policy, so theta = old: the authors' code takes log rho = (training-engine log-prob) -
(generation-engine log-prob) on the same weights, which measures the numerical mismatch of the two engines.
Under HF generation the two engines are the same model, so that ratio is 1 up to rounding and
BS collapses to ties (or to rounding noise, which ``flat_tol`` catches). We define the
rollout-time ratio against the **reference model**:
log rho_k = log pi_theta(H_k | H_<k) - log pi_ref(H_k | H_<k). Why:

* it is what the paper's Fig. 6 reading asks for: Omega large where the continuation after t is
  one the training has made more likely (a "policy-induced likelihood gain"), small where training
  moved away from it; a lexically rare but inconsequential token should have a suffix training
  has not moved, hence a low Z(Omega);
* pi_ref's log-probs of the sampled tokens are already computed for the KL term (beta = 0.001 in
  the authors' scripts), so it costs nothing extra; the alternative "policy one iteration ago"
  would need a third copy of the weights;
* at the first iteration pi_theta = pi_ref, Omega = 1 and selection falls back to entropy
  (``flat_omega="entropy"``), which is the Table 4 ablation, a sane start.

With gamma = 1 (the code's rollout value) a suffix sum of a policy-vs-reference log-ratio over
thousands of tokens saturates the [0.8, 1.2] clip almost everywhere; we therefore recommend the
loss's gamma = 2^(-1/decay) (decay 64) for this Omega too. The trainer should expose the choice
as a kwarg (``omega_baseline`` in {"ref", "behaviour"}; "behaviour" reproduces the code's
definition); these functions only take the log-ratio.
"""

from __future__ import annotations

import numpy as np

from agentrl.credit.appo import (
    EPS,
    FLAT_OMEGA,
    LOG_CLAMP,
    SCOPES,
    SCORES,
    _choice,
    _rows,
    discounted_suffix_sum,
)

FLAT_TOL = 1e-6
"""A rollout's clipped Omega with a population std at most this is flat (carries no signal)."""


# ============================================================================ entropy (Eq. 3)
def entropy_from_logits(logits, temperature: float = 1.0) -> np.ndarray:
    """H_t = -sum_j p_j log p_j with p = softmax(z_t / tau) over the last axis (Eq. 3)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = np.asarray(logits, dtype=float) / temperature
    logp = z - z.max(axis=-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=-1, keepdims=True))
    return -(np.exp(logp) * logp).sum(axis=-1)


def entropy_from_topk(logprobs, renormalize: bool = False) -> np.ndarray:
    """Truncated entropy -sum_{j in top-k} p_j log p_j from the generator's top-k log-probs.

    The authors' code uses k = 10 without renormalising (the missing tail mass adds nothing);
    ``renormalize=True`` first rescales the k probabilities to sum to 1. -inf entries count as 0.
    """
    lp = np.asarray(logprobs, dtype=float)
    if renormalize:
        top = lp.max(axis=-1, keepdims=True)
        lp = lp - (top + np.log(np.exp(lp - top).sum(axis=-1, keepdims=True)))
    p = np.exp(lp)
    return -(p * np.where(p > 0, lp, 0.0)).sum(axis=-1)


def eligible_tokens(model_mask, token_texts=None) -> np.ndarray:
    """Mask of the branch-point candidates: model tokens whose text is not whitespace only."""
    m = _rows(model_mask, bool).copy()
    if token_texts is not None:
        for n, texts in enumerate(token_texts):
            for t, s in enumerate(texts[: m.shape[1]]):
                if not str(s).strip():
                    m[n, t] = False
    return m


# ============================================================================ Omega (Eq. 4)
def future_value(log_ratio, mask, gamma: float = 1.0, clamp: float = LOG_CLAMP) -> np.ndarray:
    """Omega_t = exp(sum_{k >= t} gamma^(k-t) log rho_k) over masked tokens (Eq. 4); 1 where masked.

    ``log_ratio`` is log pi_theta - log pi_base of each sampled token (see the module docstring
    for which base we use at rollout time); each term and the exponent are clamped to +-clamp.
    """
    m = _rows(mask, bool)
    lr = np.where(m, np.clip(_rows(log_ratio), -clamp, clamp), 0.0)
    log_omega = np.clip(discounted_suffix_sum(lr, gamma), -clamp, clamp)
    return np.where(m, np.exp(log_omega), 1.0)


# ============================================================================ score (Eq. 5)
def _row_stats(a: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row mean and population std over the masked entries, as (N, 1) columns."""
    cnt = np.maximum(m.sum(axis=1, keepdims=True), 1)
    mean = np.where(m, a, 0.0).sum(axis=1, keepdims=True) / cnt
    return mean, np.sqrt(np.where(m, (a - mean) ** 2, 0.0).sum(axis=1, keepdims=True) / cnt)


def zscore_rows(x, mask, eps: float = EPS) -> np.ndarray:
    """(x - mean) / (population std + eps) within each row over its masked entries; 0 elsewhere."""
    a, m = _rows(x), _rows(mask, bool)
    mean, std = _row_stats(a, m)
    return np.where(m, (a - mean) / (std + eps), 0.0)


def branch_score(entropy, omega, mask, clip_eps: float = 0.2, score: str = "bs",
                 flat_omega: str = "entropy", flat_tol: float = FLAT_TOL,
                 eps: float = EPS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BS = Z(clip(Omega, 1 - eps', 1 + eps')) * Z(H) within each rollout (Eq. 5).

    ``mask`` is the population of the z-scores: the rollout's model tokens (Eq. 5's "within the
    rollout"; the authors' code takes the loss-mask tokens, whitespace-only ones included). Which
    of them may become branch points is the selection's business (``eligible`` in
    ``choose_branch_points``), not the statistics'. Returns (score, z_entropy, z_omega), all
    (N, T), 0 outside ``mask``. ``score="entropy"`` gives Z(H) (Table 4's ablation). A rollout
    whose clipped Omega has a population std <= ``flat_tol`` gets Z(Omega) = 0 exactly (rounding
    noise would otherwise decide the ranking); ``flat_omega``: see the module docstring.
    """
    _choice("score", score, SCORES)
    _choice("flat_omega", flat_omega, FLAT_OMEGA)
    m = _rows(mask, bool)
    z_h = zscore_rows(entropy, m, eps)
    clipped = np.clip(_rows(omega), 1.0 - clip_eps, 1.0 + clip_eps)
    z_o = zscore_rows(clipped, m, eps)
    z_o = np.where(_row_stats(clipped, m)[1] <= flat_tol, 0.0, z_o)
    if score == "entropy":
        return z_h, z_h, z_o
    bs = z_h * z_o
    if flat_omega == "entropy":
        bs = np.where(_flat_rows(z_o, m)[:, None], z_h, bs)
    return bs, z_h, z_o


def _flat_rows(z_omega: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Rollouts whose Z(Omega) is 0 on every token of ``mask`` (Omega carried no signal)."""
    return ~np.any(mask & (z_omega != 0.0), axis=1)


def strict_candidates(z_entropy, z_omega, mask, score: str = "bs", population=None) -> np.ndarray:
    """The code's strict rule: tokens of ``mask`` with Z(H) > 0 and Z(Omega) > 0 (Z(H) > 0 alone
    for ``score="entropy"``, or in a rollout whose Omega is flat over ``population``, the z-scores'
    own population; default ``mask``)."""
    _choice("score", score, SCORES)
    m, z_h, z_o = _rows(mask, bool), _rows(z_entropy), _rows(z_omega)
    if score == "entropy":
        return m & (z_h > 0)
    flat = _flat_rows(z_o, m if population is None else _rows(population, bool))
    return m & (z_h > 0) & ((z_o > 0) | flat[:, None])


def _rank(rows: np.ndarray, pos: np.ndarray, score: np.ndarray, pref: np.ndarray) -> np.ndarray:
    """Order of candidates: preferred first, then score descending, then (rollout, position)."""
    return np.lexsort((pos, rows, -score, ~pref))


def _take(order: np.ndarray, budget: int, repeat: bool) -> np.ndarray:
    if len(order) >= budget or not repeat or len(order) == 0:
        return order[:budget]
    return np.resize(order, budget)  # cyclic: a, b, c, a, b, ...


def select_branch_points(score, mask, budget: int, scope: str = "rollout", preferred=None,
                         repeat: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Branch points of one prompt's N rollouts: (rows, positions), in selection order.

    ``scope="rollout"``: the top ``budget`` tokens of every rollout (the paper; N * budget points);
    ``scope="prompt"``: the top ``budget`` of the pool of all N rollouts' tokens (the code).
    ``preferred`` (e.g. ``strict_candidates``) ranks first, the rest fill by score. With
    ``repeat`` a pool smaller than the budget is cycled; a rollout with no eligible token gets none.
    """
    _choice("scope", scope, SCOPES)
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    s, m = _rows(score), _rows(mask, bool)
    pref = m if preferred is None else _rows(preferred, bool) & m
    rows, pos = np.nonzero(m)
    order = _rank(rows, pos, s[rows, pos], pref[rows, pos])
    if scope == "prompt":
        pick = _take(order, budget, repeat)
    else:
        ranked_rows = rows[order]
        pick = np.concatenate([_take(order[ranked_rows == n], budget, repeat) for n in range(m.shape[0])]
                              or [np.zeros(0, dtype=int)])
    return rows[pick].astype(int), pos[pick].astype(int)


def choose_branch_points(entropy, omega, mask, budget: int, scope: str = "rollout", strict: bool = False,
                         score: str = "bs", clip_eps: float = 0.2, flat_omega: str = "entropy",
                         repeat: bool = True, eligible=None) -> tuple[np.ndarray, np.ndarray]:
    """Score, optional strict rule, selection in one call: (rows, positions) of one prompt.

    The z-scores are taken over ``mask`` (the model tokens) and the points are chosen among
    ``eligible`` (default: ``mask``; the trainer passes model tokens that are neither whitespace
    only nor special). A whitespace token's entropy still counts in its rollout's mean and std,
    as in the authors' code: normalising over the eligible tokens alone would shift every z-score
    of a rollout with high-entropy newlines and can change which points win.
    Paper: ``scope="rollout", strict=False``; the authors' code: ``scope="prompt", strict=True``.
    """
    cand = _rows(mask, bool) if eligible is None else _rows(eligible, bool) & _rows(mask, bool)
    bs, z_h, z_o = branch_score(entropy, omega, mask, clip_eps, score, flat_omega)
    pref = strict_candidates(z_h, z_o, cand, score, population=mask) if strict else None
    return select_branch_points(bs, cand, budget, scope, pref, repeat)


# ============================================================================ diagnostics
def branch_diagnostics(entropy, omega, mask, rows, pos, parent_rewards=None,
                       branch_rewards=None) -> dict[str, float]:
    """Branch points per rollout, entropy / Omega at the chosen points vs all masked tokens, and
    the share of branches whose reward differs from their parent's."""
    m = _rows(mask, bool)
    h, o = _rows(entropy), _rows(omega)
    rows, pos = np.asarray(rows, dtype=int), np.asarray(pos, dtype=int)
    out = {"branch_points_per_rollout": len(rows) / max(m.shape[0], 1),
           "entropy_all": float(h[m].mean()) if m.any() else float("nan"),
           "omega_all": float(o[m].mean()) if m.any() else float("nan"),
           "entropy_chosen": float(h[rows, pos].mean()) if len(rows) else float("nan"),
           "omega_chosen": float(o[rows, pos].mean()) if len(rows) else float("nan")}
    if parent_rewards is not None and branch_rewards is not None and len(rows):
        parent = np.asarray(parent_rewards, dtype=float)[rows]
        out["branch_outcome_differs"] = float(np.mean(parent != np.asarray(branch_rewards, dtype=float)))
    return out

