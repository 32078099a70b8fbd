"""History-keyed step groups: HGPO as its authors compute it (``hgpo``), and the (obs, action)
history-pair hierarchy read from BiPACE's one-line description of HGPO (``hgpo_pairs``).

HGPO (He et al. 2026, cited by BiPACE Sec. 3.4) is specified here by its authors' computation,
README.md "HGPO": per step, a weighted average of Eq. 2-style advantages over history levels.
"""

from __future__ import annotations

import numpy as np

from . import parts
from .batch import Batch
from .estimators import COMBINER, episode
from .registry import GAMMA, NORM, Out, Param, episode_params, register

K_PARAM = Param(
    2,
    "history length H: levels k = 1..H+1 key a step by its last k observations (HGPO; the env's "
    "history_length, 2 in BiPACE/verl-agent)",
    "int",
    lo=0,
)
ALPHA = Param(1.0, "level weights (k+1)^alpha (alpha > 0 favors deeper, more specific groups)", "float")


def _level(R: np.ndarray, key: np.ndarray, member: np.ndarray, norm: str) -> tuple[np.ndarray, dict]:
    """One HGPO level: (R_t - mean) / (population std + delta) (or R_t - mean) inside each key,
    over the level's members; 0 for non-members and one-member keys. Plus the level's sizes."""
    a = np.zeros(len(R))
    idx = np.flatnonzero(member)
    if len(idx) == 0:
        return a, {"singleton_frac": 0.0, "mean_cluster_size": 0.0}
    sub = np.unique(key[idx], return_inverse=True)[1].reshape(-1)
    a[idx] = parts.normalized(R[idx], sub, norm, ddof=0)
    d = parts.partition_diagnostics(sub)
    return a, {"singleton_frac": d["singleton_frac"], "mean_cluster_size": d["mean_cluster_size"]}


def _weighted_nonzero_mean(items: list[np.ndarray], log_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sum_j w_j a_j / (sum_j w_j + delta) over the items a_j != 0 of each record (HGPO's
    aggregation; 0 where none is nonzero). Returns it and each item's share (w_j a_j / denominator)
    stacked (items, n). Weights enter as logs, rescaled by their max so no alpha overflows:
    dividing num and den by c = max w turns delta into delta / c."""
    shift = float(log_w.max())
    w = np.exp(log_w - shift)
    delta = parts.DELTA * np.exp(min(-shift, 700.0))  # past e^700 delta swamps every weight: A = 0
    A = np.stack(items)
    valid = A != 0
    den = (w[:, None] * valid).sum(axis=0) + delta
    share = np.divide(w[:, None] * A, den, out=np.zeros_like(A), where=den > 0)
    return share.sum(axis=0), share


@register(
    "hgpo",
    {
        "gamma": GAMMA,
        "norm": NORM,
        "K": K_PARAM,
        "alpha": ALPHA,
        "base_group": Param(
            False, "add the episode advantage as one more item of weight 1 (the authors' base_group)", "bool"
        ),
        **episode_params(stats="steps", singleton="raw"),
    },
    "HGPO (He et al. 2026) as its authors compute it; cited by BiPACE Sec. 3.4",
)
def hgpo(batch: Batch, gamma: float, norm: str, K: int, alpha: float, base_group: bool, **ep: str) -> Out:
    """HGPO: A(i) = sum_k w_k A_k(i) / (sum_k w_k + delta) over the nonzero A_k(i), k = 1..K+1,
    w_k = (k+1)^alpha, A_k = (R_t - mean) / (population std + delta) inside the group of records
    sharing the last k observations (README.md "HGPO"). base_group adds A_ep as item k=0 (w=1)."""
    R = parts.step_returns(batch, gamma, ep["penalty"])
    levels = parts.keys_obs_sequence(batch, K)
    items, log_w = [], []
    diag = parts.partition_diagnostics(levels[0][0])
    for k, (key, member) in enumerate(levels, start=1):
        a, d = _level(R, key, member, norm)
        items.append(a)
        log_w.append(alpha * np.log(k + 1.0))
        diag[f"hgpo_k{k}_singleton_frac"] = d["singleton_frac"]
        diag[f"hgpo_k{k}_mean_cluster_size"] = d["mean_cluster_size"]
    diag["hgpo_mean_valid_levels"] = float(np.mean(np.sum(np.stack(items) != 0, axis=0)))
    if base_group:
        items.append(episode(batch, norm, **ep))
        log_w.append(0.0)  # 1^alpha
    adv, share = _weighted_nonzero_mean(items, np.asarray(log_w))
    step = share[: len(levels)].sum(axis=0)  # the history levels' part (without the episode item)
    return adv, step, diag


@register(
    "hgpo_pairs",
    {
        **COMBINER,
        "K": Param(2, "deepest level: the current obs and the last K (obs, action) pairs", "int", lo=0),
        "alpha": ALPHA,
    },
    "history-pair hierarchy after BiPACE Sec. 3.4's description of HGPO (not the HGPO authors' computation)",
)
def hgpo_pairs(batch: Batch, gamma: float, w: float, norm: str, K: int, alpha: float, **ep: str) -> Out:
    """A_ep + w * A_step, A_step = sum_k w_k A_k / sum_k w_k over levels k = 0..K whose group has
    >= 2 members, w_k = (k+1)^alpha, A_k = Eq. 2 inside the level-k context (current obs and the
    last k (obs, action) pairs, pairs before the start a distinct "none"). K=0 is GiGPO."""
    R = parts.step_returns(batch, gamma, ep["penalty"])
    levels = parts.keys_history(batch, K)
    num = np.zeros(batch.n)
    den = np.zeros(batch.n)
    diag = parts.partition_diagnostics(levels[0])
    # w_k = (k+1)^alpha up to a common factor (it cancels in num / den); in logs, so that no
    # alpha overflows
    log_w = alpha * np.log(np.arange(1.0, len(levels) + 1.0))
    weights = np.exp(log_w - log_w.max())
    for k, key in enumerate(levels):
        valid = np.bincount(key)[key] >= 2
        num += np.where(valid, weights[k] * parts.normalized(R, key, norm), 0.0)
        den += np.where(valid, weights[k], 0.0)
        d = parts.partition_diagnostics(key)
        diag[f"hgpo_k{k}_singleton_frac"] = d["singleton_frac"]
        diag[f"hgpo_k{k}_mean_cluster_size"] = d["mean_cluster_size"]
        diag["hgpo_mean_valid_levels"] = diag.get("hgpo_mean_valid_levels", 0.0) + float(valid.mean())
    a_step = np.divide(num, den, out=np.zeros(batch.n), where=den > 0)
    return parts.combine(episode(batch, norm, **ep), a_step, w), a_step, diag
