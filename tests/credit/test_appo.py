"""Exact values of APPO's formulas, worked out by hand in the comments: branch-point selection
(Eqs. 3-5, agentrl/algorithms/appo_branch_points.py) and advantages and loss weight (Eqs. 6-7,
agentrl/credit/appo.py).

Conventions: population std + 1e-6 in every z-score and group normalisation; token arrays are
(N, T) with a mask of the model's own tokens.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl.algorithms import appo_branch_points as branching
from agentrl.credit import appo

D = 1e-6
approx = lambda x: pytest.approx(x, rel=1e-5, abs=1e-9)  # noqa: E731


# ----------------------------------------------------------------------------- entropy (Eq. 3)
def test_entropy_from_logits():
    # [0, 0]: uniform over 2 -> ln 2 = 0.693147
    # [0, ln 3]: p = (1/4, 3/4): 0.25 ln 4 + 0.75 ln(4/3) = 0.346574 + 0.215762 = 0.562335
    # tau = 2 halves the logits: [0, 2 ln 3] / 2 = [0, ln 3] -> 0.562335 again
    h = branching.entropy_from_logits([[0.0, 0.0], [0.0, math.log(3)]])
    assert h.tolist() == [approx(0.693147), approx(0.562335)]
    assert branching.entropy_from_logits([0.0, 2 * math.log(3)], temperature=2.0) == approx(0.562335)
    with pytest.raises(ValueError, match="temperature"):
        branching.entropy_from_logits([0.0], temperature=0.0)


def test_entropy_from_topk():
    # p = (1/2, 1/4) not renormalised: 0.5 ln 2 + 0.25 ln 4 = 0.346574 + 0.346574 = 0.693147
    # renormalised to (2/3, 1/3): 2/3 ln 1.5 + 1/3 ln 3 = 0.270310 + 0.366204 = 0.636514
    lp = [math.log(0.5), math.log(0.25)]
    assert branching.entropy_from_topk(lp) == approx(0.693147)
    assert branching.entropy_from_topk(lp, renormalize=True) == approx(0.636514)
    # a -inf log-prob (p = 0) adds nothing: (1, 0) -> 0
    assert branching.entropy_from_topk([0.0, -math.inf]) == 0.0


def test_eligible_tokens_skip_whitespace_and_env_tokens():
    m = branching.eligible_tokens([[1, 1, 1, 0]], [["a", " ", "\n", "b"]])
    assert m.tolist() == [[True, False, False, False]]


# ----------------------------------------------------------------------------- Omega (Eq. 4)
def test_discounted_suffix_sum():
    # gamma 0.5 on [1, 2, 3]: t2 = 3, t1 = 2 + 0.5*3 = 3.5, t0 = 1 + 0.5*3.5 = 2.75
    assert appo.discounted_suffix_sum([1.0, 2.0, 3.0], 0.5).tolist() == [[2.75, 3.5, 3.0]]
    # gamma 1: plain suffix sums 6, 5, 3
    assert appo.discounted_suffix_sum([1.0, 2.0, 3.0], 1.0).tolist() == [[6.0, 5.0, 3.0]]


def test_future_value_masks_tool_tokens():
    # token 2 is a tool result: its log-ratio 0.3 is dropped, but it still counts as a position.
    # kept [0.1, 0.2, 0, 0.4], gamma 0.5: t3 = 0.4; t2 = 0 + 0.2 = 0.2; t1 = 0.2 + 0.1 = 0.3;
    # t0 = 0.1 + 0.5*0.3 = 0.25. Omega = exp(.); the masked position is exactly 1.
    om = branching.future_value([0.1, 0.2, 0.3, 0.4], [1, 1, 0, 1], gamma=0.5)
    assert om.tolist() == [[approx(math.exp(0.25)), approx(math.exp(0.3)), 1.0, approx(math.exp(0.4))]]


def test_future_value_clamps():
    # one log-ratio 30 -> clamped to 20; two of 15 (gamma 1): t0 sum 30 -> exponent clamped to 20
    assert branching.future_value([30.0], [1]).tolist() == [[approx(math.exp(20))]]
    assert branching.future_value([15.0, 15.0], [1, 1]).tolist() == [[approx(math.exp(20)), approx(math.exp(15))]]


# ----------------------------------------------------------------------------- score (Eq. 5)
def test_zscore_rows_population_std():
    # [1, 2, 3] (the 100 is masked): mean 2, population var 2/3, std 0.816497
    z = branching.zscore_rows([[1.0, 2.0, 3.0, 100.0]], [[1, 1, 1, 0]])
    s = math.sqrt(2 / 3) + D
    assert z.tolist() == [[approx(-1 / s), 0.0, approx(1 / s), 0.0]]


H = [1.0, 2.0, 3.0, 4.0]
OMEGA = [0.5, 1.0, 1.1, 1.5]
# z_H: mean 2.5, pop var (2.25 + .25 + .25 + 2.25)/4 = 1.25, std 1.118034
#   -> [-1.341641, -0.447214, 0.447214, 1.341641]
# clip(Omega, 0.8, 1.2) = [0.8, 1.0, 1.1, 1.2]: mean 1.025, deviations [-.225, -.025, .075, .175],
#   squares sum 0.0875, pop var 0.021875, std 0.147902 -> z_O = [-1.521278, -0.169031, 0.507093, 1.183216]
# BS = z_H * z_O = [2.040990, 0.075592, 0.226779, 1.587451]: the low-entropy, low-Omega token 0
# scores highest, which is what the strict rule is for.
Z_H = [-1.341641, -0.447214, 0.447214, 1.341641]
Z_O = [-1.521278, -0.169031, 0.507093, 1.183216]
BS = [2.040990, 0.075592, 0.226779, 1.587451]


def test_branch_score_product():
    bs, z_h, z_o = branching.branch_score(H, OMEGA, [1, 1, 1, 1])
    assert z_h.tolist() == [[approx(x) for x in Z_H]]
    assert z_o.tolist() == [[approx(x) for x in Z_O]]
    assert bs.tolist() == [[approx(x) for x in BS]]
    # pure-entropy ablation (Table 4): the score is z_H
    ent, _, _ = branching.branch_score(H, OMEGA, [1, 1, 1, 1], score="entropy")
    assert ent.tolist() == [[approx(x) for x in Z_H]]


def test_branch_score_flat_omega():
    # Omega == 1 everywhere (rollout-time ratio of one engine): z_O = 0 -> BS = 0 ("keep"),
    # or z_H ("entropy", default)
    flat = [1.0, 1.0, 1.0, 1.0]
    bs, _, z_o = branching.branch_score(H, flat, [1, 1, 1, 1])
    assert z_o.tolist() == [[0.0] * 4]
    assert bs.tolist() == [[approx(x) for x in Z_H]]
    kept, _, _ = branching.branch_score(H, flat, [1, 1, 1, 1], flat_omega="keep")
    assert kept.tolist() == [[0.0] * 4]
    # rounding noise (std 1.1e-9 <= 1e-6) is flat too; without the tolerance noise/(1e-9 + 1e-6) ~ 1e-3
    # would be a nonzero z-score and rank the tokens
    noisy = [1.0, 1.0 + 1e-9, 1.0 + 2e-9, 1.0 + 3e-9]
    bs, _, z_o = branching.branch_score(H, noisy, [1, 1, 1, 1])
    assert z_o.tolist() == [[0.0] * 4] and bs.tolist() == [[approx(x) for x in Z_H]]
    _, _, z_o = branching.branch_score(H, noisy, [1, 1, 1, 1], flat_tol=0.0)
    assert z_o[0, 3] > 0


def test_strict_rule_and_selection():
    bs, z_h, z_o = branching.branch_score(H, OMEGA, [1, 1, 1, 1])
    pref = branching.strict_candidates(z_h, z_o, [1, 1, 1, 1])
    assert pref.tolist() == [[False, False, True, True]]  # both z > 0 only at tokens 2 and 3
    # paper's top-1 by BS takes token 0; the strict rule takes 3 (1.587) then 2 (0.227), then fills
    # by BS rank: 0 (2.041), 1 (0.076)
    assert branching.select_branch_points(bs, [1, 1, 1, 1], 1)[1].tolist() == [0]
    rows, pos = branching.select_branch_points(bs, [1, 1, 1, 1], 4, scope="prompt", preferred=pref)
    assert pos.tolist() == [3, 2, 0, 1] and rows.tolist() == [0, 0, 0, 0]
    # entropy score: strict = z_H > 0
    strict_h = branching.strict_candidates(z_h, z_o, [1, 1, 1, 1], score="entropy")
    assert strict_h.tolist() == [[False, False, True, True]]


def test_choose_branch_points_paper_vs_code():
    # paper (per rollout, top-1 by BS): token 0 (2.041); code (per prompt, strict, B = 4): 3, 2, 0, 1
    assert branching.choose_branch_points(H, OMEGA, [1, 1, 1, 1], 1)[1].tolist() == [0]
    code = branching.choose_branch_points(H, OMEGA, [1, 1, 1, 1], 4, scope="prompt", strict=True)
    assert code[1].tolist() == [3, 2, 0, 1]
    # pure entropy: z_H ranks 3, 2, 1, 0
    assert branching.choose_branch_points(H, OMEGA, [1, 1, 1, 1], 4, score="entropy")[1].tolist() == [3, 2, 1, 0]


SCORE = [[0.5, 2.0, 1.0, -1.0], [3.0, 0.1, 9.0, 9.0]]
MASK = [[1, 1, 1, 1], [1, 1, 0, 0]]  # row 1 has two eligible tokens (the 9.0s are tool results)


def test_select_per_rollout():
    # row 0 ranked: pos 1 (2.0), 2 (1.0), 0 (0.5), 3 (-1.0); row 1: pos 0 (3.0), 1 (0.1)
    rows, pos = branching.select_branch_points(SCORE, MASK, 2)
    assert rows.tolist() == [0, 0, 1, 1] and pos.tolist() == [1, 2, 0, 1]
    # budget 3: row 1 has two candidates and cycles: 0, 1, 0
    rows, pos = branching.select_branch_points(SCORE, MASK, 3)
    assert rows.tolist() == [0, 0, 0, 1, 1, 1] and pos.tolist() == [1, 2, 0, 0, 1, 0]
    rows, pos = branching.select_branch_points(SCORE, MASK, 3, repeat=False)
    assert pos.tolist() == [1, 2, 0, 0, 1]
    # a rollout without eligible tokens gets none
    rows, pos = branching.select_branch_points(SCORE, [[0, 0, 0, 0], [1, 0, 0, 0]], 2)
    assert rows.tolist() == [1, 1] and pos.tolist() == [0, 0]


def test_select_per_prompt_pool():
    # pool ranked: (1,0) 3.0, (0,1) 2.0, (0,2) 1.0, (0,0) 0.5, (1,1) 0.1, (0,3) -1.0
    rows, pos = branching.select_branch_points(SCORE, MASK, 3, scope="prompt")
    assert list(zip(rows.tolist(), pos.tolist(), strict=True)) == [(1, 0), (0, 1), (0, 2)]
    # budget 8 > 6 candidates: cyclic repeat of the ranking
    rows, pos = branching.select_branch_points(SCORE, MASK, 8, scope="prompt")
    assert list(zip(rows.tolist(), pos.tolist(), strict=True)) == [
        (1, 0), (0, 1), (0, 2), (0, 0), (1, 1), (0, 3), (1, 0), (0, 1)]
    # preferred first ((0,0) and (1,1)), then fill by rank
    pref = [[1, 0, 0, 0], [0, 1, 0, 0]]
    rows, pos = branching.select_branch_points(SCORE, MASK, 3, scope="prompt", preferred=pref)
    assert list(zip(rows.tolist(), pos.tolist(), strict=True)) == [(0, 0), (1, 1), (1, 0)]
    # ties break by (rollout, position)
    rows, pos = branching.select_branch_points(np.zeros((2, 2)), np.ones((2, 2)), 3, scope="prompt")
    assert list(zip(rows.tolist(), pos.tolist(), strict=True)) == [(0, 0), (0, 1), (1, 0)]
    with pytest.raises(ValueError, match="scope must be one of"):
        branching.select_branch_points(SCORE, MASK, 1, scope="batch")


# ----------------------------------------------------------------------------- advantages (Eq. 6)
def test_group_relative():
    # [1, 0, 0, 1]: mean 0.5, pop std 0.5 -> +-0.5/(0.5 + 1e-6); a group of one and a zero-std group -> 0
    a = appo.group_relative([1, 0, 0, 1, 5, 0.3, 0.3], ["g"] * 4 + ["h", "k", "k"])
    x = 0.5 / (0.5 + D)
    assert a.tolist() == [approx(x), approx(-x), approx(-x), approx(x), 0.0, 0.0, 0.0]


# one prompt, initial rewards [1, 0] (a = 0.5/(0.5+1e-6) = 0.999998 -> A_init = [a, -a]), length 4;
# branches: b0 (parent 0, pos 1, R 0), b1 (parent 0, pos 3, R 1), b2 (parent 1, pos 2, R 1).
# Branch group [0, 1, 1]: mean 2/3, pop var (4/9 + 1/9 + 1/9)/3 = 2/9, std 0.471405;
# c = (1/3)/(0.471405 + 1e-6) = 0.707105 -> A_branch = [-2c, c, c].
# Row 0: t <= 1 sees b0, b1: mean -c/2; t = 2, 3 see b1: c.  Row 1: t <= 2 sees b2: c; t = 3: none.
A = 0.5 / (0.5 + D)
C = (1 / 3) / (math.sqrt(2 / 9) + D)
DUAL = dict(init_rewards=[1, 0], init_groups=["p", "p"], branch_rewards=[0, 1, 1], branch_groups=["p"] * 3,
            branch_parent=[0, 0, 1], branch_pos=[1, 3, 2], length=4)


def test_dual_group_sum_code():
    adv = appo.dual_group_advantages(**DUAL, combine="sum")
    assert adv.tolist() == [[approx(A - C / 2)] * 2 + [approx(A + C)] * 2,
                            [approx(-A + C)] * 3 + [approx(-A)]]


def test_dual_group_average_paper():
    adv = appo.dual_group_advantages(**DUAL)
    assert adv.tolist() == [[approx((A - C / 2) / 2)] * 2 + [approx((A + C) / 2)] * 2,
                            [approx((-A + C) / 2)] * 3 + [approx(-A)]]


def test_joint_group():
    # one group [1, 0 | 0, 1, 1]: mean 0.6, pop var (.16+.36+.36+.16+.16)/5 = 0.24, std 0.489898
    # R=1 -> 0.4/0.489899 = 0.816495; R=0 -> -0.6/0.489899 = -1.224743
    adv = appo.dual_group_advantages(**DUAL, grouping="joint")
    s = math.sqrt(0.24) + D
    hi, lo = 0.4 / s, -0.6 / s
    # row 1, t = 3: no branch -> A_init = lo; row 0, t = 3: average of hi and b1's hi
    assert adv[1, 3] == approx(lo) and adv[0, 3] == approx(hi)
    # row 0, t = 0: average of hi and mean(lo, hi)
    assert adv[0, 0] == approx((hi + (lo + hi) / 2) / 2)


def test_dual_group_rejects_bad_index():
    with pytest.raises(ValueError, match="index the initial"):
        appo.dual_group_advantages(**{**DUAL, "branch_pos": [1, 4, 2]})
    with pytest.raises(ValueError, match="combine must be one of"):
        appo.dual_group_advantages(**DUAL, combine="max")


# ----------------------------------------------------------------------------- future weight (Eq. 7)
def test_gamma_from_decay():
    # 2^(-1/64) = 0.989228; 64 steps ahead weighs exactly one half
    assert appo.gamma_from_decay(64) == approx(0.989228)
    assert appo.gamma_from_decay(64) ** 64 == approx(0.5)
    assert appo.gamma_from_decay(1) == 0.5


def test_future_kl_masks_and_big_ratios():
    # Delta = [0.2, 1.5, 0.1, 0.2]; 1.5 > ln 3 = 1.0986 is left out, t3 is a tool token.
    # kept [0.2, 0, 0.1, 0], gamma 0.5: t3 = 0; t2 = 0.1; t1 = 0.05; t0 = 0.2 + 0.025 = 0.225
    fkl = appo.future_kl([-1.0, -0.5, -2.0, 0.0], [-1.2, -2.0, -2.1, -0.2], [1, 1, 1, 0], gamma=0.5)
    assert fkl.tolist() == [[approx(0.225), approx(0.05), approx(0.1), 0.0]]


def test_future_weight_clips():
    # exp(0.225) = 1.2523 -> 1.2; exp(0.05) = 1.051271; exp(-0.1) = 0.904837 -> 1.0 (high only)
    # or kept (low 0.8); exp(-0.5) = 0.606531 -> 0.8
    fkl = [0.225, 0.05, -0.1, -0.5]
    assert appo.future_weight(fkl).tolist() == [approx(1.2), approx(1.051271), 1.0, 1.0]
    assert appo.future_weight(fkl, high_only=False).tolist() == [approx(1.2), approx(1.051271),
                                                                 approx(0.904837), approx(0.8)]


def test_future_aware_advantages_and_safety_clamp():
    # A = [1, -1, -1], f = [1.2, 1.2, 1.1], ratio [7, 7, 2], b = 1:
    # t0: 1 * 2.2 = 2.2; t1: A < 0 and ratio 7 > 6 -> f clamped to 1.0 -> -2.0; t2: -2.1
    adv = appo.future_aware_advantages([1.0, -1.0, -1.0], [1.2, 1.2, 1.1], ratio=[7.0, 7.0, 2.0])
    assert adv.tolist() == [approx(2.2), approx(-2.0), approx(-2.1)]
    # no ratio: no clamp (t1 -> -2.2); b = 0.5: t0 = 1 * 1.6
    adv = appo.future_aware_advantages([1.0, -1.0], [1.2, 1.2], b=0.5)
    assert adv.tolist() == [approx(1.6), approx(-1.6)]


def test_first_microbatch_weight_is_one():
    # pi_theta == pi_old: FutureKL = 0, f = 1, A~ = 2A
    fkl = appo.future_kl([-1.0, -2.0], [-1.0, -2.0], [1, 1], gamma=appo.gamma_from_decay(64))
    f = appo.future_weight(fkl)
    assert f.tolist() == [[1.0, 1.0]]
    assert appo.future_aware_advantages([[0.5, -0.5]], f).tolist() == [[1.0, -1.0]]


# ----------------------------------------------------------------------------- diagnostics
def test_branch_diagnostics():
    # entropy [1, 2, 3 | 4, 0(masked)], Omega all 1 except 2.0 at (1, 0); points (0, 2) and (1, 0)
    # all: entropy mean (1+2+3+4)/4 = 2.5, Omega (1+1+1+2)/4 = 1.25; chosen: (3+4)/2, (1+2)/2
    # parents' rewards [1, 0]; branches [1, 1]: the second differs -> 0.5
    d = branching.branch_diagnostics([[1, 2, 3], [4, 0, 0]], [[1, 1, 1], [2, 1, 1]], [[1, 1, 1], [1, 0, 0]],
                                [0, 1], [2, 0], parent_rewards=[1, 0], branch_rewards=[1, 1])
    assert d == {"branch_points_per_rollout": 1.0, "entropy_all": 2.5, "omega_all": 1.25,
                 "entropy_chosen": 3.5, "omega_chosen": 1.5, "branch_outcome_differs": 0.5}


# ----------------------------------------------------------------------------- the estimator
def _recs(spec):
    return [dict(group_id=g, traj_id=t, t=k, obs="", action="", reward=r, done=k == n - 1)
            for g, t, rs in spec for n in [len(rs)] for k, r in enumerate(rs)]


def test_appo_estimator_group_relative_outcomes():
    from agentrl import credit

    # initial group "a": returns 1 (two steps 0 + 1) and 0 -> mean 0.5, population std 0.5:
    #   +0.5 / (0.5 + 1e-6) = +0.999998, -0.999998 on every step of each rollout
    # branch group "a#branch": returns 1, -1, 0 -> mean 0, std sqrt(2/3) = 0.816497:
    #   +-1 / 0.816498 = +-1.224743, 0 -> 0
    spec = [("a", "a/0", [0.0, 1.0]), ("a", "a/1", [0.0]),
            ("a#branch", "a/0#b0", [1.0]), ("a#branch", "a/0#b1", [-1.0]), ("a#branch", "a/1#b0", [0.0])]
    res = credit.compute("appo", _recs(spec), gamma=0.9)
    assert res.step_advantages.tolist() == [approx(0.999998), approx(0.999998), approx(-0.999998),
                                            approx(1.224743), approx(-1.224743), 0.0]
    assert res.diagnostics["branch_rollouts"] == 3 and res.diagnostics["initial_rollouts"] == 2
    # joint (Table 4's w/o dual group): one group of returns (1, 0, 1, -1, 0): mean 0.2, std 0.748331
    #   1 -> 0.8 / 0.748332 = 1.069042; 0 -> -0.267261; -1 -> -1.603563
    res = credit.compute("appo", _recs(spec), gamma=0.9, grouping="joint")
    assert res.step_advantages.tolist() == [approx(1.069042), approx(1.069042), approx(-0.267261),
                                            approx(1.069042), approx(-1.603563), approx(-0.267261)]


def test_appo_kwargs_checked():
    # the estimator's own kwargs (record level), and the algorithm's settings (algorithm_kwargs)
    from agentrl import credit
    from agentrl.algorithms.appo import PARAMS
    from agentrl.registry import resolve_params

    assert set(credit.describe("appo")["kwargs"]) == {"gamma", "grouping"}
    with pytest.raises(ValueError, match=r"kwarg grouping='tree' must be one of 'dual', 'joint'"):
        credit.validate("appo", grouping="tree")
    with pytest.raises(ValueError, match=r"credit estimator 'appo' has no kwarg 'budget'"):
        credit.validate("appo", budget=2)  # APPO's setting, not the estimator's
    with pytest.raises(ValueError, match=r"algorithm 'appo': kwarg scope='tree' must be one of 'rollout', 'prompt'"):
        resolve_params(PARAMS, {"scope": "tree"}, "algorithm 'appo'")
    with pytest.raises(ValueError, match=r"kwarg decay=0.0 must be >= 1e-06"):
        resolve_params(PARAMS, {"decay": 0}, "algorithm 'appo'")
    d = resolve_params(PARAMS, {}, "algorithm 'appo'")
    assert d["budget"] == 1 and d["combine"] == "average" and d["omega_baseline"] == "ref" and "gamma" not in d
    assert PARAMS["grouping"] is credit.registry.lookup("appo").params["grouping"]  # declared once
