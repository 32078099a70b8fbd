"""The registered collaboration credit modules on step records: exact values worked out by hand,
the CCPO state carried through the diagnostics, and one-line errors."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from agentrl import credit
from agentrl.credit import collab
from agentrl.credit.collab_records import state_from_diagnostics

R = 1 / math.sqrt(2)  # two values a > b in a group: A = +-(a-b)/2 / ((a-b)/sqrt(2) + eps) ~ +-1/sqrt(2)


def _rec(cid, group, role, idx, part, reward, n_roles=2, **info):
    return dict(group_id=group, traj_id=f"{cid}:{part}:{role}", t=0, obs="problem", action="", reward=float(reward),
                done=True, info=dict(collab_id=cid, role=role, role_index=idx, n_roles=n_roles, part=part, **info))


def think_solve_records(r_joint, r_solo, groups, ratings=None):
    recs = []
    for j, (rj, rs, g) in enumerate(zip(r_joint, r_solo, groups, strict=True)):
        cid = f"{g}/{j}"
        extra = {"ratings": ratings[j]} if ratings else {}
        recs += [_rec(cid, g, "thinker", 0, "joint", 0.0), _rec(cid, g, "solver", 1, "joint", rj, **extra)]
        if rs is not None:
            recs.append(_rec(cid, g, "solver", 1, "solo", rs))
    return recs


# g0: joint [1, 0], solo [0, 0]; g1: joint [1, 1], solo [1, 0]
RJ, RS, G = [1, 0, 1, 1], [0, 0, 1, 0], ["g0", "g0", "g1", "g1"]


def test_ccpo_records_by_hand_and_state_through_diagnostics():
    recs = think_solve_records(RJ, RS, G)
    res = credit.compute("ccpo", recs)
    adv = res.step_advantages.reshape(4, 3)  # per collaboration: thinker, solver, solo
    # warm-up (min_samples 50), the authors' raw signals: r1 = Delta = [1, 0, 0, 1]:
    # g0 [1, 0] -> A1 = [+R, -R]; g1 [0, 1] -> [-R, +R]
    assert adv[:, 0] == pytest.approx([R, -R, -R, R], rel=1e-5)
    # r2 = R_joint = g0 [1, 0], g1 [1, 1] -> [+R, -R, 0, 0]
    assert adv[:, 1] == pytest.approx([R, -R, 0, 0], rel=1e-5)
    assert (adv[:, 2] == 0).all()  # counterfactuals carry no advantage
    d = res.diagnostics
    assert d["r_joint_mean"] == 0.75 and d["r_solo_mean"] == 0.25
    assert (d["helpful_frac"], d["redundant_frac"], d["harmful_frac"]) == (0.5, 0.5, 0.0)
    # the new state: first update = batch mean / population variance of Delta [1, 0, 0, 1]
    st = state_from_diagnostics(d)
    assert (st.delta.mean, st.delta.var, st.delta.count, st.delta.updates) == (0.5, 0.25, 4, 1)
    # a second batch with the state passed back equals the pure function with that state
    res2 = credit.compute("ccpo", recs, state=st.state_dict(), min_samples=4)
    pure, new = collab.ccpo(RJ, RS, [0, 0, 1, 1], st, min_samples=4)
    adv2 = res2.step_advantages.reshape(4, 3)
    assert np.allclose(adv2[:, 0], pure.advantages["thinker"]) and np.allclose(adv2[:, 1], pure.advantages["solver"])
    assert state_from_diagnostics(res2.diagnostics) == new
    assert res2.diagnostics["ccpo_normalised"] == 1.0  # 4 values seen, min_samples 4: z-scores now


def test_record_order_does_not_matter():
    recs = think_solve_records(RJ, RS, G)
    base = credit.compute("ccpo", recs).step_advantages
    idx = list(range(len(recs)))
    random.Random(0).shuffle(idx)
    shuffled = credit.compute("ccpo", [recs[i] for i in idx]).step_advantages
    assert np.array_equal(shuffled, base[idx])


def test_shared_any_number_of_roles_and_bonus():
    recs = []
    for j, (rj, g) in enumerate(zip(RJ, G, strict=True)):
        cid = f"{g}/{j}"
        recs += [_rec(cid, g, "a", 0, "joint", 0, 3), _rec(cid, g, "b", 1, "joint", 0, 3),
                 _rec(cid, g, "c", 2, "joint", rj, 3)]
    adv = credit.compute("shared", recs).step_advantages.reshape(4, 3)
    # R_joint g0 [1, 0] -> [+R, -R]; g1 [1, 1] -> 0; every role the same
    for k in range(3):
        assert adv[:, k] == pytest.approx([R, -R, 0, 0], rel=1e-5, abs=1e-12)
    # ccpo_bonus: g0's solo mean 0 < 0.5 and joint 1 > 0.5 -> +1 on collab 0; scale none (r - mean)
    res = credit.compute("ccpo_bonus", think_solve_records(RJ, RS, G), threshold=0.5)
    b = res.step_advantages.reshape(4, 3)
    # r1 = R_joint + 0.2 bonus: g0 [1.2, 0] -> [0.6, -0.6]; g1 solo mean 0.5 -> no bonus, [1, 1] -> 0
    assert b[:, 0] == pytest.approx([0.6, -0.6, 0, 0]) and b[:, 1] == pytest.approx([0.5, -0.5, 0, 0])
    assert res.diagnostics["bonus_pos_frac"] == 0.25


def test_sepo_reads_ratings_from_the_solver_record():
    # one group of two, verifier +1 / -1; ratings (Thinker share, Solver share, valid)
    ratings = [{"thinker": [0.8, 0.2, True], "solver": [0.6, 0.4, True]},
               {"thinker": [0.5, 0.5, False], "solver": [0.3, 0.7, True]}]
    res = credit.compute("sepo", think_solve_records([1, -1], [None, None], ["g", "g"], ratings))
    # s1 = 0.3 * own + 0.7 * peer: [0.3*.8 + .7*.6, .3*.5 + .7*.3] = [0.66, 0.36]
    # s2 = [0.3*.4 + .7*.2, .3*.7 + .7*.5] = [0.26, 0.56]; w1 = [0.66/0.92, 0.36/0.92]
    w1 = np.array([0.66, 0.36]) / 0.92
    bonus = w1 - w1.mean()
    r1 = np.array([1 + 0.2 * bonus[0], -1 - 0.2 * bonus[1]])
    pure = collab.sepo([1, -1], [0, 0], [collab.Rating(.8, .2, True, "json"), collab.Rating(.5, .5, False, "fallback")],
                  [(0.6, 0.4), (0.3, 0.7)])
    assert pure.rewards["thinker"] == pytest.approx(r1, rel=1e-5)
    adv = res.step_advantages.reshape(2, 2)
    assert np.allclose(adv[:, 0], pure.advantages["thinker"]) and np.allclose(adv[:, 1], pure.advantages["solver"])
    assert res.diagnostics["sepo_invalid_frac"] == 0.25  # one of four ratings fell back


@pytest.mark.parametrize("name, recs, needle", [
    ("ccpo", [dict(group_id="g", traj_id="t", t=0, obs="", action="", reward=1.0, done=True)],
     "needs collaboration records"),
    ("ccpo", think_solve_records([1, 0], [None, None], ["g", "g"]), r"needs a solo \(counterfactual\) record"),
    ("sepo", think_solve_records([1, -1], [None, None], ["g", "g"]), "needs both roles' ratings"),
    ("ccpo", [_rec("c", "g", "a", 0, "joint", 0, 3), _rec("c", "g", "b", 1, "joint", 0, 3),
              _rec("c", "g", "c", 2, "joint", 1, 3), _rec("c", "g", "c", 2, "solo", 1, 3)], "credits two roles"),
])
def test_errors_name_what_is_missing(name, recs, needle):
    with pytest.raises(ValueError, match=needle) as e:
        credit.compute(name, recs)
    assert "\n" not in str(e.value)


def test_state_kwarg_is_checked():
    with pytest.raises(ValueError, match="kwarg state: CCPO state_dict needs keys"):
        credit.validate("ccpo", state={"delta": {}})


def test_available_separates_step_and_collaboration_estimators():
    assert credit.available("collab") == ["shared", "ccpo", "ccpo_bonus", "sepo"]
    assert not set(credit.available()) & set(credit.available("collab"))
    from agentrl.credit.registry import REGISTRY

    assert credit.available("all") == list(REGISTRY)
    with pytest.raises(ValueError, match="records='x' must be one of step, collab, all"):
        credit.available("x")
