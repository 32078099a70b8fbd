"""Role-level credit for sequential collaborations (CCPO / SEPO, arXiv 2603.21563).

Collaboration credit (Think-Solve: role 1 = Thinker, role 2 = Solver)
=====================================================================

Inputs are aligned arrays over one batch of N joint rollouts: ``group`` (the prompt id),
``r_joint`` (verifier reward of the Solver's answer given the Thinker's thought) and, for the
counterfactual modules, ``r_solo`` (reward of a Solver answer sampled from the problem alone,
independently of the Thinker, App. C.2 Eq. 23; the k-th solo pairs with the k-th joint).
Each module returns one reward and one advantage per rollout for each role.

``shared`` (Sec. 3.1, the ReMA baseline)
    r_1 = r_2 = R_joint.

``ccpo`` (App. C.2; the default form)
    Delta = R_joint - R_solo                                   (Sec. 3.2; App. B Eq. 8)
    z_x = (x - mu_x) / (sigma_x + eps) for x in {Delta, R_joint, R_solo}, with the EMA
        statistics from BEFORE this batch; then mu_x <- lam mu_x + (1 - lam) mean_batch(x),
        sigma^2_x <- lam sigma^2_x + (1 - lam) var_batch(x)   (App. C.2, EMA displays)
    r_1 = tanh(alpha z_Delta)                                  (App. C.2, Thinker reward)
    g = sigmoid(eta mu_Delta / (sigma_Delta + eps))            (App. C.2, trust gate)
    r_2 = g z_joint + (1 - g) z_solo                           (App. C.2, Solver reward)
    A_i = (r_i - mean_group(r_i)) / (std_group(r_i) + eps)     (App. C.2, within-prompt)
    Conventions the paper leaves open, fixed here as in the authors' v1 code: the first update
    sets mu and sigma^2 to the batch mean and (population) variance; sigma = sqrt(sigma^2), or
    1 when sigma^2 <= 1e-6. Warm-up (no update yet, or fewer than ``min_samples`` values seen
    before this batch): the paper gives only the count ("min samples for normalization 50",
    Table 5), not what the rewards are meanwhile. ``warmup="raw"`` (default, the authors' v1
    code) returns the raw signals r_1 = Delta and r_2 = R_joint; ``warmup="shaped"`` keeps the
    shaping and normalises nothing: r_1 = tanh(alpha Delta), r_2 = g R_joint + (1 - g) R_solo
    with the current gate (g = 0.5 before the first update). ``min_samples`` defaults to 50
    (Table 5); the authors' code used 10. Defaults alpha = eta = 1, lam = 0.99 (Table 5).

``ccpo_bonus`` (the authors' newer code, not in the paper)
    b = mean of the prompt's R_solo; bonus = +1 if R_joint > t and b < t, -1 if R_joint < t
    and b > t, else 0 (t = 0 for +-1 rewards, the authors' scale; 0/1 rewards need t = 0.5, and a
    recipe that pairs them with t = 0 is refused, ``check_bonus_threshold``); r_1 = R_joint + 0.2 bonus,
    r_2 = R_joint; A_i = r_i - mean_group(r_i) (their GRPO ran without std scaling).

``sepo`` (Sec. 3.3 and App. C.3)
    Each role rates the finished collaboration with a pair (Thinker share, Solver share) from
    the 9 levels (0.9, 0.1), (0.8, 0.2), ..., (0.1, 0.9): the rater's own share is its
    self score p^self, the other share its peer score p^peer.
    s_1 = eta p_1^self + (1 - eta) p_2^peer                    (Sec. 3.3 Eq. 1)
    s_2 = eta p_2^self + (1 - eta) p_1^peer                    (Sec. 3.3 Eq. 2)
    w_i = s_i / (s_1 + s_2 + eps)
    bonus_i = w_i - mean_group(w_i)   (raw w_i with centring off; a group of one gives 0)
    r_i = R_ver + lam_credit bonus_i if R_ver = +1, R_ver - lam_blame bonus_i if R_ver = -1
    lam_credit = lam_blame = 0.2 (Sec. 3.3). eta = 0.3 is the authors' code's self weight (the
    paper gives no value). A rating is parsed from the reply's first JSON object with an
    ``outcome`` or ``pair`` key, if its outcome matches the verifier and its pair is one of the 9
    levels (percentages such as [70, 30] name the same level); else by a regex for a labelled
    pair of exactly two numbers, refused if a labelled outcome contradicts the verifier; else it
    is (0.5, 0.5) and counted invalid (``sepo_invalid_frac``). Where this departs from the
    authors' parser, and why: agentrl/credit/README.md, "SEPO's rating parser".

Group-relative advantages use the sample std (ddof = 1) and eps = 1e-6, as the rest of
agentrl/credit; a group of one rollout is centred on 0 with std 1 (the authors' convention).
Diagnostics (Fig. 2, Sec. 5.5): R_joint and R_solo means, the fractions of helpful
(Delta > 0), redundant (Delta = 0) and harmful (Delta < 0) thoughts, each role's reward and
advantage mean / std, the gate, SEPO's invalid-rating fraction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from .estimators import Param
from .ratings import (  # noqa: F401  (the rating protocol; re-exported for collab callers)
    LEVELS,
    OUTCOMES,
    RATING_TEMPLATE,
    ROLES,
    SHARE,
    SOLVER,
    THINKER,
    Rating,
    parse_rating,
    rating_prompt,
)

EPS = 1e-6
"""eps in every denominator (App. C.2; the authors' code: 1e-6)."""
VAR_FLOOR = 1e-6
"""An EMA variance at or below this gives sigma = 1 (no scaling) instead of a near-zero divisor."""
SCALES = ("std", "none")
WARMUPS = ("raw", "shaped")
"""CCPO's rewards while its statistics warm up: the raw signals (authors' code) or shaped ones."""


@dataclass
class CollabCredit:
    """Per-role rewards and advantages of one batch of collaboration rollouts."""

    rewards: dict[str, np.ndarray]
    """Role name -> float64 reward per rollout (input order)."""
    advantages: dict[str, np.ndarray]
    """Role name -> float64 group-relative advantage per rollout (input order)."""
    diagnostics: dict[str, float] = field(default_factory=dict)
    """Plain-named floats for the logger."""


# ============================================================================ group advantages
def group_advantages(r: np.ndarray, group: np.ndarray, scale: str = "std", eps: float = EPS) -> np.ndarray:
    """A = (r - mean_g) / (std_g + eps) inside each prompt group (App. C.2), or r - mean_g.

    std is the sample std (ddof = 1). A group of one gets mean 0 and std 1 (the authors'
    convention), i.e. A = r / (1 + eps). Means are taken around the group's first value, so a
    group of equal rewards gets exactly 0.
    """
    if scale not in SCALES:
        raise ValueError(f"group advantages: scale={scale!r} must be one of {', '.join(map(repr, SCALES))}")
    r = np.asarray(r, dtype=np.float64)
    _, first, inv = np.unique(np.asarray(group), return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    n = np.bincount(inv).astype(np.float64)
    ref = r[first]
    mean = ref + np.bincount(inv, r - ref[inv]) / n
    single = n == 1
    mean[single] = 0.0
    dev = r - mean[inv]
    if scale == "none":
        return dev
    std = np.sqrt(np.bincount(inv, dev * dev) / np.maximum(n - 1, 1))
    std[single] = 1.0
    return dev / (std[inv] + eps)


def group_center(x: np.ndarray, group: np.ndarray) -> np.ndarray:
    """x - mean of x's prompt group, with no special case: a group of one gives exactly 0.

    SEPO's bonus (Sec. 3.3: w_i - mean over the group) is a centring, not an advantage, so the
    group-of-one rule of ``group_advantages`` (mean 0) does not apply: a lone rollout's w equals
    its own mean. Means are taken around the group's first value (equal values give exactly 0).
    """
    x = np.asarray(x, dtype=np.float64)
    _, first, inv = np.unique(np.asarray(group), return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    ref = x[first]
    mean = ref + np.bincount(inv, x - ref[inv]) / np.bincount(inv)
    return x - mean[inv]


# ============================================================================ shared
def shared(r_joint: Sequence[float], group: Sequence[Any], scale: str = "std") -> CollabCredit:
    """Both roles get R_joint (Sec. 3.1)."""
    rj, g = _arrays(group, r_joint)
    a = group_advantages(rj, g, scale)
    return _credit({THINKER: rj.copy(), SOLVER: rj.copy()}, {THINKER: a, SOLVER: a.copy()}, rj, None)


# ============================================================================ ccpo
@dataclass
class EmaStat:
    """Running mean and variance of one reward stream (App. C.2)."""

    mean: float = 0.0
    """mu: EMA of the batch means."""
    var: float = 0.0
    """sigma^2: EMA of the batch (population) variances."""
    count: int = 0
    """Values seen so far (the warm-up counts these)."""
    updates: int = 0
    """Batches seen so far."""

    @property
    def sigma(self) -> float:
        return math.sqrt(self.var) if self.var > VAR_FLOOR else 1.0

    def ready(self, min_samples: int) -> bool:
        """Normalise with these statistics? (at least one update and min_samples values)."""
        return self.updates > 0 and self.count >= min_samples

    def z(self, x: np.ndarray, min_samples: int, eps: float = EPS) -> np.ndarray:
        """(x - mu) / (sigma + eps), or x itself during warm-up."""
        return (x - self.mean) / (self.sigma + eps) if self.ready(min_samples) else x.copy()

    def updated(self, x: np.ndarray, lam: float) -> EmaStat:
        """The statistics after seeing batch ``x`` (a new object; self is unchanged)."""
        if x.size == 0:
            return replace(self)
        bm, bv = float(x.mean()), float(x.var())
        if self.updates == 0:
            return EmaStat(bm, bv, int(x.size), 1)
        return EmaStat(
            lam * self.mean + (1 - lam) * bm,
            lam * self.var + (1 - lam) * bv,
            self.count + x.size,
            self.updates + 1,
        )


@dataclass
class CcpoState:
    """CCPO's running statistics; checkpoint them with ``state_dict`` / ``from_state_dict``."""

    delta: EmaStat = field(default_factory=EmaStat)
    """Statistics of Delta = R_joint - R_solo."""
    joint: EmaStat = field(default_factory=EmaStat)
    """Statistics of R_joint."""
    solo: EmaStat = field(default_factory=EmaStat)
    """Statistics of R_solo."""

    def state_dict(self) -> dict[str, dict[str, float]]:
        return {k: asdict(getattr(self, k)) for k in ("delta", "joint", "solo")}

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> CcpoState:
        want = {"delta", "joint", "solo"}
        if not isinstance(d, dict) or set(d) != want:
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"CCPO state_dict needs keys delta, joint, solo; got {got}")
        out = {}
        for k in sorted(want):
            s = d[k]
            if not isinstance(s, dict) or set(s) != {"mean", "var", "count", "updates"}:
                raise ValueError(f"CCPO state_dict[{k!r}] needs keys count, mean, updates, var")
            out[k] = EmaStat(float(s["mean"]), float(s["var"]), int(s["count"]), int(s["updates"]))
        return cls(**out)


def ccpo_gate(stat: EmaStat, eta: float = 1.0, eps: float = EPS) -> float:
    """g = sigmoid(eta mu_Delta / (sigma_Delta + eps)) (App. C.2): trust in the joint reward."""
    u = eta * stat.mean / (stat.sigma + eps)
    # sigma can be ~1e-3 (VAR_FLOOR), so |u| reaches thousands: keep exp's argument <= 0
    return 1.0 / (1.0 + math.exp(-u)) if u >= 0 else math.exp(u) / (1.0 + math.exp(u))


def ccpo(
    r_joint: Sequence[float],
    r_solo: Sequence[float],
    group: Sequence[Any],
    state: CcpoState | None = None,
    alpha: float = 1.0,
    eta: float = 1.0,
    lam: float = 0.99,
    min_samples: int = 50,
    scale: str = "std",
    warmup: str = "raw",
) -> tuple[CollabCredit, CcpoState]:
    """CCPO's role rewards and advantages (App. C.2, see the module doc) and the new state.

    Pure: ``state`` is not modified; keep the returned state for the next batch.
    """
    if warmup not in WARMUPS:
        raise ValueError(f"ccpo: warmup={warmup!r} must be one of {', '.join(map(repr, WARMUPS))}")
    rj, g, rs = _arrays(group, r_joint, r_solo)
    state = state or CcpoState()
    delta = rj - rs
    gate = ccpo_gate(state.delta, eta)
    if warmup == "raw" and not state.delta.ready(min_samples):  # the authors' v1 code
        r1, r2 = delta, rj.copy()
    else:
        r1 = np.tanh(alpha * state.delta.z(delta, min_samples))
        r2 = gate * state.joint.z(rj, min_samples) + (1 - gate) * state.solo.z(rs, min_samples)
    new = CcpoState(
        state.delta.updated(delta, lam), state.joint.updated(rj, lam), state.solo.updated(rs, lam)
    )
    out = _credit(
        {THINKER: r1, SOLVER: r2},
        {THINKER: group_advantages(r1, g, scale), SOLVER: group_advantages(r2, g, scale)},
        rj,
        rs,
    )
    out.diagnostics.update(
        {
            "ccpo_gate": gate,
            "ccpo_normalised": float(state.delta.ready(min_samples)),
            "ccpo_delta_ema": new.delta.mean,
        }
    )
    return out, new


def ccpo_bonus(
    r_joint: Sequence[float],
    r_solo: Sequence[float],
    group: Sequence[Any],
    weight: float = 0.2,
    threshold: float = 0.0,
    scale: str = "none",
) -> CollabCredit:
    """The authors' newer event bonus: +-1 on the Thinker when joint and solo disagree."""
    rj, g, rs = _arrays(group, r_joint, r_solo)
    _, inv = np.unique(g, return_inverse=True)
    inv = inv.reshape(-1)
    base = (np.bincount(inv, rs) / np.bincount(inv))[inv]
    bonus = np.where((rj > threshold) & (base < threshold), 1.0, 0.0) - np.where(
        (rj < threshold) & (base > threshold), 1.0, 0.0
    )
    r1 = rj + weight * bonus
    out = _credit(
        {THINKER: r1, SOLVER: rj.copy()},
        {THINKER: group_advantages(r1, g, scale), SOLVER: group_advantages(rj, g, scale)},
        rj,
        rs,
    )
    out.diagnostics["bonus_pos_frac"] = float(np.mean(bonus > 0)) if bonus.size else 0.0
    out.diagnostics["bonus_neg_frac"] = float(np.mean(bonus < 0)) if bonus.size else 0.0
    return out


VERIFIER_RANGE = {"01": (0.0, 1.0), "pm1": (-1.0, 1.0)}
"""The verifier's (wrong, right) rewards for each reward scale of the math env."""


def check_bonus_threshold(threshold: float, scale: str) -> None:
    """ValueError (one line) unless wrong < ``threshold`` < right on the verifier's ``scale``.

    The bonus compares R_joint and the solo baseline with the threshold using strict
    inequalities, so a threshold equal to the wrong reward (the default 0 with 0/1 rewards) never
    sees a baseline below it and the Thinker's bonus never fires."""
    low, high = VERIFIER_RANGE[scale]
    if not low < threshold < high:
        raise ValueError(f"credit 'ccpo_bonus' on {scale} rewards ({low:g} wrong, {high:g} right) never fires at "
                         f"threshold {threshold:g}: set credit_kwargs: {{threshold: {(low + high) / 2:g}}}")


# ============================================================================ sepo


def sepo(
    r_ver: Sequence[float],
    group: Sequence[Any],
    thinker_ratings: Sequence[Rating | tuple[float, float]],
    solver_ratings: Sequence[Rating | tuple[float, float]],
    eta: float = 0.3,
    lam_credit: float = 0.2,
    lam_blame: float = 0.2,
    center: bool = True,
    scale: str = "std",
) -> CollabCredit:
    """SEPO's verifier-anchored role rewards and advantages (Sec. 3.3, see the module doc).

    ``r_ver`` must be +-1. A rating is a ``Rating`` or a (Thinker share, Solver share) pair.
    """
    rv, g = _arrays(group, r_ver)
    if not np.all(np.abs(rv) == 1.0):
        raise ValueError("sepo: r_ver must be +1 or -1 per rollout (use the verifier's 'pm1' scale)")
    tr, sr = (
        _pairs(thinker_ratings, rv.size, "thinker_ratings"),
        _pairs(solver_ratings, rv.size, "solver_ratings"),
    )
    s1 = eta * tr[:, 0] + (1 - eta) * sr[:, 0]  # Eq. 1: Thinker's self score, Solver's peer score
    s2 = eta * sr[:, 1] + (1 - eta) * tr[:, 1]  # Eq. 2
    w = {THINKER: s1 / (s1 + s2 + EPS), SOLVER: s2 / (s1 + s2 + EPS)}
    rewards = {}
    for role, wi in w.items():
        bonus = group_center(wi, g) if center else wi
        rewards[role] = np.where(rv > 0, rv + lam_credit * bonus, rv - lam_blame * bonus)
    out = _credit(rewards, {k: group_advantages(v, g, scale) for k, v in rewards.items()}, rv, None)
    ratings = list(thinker_ratings) + list(solver_ratings)
    out.diagnostics["sepo_invalid_frac"] = sepo_invalid_frac(ratings)
    out.diagnostics["sepo_thinker_weight_mean"] = float(w[THINKER].mean()) if rv.size else 0.0
    return out


def sepo_invalid_frac(ratings: Sequence[Rating | tuple[float, float]]) -> float:
    """Fraction of ratings that fell back to (0.5, 0.5) (plain pairs count as valid)."""
    if not ratings:
        return 0.0
    return float(np.mean([isinstance(r, Rating) and not r.valid for r in ratings]))


def _pairs(ratings: Sequence[Rating | tuple[float, float]], n: int, what: str) -> np.ndarray:
    if len(ratings) != n:
        raise ValueError(f"sepo: {what} has {len(ratings)} entries for {n} rollouts")
    return np.array(
        [(r.thinker, r.solver) if isinstance(r, Rating) else tuple(r) for r in ratings], dtype=np.float64
    ).reshape(n, 2)


# ============================================================================ diagnostics
def thought_fractions(r_joint: Sequence[float], r_solo: Sequence[float]) -> dict[str, float]:
    """Fractions of helpful (Delta > 0), redundant (Delta = 0) and harmful (Delta < 0) thoughts."""
    d = np.asarray(r_joint, dtype=np.float64) - np.asarray(r_solo, dtype=np.float64)
    if d.size == 0:
        return {"helpful_frac": 0.0, "redundant_frac": 0.0, "harmful_frac": 0.0}
    return {
        "helpful_frac": float(np.mean(d > 0)),
        "redundant_frac": float(np.mean(d == 0)),
        "harmful_frac": float(np.mean(d < 0)),
    }


def role_stats(credit: CollabCredit) -> dict[str, float]:
    """Mean and std of each role's reward and advantage: ``<role>_reward_mean`` etc."""
    out = {}
    for kind, per_role in (("reward", credit.rewards), ("adv", credit.advantages)):
        for role, x in per_role.items():
            out[f"{role}_{kind}_mean"] = float(x.mean()) if x.size else 0.0
            out[f"{role}_{kind}_std"] = float(x.std()) if x.size else 0.0
    return out


def _credit(
    rewards: dict[str, np.ndarray], advantages: dict[str, np.ndarray], rj: np.ndarray, rs: np.ndarray | None
) -> CollabCredit:
    out = CollabCredit(rewards, advantages)
    out.diagnostics["r_joint_mean"] = float(rj.mean()) if rj.size else 0.0
    if rs is not None:
        out.diagnostics["r_solo_mean"] = float(rs.mean()) if rs.size else 0.0
        out.diagnostics.update(thought_fractions(rj, rs))
    out.diagnostics.update(role_stats(out))
    return out


def _arrays(group: Sequence[Any], *xs: Sequence[float]) -> tuple[np.ndarray, ...]:
    g = np.asarray(group)
    arrs = [np.asarray(x, dtype=np.float64).reshape(-1) for x in xs]
    for a in arrs:
        if a.shape != (g.size,):
            raise ValueError(f"collaboration credit: reward array of length {a.size} for {g.size} group ids")
        if not np.all(np.isfinite(a)):
            raise ValueError("collaboration credit: rewards must be finite")
    return (arrs[0], g.reshape(-1), *arrs[1:])


# ============================================================================ kwargs
SCALE = Param(
    "std",
    "'std': (r - mean) / (std + 1e-6) in the prompt group (App. C.2); 'none': r - mean",
    "choice",
    SCALES,
)
PARAMS: dict[str, dict[str, Param]] = {
    "shared": {"scale": SCALE},
    "ccpo": {
        "alpha": Param(
            1.0, "contribution sensitivity in r_1 = tanh(alpha z_Delta) (Table 5: 1.0)", "float", lo=0.0
        ),
        "eta": Param(
            1.0, "gate sharpness in g = sigmoid(eta mu/(sigma+eps)) (Table 5: 1.0)", "float", lo=0.0
        ),
        "lam": Param(
            0.99, "EMA decay of the Delta / joint / solo statistics (Table 5: 0.99)", "float", lo=0.0, hi=1.0
        ),
        "min_samples": Param(
            50, "values seen before normalising (Table 5: 50; authors' code: 10)", "int", lo=0
        ),
        "scale": SCALE,
        "warmup": Param(
            "raw",
            "rewards before min_samples values were seen: 'raw' r1 = Delta, r2 = R_joint (authors' v1 code; "
            "the paper does not say) or 'shaped' r1 = tanh(alpha Delta), r2 = g R_joint + (1-g) R_solo",
            "choice",
            WARMUPS,
        ),
    },
    "ccpo_bonus": {
        "weight": Param(
            0.2, "weight of the +-1 disagreement bonus on the Thinker (authors' code: 0.2)", "float"
        ),
        "threshold": Param(
            0.0,
            "reward above which an answer counts as correct, strictly between the verifier's wrong and right "
            "rewards: 0 for +-1 (the authors' scale), 0.5 for 0/1 (a 0/1 recipe must set it; checked)",
            "float",
        ),
        "scale": replace(SCALE, default="none"),
    },
    "sepo": {
        "eta": Param(
            0.3,
            "self weight in s_i = eta p_i^self + (1-eta) p_j^peer (authors' code: 0.3)",
            "float",
            lo=0.0,
            hi=1.0,
        ),
        "lam_credit": Param(
            0.2, "credit weight when the verifier says correct (Sec. 3.3: 0.2)", "float", lo=0.0
        ),
        "lam_blame": Param(0.2, "blame weight when the verifier says wrong (Sec. 3.3: 0.2)", "float", lo=0.0),
        "center": Param(True, "centre the role weights in the prompt group (Sec. 3.3)", "bool"),
        "scale": SCALE,
    },
}
"""Every knob of every collaboration credit module, with default, doc and check."""
