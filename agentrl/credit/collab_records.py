"""The collaboration credit modules as registered estimators over step records.

``shared``, ``ccpo``, ``ccpo_bonus`` and ``sepo`` (formulas: ``agentrl.credit.collab``, arXiv
2603.21563 Sec. 3 and App. C) read a batch of collaboration records: one record per role turn,
each with ``info`` keys

    ``collab_id``   the collaboration (all its role turns and its counterfactual twin share it)
    ``role``        the role's name; ``role_index`` its position (0 = first to act);
                    ``n_roles`` the number of roles
    ``part``        ``joint`` (the collaboration) or ``solo`` (the counterfactual: the last
                    role without the first, sampled independently of it)
    ``ratings``     SEPO only, on the last role's joint record: ``{"thinker": [t, s, valid],
                    "solver": [t, s, valid]}``, each rater's (Thinker share, Solver share)

R_joint is the reward of the last role's joint record, R_solo that of its solo record. Each joint
record gets its role's advantage; solo records get 0 (they carry no loss). ``shared`` works with
any number of roles (every role gets the advantage of R_joint); the others credit two roles, the
first as the Thinker and the last as the Solver.

CCPO's EMA statistics persist across batches: pass the previous ``CcpoState`` (or its
``state_dict``) as the kwarg ``state``; the new state comes back in the diagnostics as
``ccpo_state/<stream>/<field>`` (``state_from_diagnostics`` rebuilds it), so the estimator
stays a pure function of its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import collab
from .batch import Batch
from .registry import GAMMA, Out, Param, register

STATE_PREFIX = "ccpo_state/"
NAMES = ("shared", "ccpo", "ccpo_bonus", "sepo")
"""The estimators registered here; ``agentrl.credit.available("collab")`` lists them."""


@dataclass(frozen=True)
class _StateParam(Param):
    """``state``: None, a ``CcpoState`` or its ``state_dict`` (checked, returned as a CcpoState)."""

    def check(self, est: str, key: str, v: Any) -> Any:
        if v is None or isinstance(v, collab.CcpoState):
            return v
        try:
            return collab.CcpoState.from_state_dict(v)
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"credit estimator {est!r}: kwarg {key}: {e}") from None


STATE = _StateParam(None, "CCPO's EMA statistics from the previous batch (None: a fresh start)", "state")
GAMMA_UNUSED = Param(GAMMA.default, "accepted for the trainer's sake; one outcome per role, nothing is "
                                    "discounted", "float", lo=0.0, hi=1.0)


@dataclass
class CollabView:
    """A batch of collaboration records, one entry per collaboration (canonical order)."""

    group: np.ndarray
    """Prompt group of each collaboration."""
    r_joint: np.ndarray
    """Reward of the last role's joint turn."""
    r_solo: np.ndarray | None
    """Reward of the solo counterfactual (None when the batch has no solo records)."""
    rec_collab: np.ndarray
    """Per record: index of its collaboration."""
    rec_role: np.ndarray
    """Per record: its role's position; -1 for solo records."""
    n_roles: int
    ratings: list[dict[str, Any]]
    """Per collaboration: the last role's joint record's ``ratings`` (may be empty)."""


def collab_view(batch: Batch, est: str, need_solo: bool) -> CollabView:
    """Index the batch by collaboration; a one-line ValueError names what is missing."""
    infos = batch.field("info", None)
    ids: dict[str, int] = {}
    rec_collab = np.empty(batch.n, np.int64)
    rec_role = np.empty(batch.n, np.int64)
    n_roles = set()
    for p, info in enumerate(infos):
        info = info or {}
        if "collab_id" not in info or "role_index" not in info or info.get("part") not in ("joint", "solo"):
            raise ValueError(f"credit {est!r} needs collaboration records (info: collab_id, role, role_index, "
                             "n_roles, part); train with a collab recipe (agentrl.collab)")
        rec_collab[p] = ids.setdefault(str(info["collab_id"]), len(ids))
        rec_role[p] = int(info["role_index"]) if info["part"] == "joint" else -1
        n_roles.add(int(info["n_roles"]))
    if len(n_roles) > 1:
        raise ValueError(f"credit {est!r}: records disagree on the number of roles: {sorted(n_roles)}")
    k = n_roles.pop() if n_roles else 2
    n = len(ids)
    group = np.full(n, -1, np.int64)
    r_joint = np.full(n, np.nan)
    r_solo = np.full(n, np.nan)
    ratings: list[dict[str, Any]] = [{} for _ in range(n)]
    for p in range(batch.n):
        c = rec_collab[p]
        group[c] = batch.group[p]
        if int(infos[p]["role_index"]) != k - 1:
            continue  # earlier roles are not graded
        if rec_role[p] == k - 1:
            r_joint[c] = batch.reward[p]
            ratings[c] = dict(infos[p].get("ratings") or {})
        else:
            r_solo[c] = batch.reward[p]
    names = list(ids)
    if np.isnan(r_joint).any():
        raise ValueError(f"credit {est!r}: collaboration {names[int(np.flatnonzero(np.isnan(r_joint))[0])]!r} "
                         "has no joint record of its last role")
    has_solo = ~np.isnan(r_solo)
    if need_solo and not has_solo.all():
        missing = names[int(np.flatnonzero(~has_solo)[0])]
        raise ValueError(f"credit {est!r} needs a solo (counterfactual) record per collaboration; "
                         f"{missing!r} has none")
    return CollabView(group, r_joint, r_solo if has_solo.all() else None, rec_collab, rec_role, k, ratings)


def _two_roles(v: CollabView, est: str) -> None:
    if v.n_roles != 2:
        raise ValueError(f"credit {est!r} credits two roles (Thinker, Solver); the records have {v.n_roles} "
                         "(use 'shared' for other collaborations)")


def _scatter(v: CollabView, credit: collab.CollabCredit) -> np.ndarray:
    """Each joint record's role advantage (first role = Thinker, last = Solver; the middle roles
    of a longer collaboration, which only ``shared`` allows, take the Solver's)."""
    a_first = credit.advantages[collab.THINKER][v.rec_collab]
    a_last = credit.advantages[collab.SOLVER][v.rec_collab]
    adv = np.where(v.rec_role == 0, a_first, a_last)
    return np.where(v.rec_role < 0, 0.0, adv)


def _out(v: CollabView, credit: collab.CollabCredit, extra: dict[str, float] | None = None) -> Out:
    diag = dict(credit.diagnostics)
    diag["collaborations"] = float(len(v.r_joint))
    if v.r_solo is not None and "r_solo_mean" not in diag:  # the diagnostics of Fig. 2 for every module
        diag["r_solo_mean"] = float(v.r_solo.mean())
        diag.update(collab.thought_fractions(v.r_joint, v.r_solo))
    diag.update(extra or {})
    return _scatter(v, credit), np.zeros(len(v.rec_role)), diag


@register("shared", {"gamma": GAMMA_UNUSED, "scale": collab.SCALE},
          "CCPO/SEPO arXiv 2603.21563 Sec. 3.1 (shared joint reward, the ReMA baseline)")
def shared_records(batch: Batch, gamma: float, scale: str) -> Out:
    del gamma  # one outcome per role: nothing to discount
    v = collab_view(batch, "shared", need_solo=False)
    return _out(v, collab.shared(v.r_joint, v.group, scale))


@register("ccpo", {"gamma": GAMMA_UNUSED, **collab.PARAMS["ccpo"], "state": STATE},
          "CCPO arXiv 2603.21563 Sec. 3.2, App. C.2 (EMA-normalised counterfactual credit)")
def ccpo_records(batch: Batch, gamma: float, alpha: float, eta: float, lam: float, min_samples: int,
                 scale: str, warmup: str, state: collab.CcpoState | None) -> Out:
    del gamma
    v = collab_view(batch, "ccpo", need_solo=True)
    _two_roles(v, "ccpo")
    credit, new = collab.ccpo(v.r_joint, v.r_solo, v.group, state, alpha=alpha, eta=eta, lam=lam,
                         min_samples=min_samples, scale=scale, warmup=warmup)
    return _out(v, credit, state_diagnostics(new))


@register("ccpo_bonus", {"gamma": GAMMA_UNUSED, **collab.PARAMS["ccpo_bonus"]},
          "CCPO authors' newer code (event bonus when joint and solo disagree; not in arXiv 2603.21563)")
def ccpo_bonus_records(batch: Batch, gamma: float, weight: float, threshold: float, scale: str) -> Out:
    del gamma
    v = collab_view(batch, "ccpo_bonus", need_solo=True)
    _two_roles(v, "ccpo_bonus")
    return _out(v, collab.ccpo_bonus(v.r_joint, v.r_solo, v.group, weight=weight, threshold=threshold, scale=scale))


def _rating(v: Any) -> collab.Rating:
    t, s, valid = v
    return collab.Rating(float(t), float(s), bool(valid), "json" if valid else "fallback")


@register("sepo", {"gamma": GAMMA_UNUSED, **collab.PARAMS["sepo"]},
          "SEPO arXiv 2603.21563 Sec. 3.3, App. C.3 (verifier-anchored self/peer ratings)")
def sepo_records(batch: Batch, gamma: float, eta: float, lam_credit: float, lam_blame: float, center: bool,
                 scale: str) -> Out:
    del gamma
    v = collab_view(batch, "sepo", need_solo=False)
    _two_roles(v, "sepo")
    missing = [i for i, r in enumerate(v.ratings) if not {collab.THINKER, collab.SOLVER} <= set(r)]
    if missing:
        raise ValueError("credit 'sepo' needs both roles' ratings (info.ratings.thinker/solver) on the last "
                         "role's joint record; train with credit sepo so the trainer asks for them")
    t = [_rating(r[collab.THINKER]) for r in v.ratings]
    s = [_rating(r[collab.SOLVER]) for r in v.ratings]
    credit = collab.sepo(v.r_joint, v.group, t, s, eta=eta, lam_credit=lam_credit, lam_blame=lam_blame,
                    center=center, scale=scale)
    return _out(v, credit)


# ============================================================================ CCPO state
def state_diagnostics(state: collab.CcpoState) -> dict[str, float]:
    """``ccpo_state/<stream>/<field>`` floats of a CcpoState (counts are exact below 2**53)."""
    return {f"{STATE_PREFIX}{k}/{f}": float(x) for k, d in state.state_dict().items() for f, x in d.items()}


def state_from_diagnostics(diag: dict[str, float]) -> collab.CcpoState | None:
    """The CcpoState a ``ccpo`` call reported in its diagnostics (None if it reported none)."""
    d: dict[str, dict[str, float]] = {}
    for key, x in diag.items():
        if key.startswith(STATE_PREFIX):
            stream, f = key[len(STATE_PREFIX):].split("/")
            d.setdefault(stream, {})[f] = x
    return collab.CcpoState.from_state_dict(d) if d else None
