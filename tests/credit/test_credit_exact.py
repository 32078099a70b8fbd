"""Exact values on hand-built batches, worked out by hand in the comments.

Conventions (README.md): std is the sample std (ddof=1), delta = 1e-6, R(tau) is the undiscounted
episode return, R_t the gamma-discounted return-to-go.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from credit_helpers import find, traj

from agentrl.credit import compute

D = 1e-6
approx = lambda x: pytest.approx(x, rel=1e-5, abs=1e-9)  # noqa: E731


# ----------------------------------------------------------------------------- GRPO / RLOO
def one_step_group(group, returns, prefix="r"):
    recs = []
    for i, R in enumerate(returns):
        recs += traj(group, f"{group}{prefix}{i}", ["q"], ["a"], [R])
    return recs


def test_grpo_group_scale():
    # returns [1, 0, 0, 1]: mean 0.5, sample std sqrt(4 * 0.25 / 3) = sqrt(1/3) = 0.577350
    recs = one_step_group("g", [1, 0, 0, 1])
    # two extra steps on the first trajectory get the same (broadcast) advantage
    recs += [dict(recs[0], t=1, reward=0.0), dict(recs[0], t=2, reward=0.0)]
    res = compute("grpo", recs)
    a = 0.5 / (math.sqrt(1 / 3) + D)  # 0.866025
    assert res.step_advantages.tolist() == [
        approx(a),
        approx(-a),
        approx(-a),
        approx(a),
        approx(a),
        approx(a),
    ]
    assert res.diagnostics["step_signal_frac"] == 0.0


def test_grpo_batch_and_none_scale():
    # g1 returns [1, 0], g2 returns [2, 0]; centered: +-0.5, +-1
    # batch std over [1, 0, 2, 0]: mean 0.75, sum sq dev = 0.0625+0.5625+1.5625+0.5625 = 2.75, /3 -> 0.957427
    recs = one_step_group("g1", [1, 0]) + one_step_group("g2", [2, 0])
    sd = math.sqrt(2.75 / 3)
    res = compute("grpo", recs, scale="batch")
    assert res.step_advantages.tolist() == [approx(x / (sd + D)) for x in (0.5, -0.5, 1.0, -1.0)]
    res = compute("grpo", recs, scale="none")
    assert res.step_advantages.tolist() == [0.5, -0.5, 1.0, -1.0]


def test_rloo():
    # [1, 0, 0, 1]: A_1 = 1 - (0+0+1)/3 = 2/3, A_2 = 0 - (1+0+1)/3 = -2/3
    res = compute("rloo", one_step_group("g", [1, 0, 0, 1]))
    assert res.step_advantages.tolist() == [approx(2 / 3), approx(-2 / 3), approx(-2 / 3), approx(2 / 3)]
    # a group of one rollout has no peers: 0
    assert compute("rloo", one_step_group("h", [5])).step_advantages.tolist() == [0.0]


# ----------------------------------------------------------------------------- GiGPO
def gigpo_batch():
    # tau1: obs [A, B], rewards [0, 1] (success); tau2: obs [A, C], rewards [0, 0]
    return traj("g", "t1", ["A", "B"], ["x", "y"], [0, 1]) + traj("g", "t2", ["A", "C"], ["z", "w"], [0, 0])


def test_gigpo_mean_std():
    recs = gigpo_batch()
    res = compute("gigpo", recs, gamma=0.5)
    # R_t with gamma 0.5: t1 [0 + 0.5*1, 1] = [0.5, 1]; t2 [0, 0]
    # A_ep: returns [1, 0], mean .5, std sqrt(.5) = .707107 -> +-0.5/.707107 = +-0.707107
    ep = 0.5 / (math.sqrt(0.5) + D)
    # step groups: A = {0.5, 0}: mean .25, std sqrt(2*.0625) = .353553 -> +-0.707107; B, C singletons -> 0
    st = 0.25 / (math.sqrt(0.125) + D)
    exp = {("t1", 0): ep + st, ("t1", 1): ep, ("t2", 0): -ep - st, ("t2", 1): -ep}
    for (tid, t), v in exp.items():
        assert res.step_advantages[find(recs, tid, t)] == approx(v)
    assert res.step_term[find(recs, "t1", 1)] == 0.0  # singleton: exactly zero (Eq. C.3)
    d = res.diagnostics
    # clusters {A: 2, B: 1, C: 1}
    assert d["singleton_frac"] == approx(2 / 3)
    assert d["singleton_record_frac"] == approx(2 / 4)
    assert d["mean_cluster_size"] == approx(4 / 3)
    assert d["matched_pairs"] == 1.0
    assert d["step_signal_frac"] == 0.5


def test_gigpo_mean_norm_and_w():
    recs = gigpo_batch()
    # norm='mean': A_ep = +-0.5; step A group: 0.5 - 0.25 = 0.25, 0 - 0.25 = -0.25
    res = compute("gigpo", recs, gamma=0.5, norm="mean")
    exp = {("t1", 0): 0.75, ("t1", 1): 0.5, ("t2", 0): -0.75, ("t2", 1): -0.5}
    for (tid, t), v in exp.items():
        assert res.step_advantages[find(recs, tid, t)] == approx(v)
    res = compute("gigpo", recs, gamma=0.5, norm="mean", w=2.0)  # 0.5 + 2 * 0.25 = 1.0
    assert res.step_advantages[find(recs, "t1", 0)] == approx(1.0)
    res = compute("gigpo", recs, gamma=0.5, norm="mean", w=0.0)  # episode term only
    assert res.step_advantages[find(recs, "t1", 0)] == approx(0.5)


# ----------------------------------------------------------------------------- HGPO
def hgpo_batch():
    # gamma 1: returns-to-go t1 [1, 1], t2 [0, 0], t3 [1, 1]
    return (
        traj("g", "t1", ["A", "S"], ["x", "u"], [0, 1])
        + traj("g", "t2", ["A", "S"], ["x", "u"], [0, 0])
        + traj("g", "t3", ["B", "S"], ["y", "u"], [0, 1])
    )


def test_hgpo_pairs_hierarchy():
    recs = hgpo_batch()
    res = compute("hgpo_pairs", recs, gamma=1.0, norm="mean", K=1, alpha=1.0)
    # weights w_0 = 1, w_1 = 2. Episode term (mean): returns [1, 0, 1], mean 2/3 -> [1/3, -2/3, 1/3]
    # t=0: level 0 groups A {t1: 1, t2: 0} (A0 = +-0.5), B {t3} singleton; level 1 adds the empty
    #      history, same groups -> A1 = +-0.5: t1 (1*.5 + 2*.5)/3 = 0.5, t2 -0.5, t3 0 (no valid level)
    # t=1: level 0 S {1, 0, 1}: mean 2/3 -> t1 1/3, t2 -2/3, t3 1/3
    #      level 1 S+(A,x) {t1, t2}: +-0.5; S+(B,y) {t3} singleton (excluded)
    #      t1: (1/3 + 2*0.5)/3 = 4/9, t2: (-2/3 - 2*0.5)/3 = -5/9, t3: only level 0 -> 1/3
    exp_step = {
        ("t1", 0): 0.5,
        ("t2", 0): -0.5,
        ("t3", 0): 0.0,
        ("t1", 1): 4 / 9,
        ("t2", 1): -5 / 9,
        ("t3", 1): 1 / 3,
    }
    ep = {"t1": 1 / 3, "t2": -2 / 3, "t3": 1 / 3}
    for (tid, t), v in exp_step.items():
        i = find(recs, tid, t)
        assert res.step_term[i] == approx(v)
        assert res.step_advantages[i] == approx(ep[tid] + v)
    assert res.diagnostics["hgpo_k1_singleton_frac"] == approx(2 / 4)  # level-1 groups: {t1,t2}x2, {t3}x2


def test_hgpo_pairs_alpha_zero_is_plain_average():
    recs = hgpo_batch()
    res = compute("hgpo_pairs", recs, gamma=1.0, norm="mean", K=1, alpha=0.0)
    # equal weights: t1 step 1 = (1/3 + 1/2) / 2 = 5/12
    assert res.step_term[find(recs, "t1", 1)] == approx(5 / 12)


# ----------------------------------------------------------------------------- PACE
def pace_batch():
    # one-step rollouts in one group. obs S: actions a, a, b, c with returns 1, 0, 1, 0;
    # obs T: actions d, d with returns 1, 0; obs U: one rollout (singleton cluster)
    spec = [
        ("S", "a", 1),
        ("S", "a", 0),
        ("S", "b", 1),
        ("S", "c", 0),
        ("T", "d", 1),
        ("T", "d", 0),
        ("U", "e", 1),
    ]
    recs = []
    for i, (o, a, r) in enumerate(spec):
        recs += traj("g", f"r{i}", [o], [f"<action>{a}</action>" if i % 2 else a], [r])
    return recs


def test_pace_diff_values_and_fallbacks():
    recs = pace_batch()
    res = compute("pace_diff", recs, action_key="action_tag", norm="mean")
    # S, (a,1): C!= = {b:1, c:0}, mean .5 -> 1 - .5 = .5;   (a,0): 0 - .5 = -.5
    # S, b: C!= = {1, 0, 0} mean 1/3 -> 2/3;                 c: C!= = {1, 0, 1} mean 2/3 -> -2/3
    # T: both take d, no different-action peer -> RLOO: 1 - 0 = 1, 0 - 1 = -1;  U: singleton -> 0
    assert res.step_term.tolist() == [approx(v) for v in (0.5, -0.5, 2 / 3, -2 / 3, 1.0, -1.0, 0.0)]
    d = res.diagnostics
    assert d["pace_branch_frac"] == approx(4 / 7)
    assert d["pace_rloo_frac"] == approx(2 / 7)
    assert d["pace_singleton_frac"] == approx(1 / 7)
    assert d["mean_action_keys"] == approx(2.0)  # multi-member clusters: S has 3 keys, T has 1
    assert d["multi_action_cluster_frac"] == approx(0.5)
    assert d["action_tag_parse_rate"] == 1.0


def test_pace_q_values_and_fallbacks():
    recs = pace_batch()
    res = compute("pace_q", recs, norm="mean")
    # S: V = mean(1, 0, 1, 0) = .5; a: |C=| = 2, Q = .5 -> 0
    #    b: |C=| = 1 -> RLOO 1 - (1+0+0)/3 = 2/3;  c: RLOO 0 - (1+0+1)/3 = -2/3
    # T: Q(d) = V = .5 -> 0, 0;  U: singleton -> 0
    assert res.step_term.tolist() == [approx(v) for v in (0.0, 0.0, 2 / 3, -2 / 3, 0.0, 0.0, 0.0)]
    d = res.diagnostics
    assert d["pace_branch_frac"] == approx(4 / 7) and d["pace_rloo_frac"] == approx(2 / 7)
    # mean_std divides by the cluster's std: S std = sqrt(1/3) -> b: (2/3) / 0.577350
    res = compute("pace_q", recs, norm="mean_std")
    assert res.step_term[2] == approx((2 / 3) / (math.sqrt(1 / 3) + D))
    # episode term (mean_std): returns [1,0,1,0,1,0,1]: mean 4/7, std sqrt((3*(9/49)+4*(16/49))... ) computed:
    R = np.array([1, 0, 1, 0, 1, 0, 1.0])
    ep = (R - 4 / 7) / (math.sqrt(((R - 4 / 7) ** 2).sum() / 6) + D)
    assert res.step_advantages.tolist() == [approx(e + s) for e, s in zip(ep, res.step_term, strict=True)]


def test_pace_first_n_key():
    # tokens agree on the first 8 ids, differ at the 9th: same key with N=8, different with N=9
    toks = [list(range(1, 9)) + [100], list(range(1, 9)) + [200]]
    recs = traj("g", "r0", ["S"], ["p"], [1], action_token_ids=[toks[0]]) + traj(
        "g", "r1", ["S"], ["q"], [0], action_token_ids=[toks[1]]
    )
    # same key: |C=| = 2 -> Q = V -> 0
    assert compute("pace_q", recs, action_key="first_n", norm="mean").step_term.tolist() == [0.0, 0.0]
    # N=9: different keys, |C=| = 1 each -> RLOO: 1 - 0, 0 - 1
    assert compute("pace_q", recs, action_key="first_n", first_n=9, norm="mean").step_term.tolist() == [
        1.0,
        -1.0,
    ]


# ----------------------------------------------------------------------------- BiGPO
def _unit(deg):
    return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]


def bigpo_batch(angles=(0, 8, 13), returns=(1, 0, 0.5)):
    recs = []
    for i, (a, r) in enumerate(zip(angles, returns, strict=True)):
        recs += traj("g", f"r{i}", [f"obs{i}"], ["x"], [r], fingerprint=[_unit(a)])
    return recs


def test_bigpo_centroid_update():
    # eps 0.015. r1 at 8 deg: 1 - cos 8 = 0.00973 <= eps, joins r0; centroid -> normalize((x0+x1)/2) = 4 deg.
    # r2 at 13 deg: 9 deg from the moved centroid, 1 - cos 9 = 0.01231 <= eps -> joins (it is 13 deg =
    # 0.02563 from r0, so a non-moving centroid would have split it off).
    recs = bigpo_batch()
    res = compute("bigpo", recs, eps=0.015, norm="mean")
    assert res.diagnostics["n_clusters"] == 1.0
    # one cluster, R = [1, 0, 0.5], mean 0.5 -> step [0.5, -0.5, 0]
    assert res.step_term.tolist() == [approx(0.5), approx(-0.5), approx(0.0)]
    # eps 0.009: r1 is 0.00973 away -> own cluster; r2 is 1 - cos 5 = 0.0038 from r1 -> joins r1
    res = compute("bigpo", recs, eps=0.009, norm="mean")
    assert res.diagnostics["n_clusters"] == 2.0
    assert res.step_term.tolist() == [0.0, approx(-0.25), approx(0.25)]


def test_bigpo_rollout_major_order():
    # Records are processed by trajectory id, then t, whatever the input order: r0 (0 deg), then r1
    # (12 deg, 1 - cos 12 = 0.0219 from r0 -> new cluster with eps 0.02), then r2 (5 deg: 0.0038 from
    # r0, 7 deg = 0.0075 from r1 -> joins the nearest, r0's).
    recs = bigpo_batch(angles=(0, 12, 5), returns=(1, 0, 0))
    res = compute("bigpo", list(reversed(recs)), eps=0.02, norm="mean")
    # clusters {r0, r2} (R 1, 0 -> +-0.5) and {r1}; output aligned with the reversed input
    assert res.step_term.tolist() == [approx(-0.5), 0.0, approx(0.5)]


# ----------------------------------------------------------------------------- RTMC
def rtmc_tree():
    # Our reading of rtmc.md Figure 1 (four rollouts): rollout 1 takes a1 at s0 and fails at depth 1;
    # rollouts 2-4 take a2 to s1, where 2 takes a3 and succeeds; 3 and 4 take a4 to s2, where 3 takes
    # a5 (success) and 4 takes a6 (failure). Terminal rewards 1/0.
    return (
        traj("p", "r1", ["o"], ["a1"], [0], won=False)
        + traj("p", "r2", ["o", "o"], ["a2", "a3"], [0, 1], won=True)
        + traj("p", "r3", ["o", "o", "o"], ["a2", "a4", "a5"], [0, 0, 1], won=True)
        + traj("p", "r4", ["o", "o", "o"], ["a2", "a4", "a6"], [0, 0, 0], won=False)
    )


def test_rtmc_figure1_no_prior():
    recs = rtmc_tree()
    res = compute("rtmc", recs, gamma=0.9, n_prior=0)
    # G_t (gamma .9): r1 [0]; r2 [.9, 1]; r3 [.81, .9, 1]; r4 [0, 0, 0]
    # s0: Q(a1) = 0, Q(a2) = (.9 + .81 + 0)/3 = .57; V = (0 + .9 + .81 + 0)/4 = .4275
    # s1: Q(a3) = 1, Q(a4) = (.9 + 0)/2 = .45; V = (1 + .9 + 0)/3 = .633333
    # s2: Q(a5) = 1, Q(a6) = 0; V = .5
    exp = {
        ("r1", 0): -0.4275,
        ("r2", 0): 0.1425, ("r2", 1): 1 - 1.9 / 3,
        ("r3", 0): 0.1425, ("r3", 1): 0.45 - 1.9 / 3, ("r3", 2): 0.5,
        ("r4", 0): 0.1425, ("r4", 1): 0.45 - 1.9 / 3, ("r4", 2): -0.5,
    }  # fmt: skip
    for (tid, t), v in exp.items():
        assert res.step_advantages[find(recs, tid, t)] == approx(v)
    d = res.diagnostics
    # three tree states visited 4, 3, 2 times
    assert d["rtmc_n_states"] == 3.0 and d["rtmc_single_visit_frac"] == 0.0
    assert (
        d["rtmc_visits_2"] == approx(1 / 3)
        and d["rtmc_visits_3"] == approx(1 / 3)
        and d["rtmc_visits_4"] == approx(1 / 3)
    )


def test_rtmc_figure1_prior_and_std_norm():
    recs = rtmc_tree()
    res = compute("rtmc", recs, gamma=0.9)  # n_prior = 2, V_prior = success rate 2/4 = .5
    # V'(s0) = (4*.4275 + 2*.5)/6 = 2.71/6;  V'(s1) = (3*.633333 + 1)/5 = .58;  V'(s2) = (2*.5 + 1)/4 = .5
    v0 = 2.71 / 6
    exp = {
        ("r1", 0): 0 - v0,
        ("r2", 0): 0.57 - v0, ("r2", 1): 1 - 0.58,
        ("r3", 0): 0.57 - v0, ("r3", 1): 0.45 - 0.58, ("r3", 2): 0.5,
        ("r4", 0): 0.57 - v0, ("r4", 1): 0.45 - 0.58, ("r4", 2): -0.5,
    }  # fmt: skip
    for (tid, t), v in exp.items():
        assert res.step_advantages[find(recs, tid, t)] == approx(v)
    # optional per-group std normalization (Alg. 1 line 21): divide by the sample std of these 9 values
    vals = np.array([exp[(r["traj_id"], r["t"])] for r in recs])
    sd = vals.std(ddof=1)
    res = compute("rtmc", recs, gamma=0.9, std_norm=True)
    assert res.step_advantages.tolist() == [approx(v / (sd + D)) for v in vals]


def test_rtmc_builds_one_tree_per_prompt_group():
    # Two prompt groups, one-step rollouts, history signatures: every rollout starts at the empty
    # history, so the root looks the same in both groups; only the group keeps their trees apart.
    # p: a -> 1, b -> 0;  q: a -> 1, b -> 1 (all returns equal).
    recs = (
        traj("p", "p1", ["o"], ["a"], [1]) + traj("p", "p2", ["o"], ["b"], [0])
        + traj("q", "q1", ["o"], ["a"], [1]) + traj("q", "q2", ["o"], ["b"], [1])
    )  # fmt: skip
    # n_prior 0, gamma 1: p's root Q(a) = 1, Q(b) = 0, V = .5 -> +.5, -.5; q's root Q(a) = Q(b) =
    # V = 1 -> 0, 0. (One tree over the batch would give Q(a) = 1, Q(b) = .5, V = .75: +-.25 in
    # both groups, q's equal returns included.)
    res = compute("rtmc", recs, gamma=1.0, n_prior=0)
    assert res.step_advantages.tolist() == [0.5, -0.5, 0.0, 0.0]
    assert res.diagnostics["rtmc_n_states"] == 2.0 and res.diagnostics["rtmc_visits_2"] == 1.0
    # with the prior (n_prior 2; V_prior = success rate p .5, q 1): V'(p) = (2*.5 + 2*.5)/4 = .5,
    # V'(q) = (2*1 + 2*1)/4 = 1: the same advantages
    res = compute("rtmc", recs, gamma=1.0)
    assert res.step_advantages.tolist() == [approx(0.5), approx(-0.5), 0.0, 0.0]


def test_rtmc_env_signatures_first_visit():
    # env signatures: r1 loops (s0, a) -> (s0, a) with rewards [0, 1]; r2 takes (s0, b), reward 0.
    # gamma 1: G r1 = [1, 1], r2 = [0]. First visit only: N(s0,a) = 1 (G=1), N(s0,b) = 1 (G=0),
    # V(s0) = 1/2 -> r1 steps 1 - .5 = .5 (both read Q(s0,a)), r2 -.5.
    recs = traj("p", "r1", ["x", "y"], ["a", "a"], [0, 1], state_sig="s0", action_sig="a") + traj(
        "p", "r2", ["x"], ["b"], [0], state_sig="s0", action_sig="b"
    )
    res = compute("rtmc", recs, gamma=1.0, n_prior=0, signature="env")
    assert res.step_advantages.tolist() == [0.5, 0.5, -0.5]


# ----------------------------------------------------------------------------- SALT
def test_salt_merge_and_diverge_h1():
    # h=1: state = last (action, observation) pair; root q
    recs = (
        traj("g", "t1", ["q", "B"], ["x", "y"], [0, 1])  # success
        + traj("g", "t2", ["q", "B"], ["x", "z"], [0, 0])  # same first edge (q, x, (x,B)) -> merge
        + traj("g", "t3", ["q", "C"], ["w", "y"], [0, 0])  # different action -> diverge
        + traj("g", "t4", ["q", "D"], ["x", "y"], [0, 0])  # same state+action, different result -> diverge
    )
    res = compute("salt", recs, h=1)
    # base GRPO: returns [1,0,0,0], mean .25, std sqrt((.5625 + 3*.0625)/3) = .5 -> [1.5, -.5, -.5, -.5]
    a1, a0 = 0.75 / (0.5 + D), -0.25 / (0.5 + D)
    m = (a1 + a0) / 2  # merged set {t1 step 0, t2 step 0} -> mean 0.5
    exp = {
        ("t1", 0): m,
        ("t2", 0): m,
        ("t3", 0): a0,
        ("t4", 0): a0,
        ("t1", 1): a1,
        ("t2", 1): a0,
        ("t3", 1): a0,
        ("t4", 1): a0,
    }
    for (tid, t), v in exp.items():
        assert res.step_advantages[find(recs, tid, t)] == approx(v)
    assert res.diagnostics["salt_merge_rate"] == approx(2 / 8)
    assert res.diagnostics["salt_merged_sets"] == 1.0


def test_salt_history_length_and_rloo_base():
    # t=2 edges agree on the last pair (y, E) and action u, differ two pairs back
    recs = traj("g", "A", ["q", "B", "E"], ["x", "y", "u"], [0, 1, 0]) + traj(
        "g", "B", ["q", "C", "E"], ["w", "y", "u"], [0, 0, 0]
    )
    # base RLOO: returns 1 and 0 -> +1, -1
    res = compute("salt", recs, h=1, base="rloo")
    # h=1: the t=2 edges merge -> (1 - 1)/2 = 0; earlier edges diverge
    assert [res.step_advantages[find(recs, k, 2)] for k in "AB"] == [0.0, 0.0]
    assert [res.step_advantages[find(recs, k, 1)] for k in "AB"] == [1.0, -1.0]
    res = compute("salt", recs, h=2, base="rloo")  # (x,B),(y,E) vs (w,C),(y,E): diverge
    assert [res.step_advantages[find(recs, k, 2)] for k in "AB"] == [1.0, -1.0]


def test_salt_embedding_match():
    # embed every edge by its action only: edges with equal actions have cosine 1 and merge
    def embed(texts):
        return np.array(
            [[1.0, 0.0] if t.split("||")[1].strip().startswith("go") else [0.0, 1.0] for t in texts]
        )

    recs = (
        traj("g", "t1", ["q"], ["go"], [1])
        + traj("g", "t2", ["r"], ["go"], [0])
        + traj("g", "t3", ["s"], ["stay"], [0])
    )
    res = compute("salt", recs, match="embedding", embed_fn=embed, base="rloo")
    # base RLOO: [1 - 0, 0 - .5, 0 - .5] = [1, -.5, -.5]; t1+t2 merge -> .25 each; t3 keeps -.5
    assert res.step_advantages.tolist() == [approx(0.25), approx(0.25), approx(-0.5)]
    assert compute("salt", recs, match="exact", base="rloo").step_advantages.tolist() == [1.0, -0.5, -0.5]


def test_salt_default_embedding_merges_paraphrased_states_only():
    # hash_ngram edge embedding (sum of unit piece vectors): t1/t2 start in near-identical
    # kitchens (cosine 0.994 at h=1) and merge; their second edges share the observation but
    # differ in action and outcome (cosine 0.921) and stay apart at the 0.95 threshold.
    A = "You are in the kitchen. On the counter you see a mug 1, a knife 2 and a fridge 1."
    A2 = A.replace("knife 2", "knife 3")
    X = "You open the fridge 1. In it you see an apple 1."
    recs = (
        traj("g", "t1", [A, X], ["open fridge 1", "take apple 1"], [0, 1])
        + traj("g", "t2", [A2, X], ["open fridge 1", "eat apple 1"], [0, 0])
        + traj("g", "t3", ["You are in the garden.", "You walk north."], ["go north", "wait"], [0, 0])
    )
    # base RLOO on returns [1, 0, 0]: [1, -.5, -.5]; the merged first edges get (1 - .5) / 2
    for h in (1, 3):
        res = compute("salt", recs, h=h, match="embedding", base="rloo")
        assert res.step_advantages.tolist() == [approx(0.25), 1.0, approx(0.25), -0.5, -0.5, -0.5]
        assert res.diagnostics["salt_merge_rate"] == approx(2 / 6)
    assert compute("salt", recs, match="exact", base="rloo").step_advantages.tolist() == [1, 1, -0.5, -0.5, -0.5, -0.5]


def test_bigpo_zero_fingerprint_seed_and_eps_above_one():
    # Algorithm 1 by hand, eps=1.5, fingerprints (0,0), (1,0), (-.6,.8):
    # x1 joins the zero-seeded cluster (distance 1 <= 1.5): centroid -> normalize(0 + (x1 - 0)/2) = (1,0);
    # x2 has distance 1 - (-.6) = 1.6 > 1.5 from it: new cluster. Partition {0,1},{2}.
    recs = traj("g", "a", ["s0"], ["x"], [1]) + traj("g", "b", ["s1"], ["y"], [0]) + traj("g", "c", ["s2"], ["z"], [0])
    for r, fp in zip(recs, [[0.0, 0.0], [1.0, 0.0], [-0.6, 0.8]], strict=True):
        r["fingerprint"] = fp
    res = compute("bigpo", recs, eps=1.5, norm="mean", gamma=1.0)
    # A_step = R - mean over the cluster {a, b} = (1 - .5, 0 - .5); c is a singleton
    assert res.step_term.tolist() == [0.5, -0.5, 0.0]
    assert res.diagnostics["n_clusters"] == 2


def test_bad_numbers_are_refused():
    recs = traj("g", "a", ["s0", "s1"], ["x", "y"], [0, 1])
    with pytest.raises(ValueError, match="fingerprints hold NaN"):
        compute("bigpo", [dict(r, fingerprint=[float("nan"), 1.0]) for r in recs])
    with pytest.raises(ValueError, match="embed_fn returned NaN"):
        compute("salt", recs, match="embedding", embed_fn=lambda t: np.full((len(t), 2), np.nan))
    with pytest.raises(ValueError, match="'t' must be a non-negative integer"):
        compute("grpo", [dict(recs[0], t=0.5), recs[1]])
    with pytest.raises(ValueError, match="'t' must be a non-negative integer"):
        compute("grpo", [dict(recs[0], t=None), recs[1]])
    with pytest.raises(ValueError, match="'reward' must be a number"):
        compute("grpo", [dict(recs[0], reward="1"), recs[1]])
    with pytest.raises(ValueError, match="'history' must be a list of"):
        compute("salt", [dict(recs[1], history=["just text"])])
    with pytest.raises(ValueError, match="'group_id' and 'traj_id' must be"):
        compute("grpo", [dict(r, group_id=["unhashable"]) for r in recs])
    # None and "" are the same empty observation
    mixed = [dict(recs[0], obs=None), dict(recs[1], obs="")]
    assert compute("gigpo", mixed).step_advantages.tolist() == compute(
        "gigpo", [dict(recs[0], obs=""), dict(recs[1], obs="")]
    ).step_advantages.tolist()


def test_hgpo_pairs_extreme_alpha_is_finite():
    recs = traj("g", "a", ["s", "u"], ["x", "y"], [0, 1]) + traj("g", "b", ["s", "u"], ["x", "z"], [0, 0])
    # both trajectories share every history prefix (s at t=0; (s, x) then u at t=1), so every
    # level groups the same records and any weighting gives GiGPO's step term
    gigpo_step = compute("gigpo", recs).step_term
    for alpha in (-1000.0, 1000.0):
        res = compute("hgpo_pairs", recs, alpha=alpha)
        assert np.isfinite(res.step_advantages).all()
        assert res.step_term == approx(gigpo_step)
