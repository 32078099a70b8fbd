"""APPO's formulas as pure numpy functions (Agentic Procedural Policy Optimization, arXiv:2606.12384).

APPO picks *branch points* inside the model's own tokens of an initial rollout, resamples a
continuation from each, compares initial rollouts and branches in two groups, and scales each
token's advantage by how much the policy favours what follows it. The choice of branch points
(Eqs. 3-5) is a rollout decision and lives in ``agentrl.algorithms.appo_branch_points``; here are
the advantages (Eq. 6), the loss's future weight (Eq. 7) and the estimator. Every function here is pure
(arrays in, arrays out) and has an exact-value test in ``tests/credit/test_appo.py``.

Token layout
------------
Token arrays are ``(N, T)``: the completion tokens of N rollouts of one batch, left-aligned and
right-padded. ``mask[n, t]`` is True for the tokens that count: the model's own tokens (tool
results, the env's ``<result>`` turns, and padding are False). Branch points are chosen among a
narrower set, the *eligible* tokens: the authors skip tokens whose text is whitespace only
(``agentrl.algorithms.appo_branch_points.eligible_tokens``; the algorithm also skips special
tokens). z-scores are taken over ``mask``, candidates come from ``eligible``. Distances inside the decayed
sums (``gamma ** (k - t)``) count sequence positions, so a tool result between two model tokens
lengthens their distance but adds nothing to the sum.

Advantages (Eq. 6)
------------------
``group_relative`` is (R - mean) / (population std + 1e-6) within a group; a group of one or with
zero std gives exactly 0 (the code). ``dual_group_advantages`` groups initial rollouts by prompt
and branches by prompt separately, then gives token t of initial rollout r:

* ``combine="average"`` (paper, default): the average of A_init(r) and the mean of A_branch(b)
  over r's branches b with t_b >= t (a branch keeps the chosen token t_b, so its outcome speaks
  for every token up to and including t_b); tokens after r's last branch point get A_init(r);
* ``combine="sum"`` (code): A_init(r) + that mean.

``grouping="joint"`` is our reading of Table 4's "w/o dual group": one group per prompt holding
initial rollouts and branches together, mapped to tokens the same way. Branch rows carry no loss.

Future-aware weight (Eq. 7), applied inside the loss
----------------------------------------------------
``future_kl``: Delta_k = clamp(log pi_theta - log pi_old, +-20) of the current micro-batch, tokens
with Delta > log 3 left out of the sum, FutureKL_t = sum_{k >= t} gamma^(k-t) Delta_k with
gamma = 2^(-1/decay) (``gamma_from_decay``; decay 64 in the authors' scripts, 128 their default).
``future_weight``: f = clip(exp(FutureKL), 1.0, 1.2) ("high only", the code's default) or
clip(., 0.8, 1.2); the trainer detaches it. ``future_aware_advantages``: A~ = A (1 + b f), b = 1,
with the safety clamp f in [0.8, 1] where A < 0 and the token's ratio > 6. Note that f >= 1 and
b = 1 at least double every advantage (|A~| >= 2|A|), and in the first micro-batch of a single-epoch update
pi_theta = pi_old, so f = 1 exactly and A~ = 2A.
"""

from __future__ import annotations

import math

import numpy as np

from .batch import Batch
from .registry import GAMMA, Out, Param, register

EPS = 1e-6
"""Added to the population std in every z-score and group normalisation (the authors' code)."""
LOG_CLAMP = 20.0
"""Log-ratios (and Omega's exponent) are clamped to +-LOG_CLAMP."""
MAX_DELTA = math.log(3.0)
"""Tokens whose log-ratio exceeds log 3 are left out of FutureKL (Eq. 7, the code)."""
SCORES = ("bs", "entropy")
SCOPES = ("rollout", "prompt")
COMBINES = ("average", "sum")
GROUPINGS = ("dual", "joint")
FLAT_OMEGA = ("entropy", "keep")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def _rows(x, dtype=float) -> np.ndarray:
    a = np.asarray(x, dtype=dtype)
    return a[None, :] if a.ndim == 1 else a


# ============================================================================ Omega (Eq. 4)
def discounted_suffix_sum(x, gamma: float) -> np.ndarray:
    """out[:, t] = sum_{k >= t} gamma^(k-t) x[:, k] along the last axis."""
    a = _rows(x)
    if gamma == 1.0:
        return np.cumsum(a[:, ::-1], axis=1)[:, ::-1]
    out = np.empty_like(a)
    acc = np.zeros(a.shape[0])
    for t in range(a.shape[1] - 1, -1, -1):
        acc = a[:, t] + gamma * acc
        out[:, t] = acc
    return out


# ============================================================================ advantages (Eq. 6)
def group_relative(rewards, groups, eps: float = EPS) -> np.ndarray:
    """(R - mean_g) / (population std_g + eps) per group; exactly 0 for a group of one or zero std."""
    r = np.asarray(rewards, dtype=float)
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    cnt = np.bincount(g)
    ref = r[np.unique(g, return_index=True)[1]][g]  # first member: equal values give exact 0
    mean = ref + np.bincount(g, r - ref)[g] / cnt[g]
    std = np.sqrt(np.bincount(g, (r - mean) ** 2)[g] / cnt[g])
    return np.where((cnt[g] > 1) & (std > 0), (r - mean) / (std + eps), 0.0)


def branch_token_mean(values, parent, pos, n_rollouts: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Per initial rollout r and token t: (mean of values[b] over branches b of r with pos[b] >= t,
    how many such branches). Both (n_rollouts, length)."""
    v = np.asarray(values, dtype=float)
    p, t = np.asarray(parent, dtype=int), np.asarray(pos, dtype=int)
    if np.any((t < 0) | (t >= length)) or np.any((p < 0) | (p >= n_rollouts)):
        raise ValueError("branch parents and positions must index the initial rollouts' tokens")
    s = np.zeros((n_rollouts, length))
    c = np.zeros((n_rollouts, length))
    np.add.at(s, (p, t), v)
    np.add.at(c, (p, t), 1.0)
    s, c = discounted_suffix_sum(s, 1.0), discounted_suffix_sum(c, 1.0)
    return np.where(c > 0, s / np.maximum(c, 1.0), 0.0), c


def dual_group_advantages(init_rewards, init_groups, branch_rewards, branch_groups, branch_parent,
                          branch_pos, length: int, combine: str = "average", grouping: str = "dual",
                          eps: float = EPS) -> np.ndarray:
    """Token advantages (N_init, length) of the initial rollouts from both groups (Eq. 6).

    ``branch_parent[b]`` indexes the initial rollout branch b continues, ``branch_pos[b]`` the
    chosen token (kept in the branch). ``combine`` / ``grouping``: see the module docstring.
    """
    _choice("combine", combine, COMBINES)
    _choice("grouping", grouping, GROUPINGS)
    ri, rb = np.asarray(init_rewards, dtype=float), np.asarray(branch_rewards, dtype=float)
    gi, gb = list(init_groups), list(branch_groups)
    if grouping == "dual":
        a_init = group_relative(ri, gi, eps)
        a_branch = group_relative(rb, gb, eps) if len(rb) else rb
    else:
        both = group_relative(np.concatenate([ri, rb]), gi + gb, eps)
        a_init, a_branch = both[: len(ri)], both[len(ri):]
    mean_b, cnt = branch_token_mean(a_branch, branch_parent, branch_pos, len(ri), length)
    base = np.repeat(a_init[:, None], length, axis=1)
    if combine == "sum":
        return base + mean_b
    return np.where(cnt > 0, 0.5 * (base + mean_b), base)


# ============================================================================ future weight (Eq. 7)
def gamma_from_decay(decay: float) -> float:
    """gamma = 2^(-1/decay): a log-ratio ``decay`` tokens ahead counts half."""
    if decay <= 0:
        raise ValueError(f"decay must be > 0, got {decay}")
    return 2.0 ** (-1.0 / decay)


def future_kl(logp, old_logp, mask, gamma: float, clamp: float = LOG_CLAMP,
              max_delta: float = MAX_DELTA) -> np.ndarray:
    """FutureKL_t = sum_{k >= t} gamma^(k-t) Delta_k, Delta = clamp(logp - old_logp, +-clamp),
    over masked tokens with Delta <= max_delta (Eq. 7's exponent, the code's form)."""
    delta = np.clip(_rows(logp) - _rows(old_logp), -clamp, clamp)
    keep = _rows(mask, bool) & (delta <= max_delta)
    return discounted_suffix_sum(np.where(keep, delta, 0.0), gamma)


def future_weight(fkl, clip_eps: float = 0.2, high_only: bool = True, clamp: float = LOG_CLAMP) -> np.ndarray:
    """f = clip(exp(FutureKL), 1 - eps', 1 + eps'); ``high_only`` raises the floor to 1 (the code)."""
    low = 1.0 if high_only else 1.0 - clip_eps
    return np.clip(np.exp(np.clip(np.asarray(fkl, dtype=float), -clamp, clamp)), low, 1.0 + clip_eps)


def safe_future_weight(adv, weight, ratio=None, safety_ratio: float | None = 6.0,
                       safety_range: tuple[float, float] = (0.8, 1.0)) -> np.ndarray:
    """The weight f that Eq. 7 actually uses: where A < 0 and the token's ratio > ``safety_ratio``,
    f is clamped to ``safety_range`` (the code's safety clamp; ``ratio=None`` or
    ``safety_ratio=None`` turns it off). Diagnostics report this f, not the unclamped one."""
    a = np.asarray(adv, dtype=float)
    f = np.broadcast_to(np.asarray(weight, dtype=float), a.shape)
    if ratio is None or safety_ratio is None:
        return f.copy()
    risky = (a < 0) & (np.asarray(ratio, dtype=float) > safety_ratio)
    return np.where(risky, np.clip(f, *safety_range), f)


def future_aware_advantages(adv, weight, ratio=None, b: float = 1.0, safety_ratio: float | None = 6.0,
                            safety_range: tuple[float, float] = (0.8, 1.0)) -> np.ndarray:
    """A~ = A (1 + b f) (Eq. 7), f after the safety clamp (``safe_future_weight``)."""
    a = np.asarray(adv, dtype=float)
    return a * (1.0 + b * safe_future_weight(a, weight, ratio, safety_ratio, safety_range))


# ============================================================================ the estimator
# ``credit: appo`` in a recipe. Records alone cannot carry token-level credit, so the estimator
# gives each record its rollout's group-relative outcome (Eq. 6's inner term: initial rollouts
# and branches in their own groups, branches marked by BRANCH_SUFFIX on the group id); the APPO
# algorithm (agentrl.algorithms.appo) maps those onto the initial rollouts' tokens with
# ``dual_group_advantages`` and reads the other kwargs declared here.

BRANCH_SUFFIX = "#branch"
"""Appended to a parent's group id to name its branches' group."""
PREFIX_KEY = "branch_prefix_return"
"""Info key on a branch's records: the rewards its parent collected before the branch step k.

A branch's records start at step k, but the branch *is* the parent's steps 0..k-1 followed by its
own: its return R_b must include what the parent earned before k. With outcome-only rewards the
prefix is 0; with per-step shaping (``valid_action_reward``) leaving it out would lower every
late branch's return by the parent's earlier bonuses and bias A_branch against late branch
points. The APPO algorithm fills it (``agentrl.algorithms.appo.inherit_prefix_rewards``); returns here add it.
"""


def trajectory_returns(batch: Batch) -> np.ndarray:
    """R per trajectory: its records' rewards plus, for a branch, its inherited prefix (``PREFIX_KEY``)."""
    infos = np.asarray(batch.field("info", None), dtype=object)[batch.traj_start]
    prefix = np.array([float((i or {}).get(PREFIX_KEY, 0.0)) for i in infos], dtype=float)
    return batch.episode_return() + prefix


OMEGA_BASELINES = ("ref", "behaviour")

GROUPING = Param("dual", "'dual': initial rollouts and branches in separate groups (Eq. 6); 'joint': one group per "
                 "prompt (Table 4's w/o dual group)", "choice", GROUPINGS)
"""Eq. 6's groups: the estimator's kwarg, and the APPO algorithm's (which passes its own to the estimator)."""

APPO_PARAMS = {"gamma": GAMMA, "grouping": GROUPING}
"""The ``appo`` estimator's own kwargs (record level). The APPO algorithm's settings (branching,
Eq. 6's token map, Eq. 7) are its ``algorithm_kwargs``: ``agentrl.algorithms.appo.PARAMS``."""


def _group_keys(batch: Batch, grouping: str) -> list[str]:
    """One group key per trajectory: its group id, with the branch suffix dropped for 'joint'."""
    gids = np.asarray(batch.field("group_id"), dtype=object)[batch.traj_start]
    if grouping == "joint":
        return [str(g).removesuffix(BRANCH_SUFFIX) for g in gids]
    return [str(g) for g in gids]


@register("appo", APPO_PARAMS, "APPO, arXiv:2606.12384 Eqs. 3-7")
def appo(batch: Batch, gamma: float, grouping: str, **_: object) -> Out:
    """Each record gets its rollout's group-relative outcome ``group_relative`` (Eq. 6's inner
    term; branches grouped apart under 'dual', a branch's return including its parent's rewards
    before the branch step, ``PREFIX_KEY``). The token-level map and the loss weight are the
    APPO algorithm's (``agentrl.algorithms.appo``), configured by its ``algorithm_kwargs``; under
    it the estimator gets the algorithm's ``grouping``."""
    ret = trajectory_returns(batch)
    a = group_relative(ret, _group_keys(batch, grouping))
    is_branch = np.array([str(g).endswith(BRANCH_SUFFIX) for g in
                          np.asarray(batch.field("group_id"), dtype=object)[batch.traj_start]], dtype=bool)
    diag = {"branch_rollouts": float(is_branch.sum()), "initial_rollouts": float((~is_branch).sum())}
    return a[batch.traj], np.zeros(batch.n), diag
