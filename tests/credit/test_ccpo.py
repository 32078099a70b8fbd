"""Exact values of the collaboration credit modules (shared, ccpo, ccpo_bonus, sepo), worked out
by hand in the comments. Conventions: sample std (ddof=1), eps = 1e-6, population variance in the
EMA's batch statistics, roles 'thinker' (1) and 'solver' (2)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl.credit.collab import (
    LEVELS,
    CcpoState,
    EmaStat,
    Rating,
    ccpo,
    ccpo_bonus,
    ccpo_gate,
    group_advantages,
    parse_rating,
    rating_prompt,
    sepo,
    shared,
    thought_fractions,
)

D = 1e-6
approx = lambda x: pytest.approx(x, rel=1e-5, abs=1e-9)  # noqa: E731
R2 = 1 / math.sqrt(2)  # two-member group: (+-d/2) / (|d|/sqrt(2)) = +-1/sqrt(2), up to eps


def sig(u):
    return 1 / (1 + math.exp(-u))


# ----------------------------------------------------------------------------- group advantages
def test_group_advantages():
    # group 0 = [1, 0, 0, 1, 0]: mean 0.4, devs [.6, -.4, -.4, .6, -.4], ss = 2*.36 + 3*.16 = 1.2,
    # sample std sqrt(1.2/4) = sqrt(.3) = 0.547723 -> A = dev / (0.547723 + 1e-6)
    # group 1 = [2, 2]: zero deviation -> exactly 0;  group 2 = [3] alone: mean 0, std 1 -> 3/(1+1e-6)
    g = [0, 0, 1, 0, 0, 1, 2, 0]
    r = [1, 0, 2, 0, 1, 2, 3, 0]
    a = group_advantages(r, g)
    s = math.sqrt(0.3) + D
    assert a.tolist() == [
        approx(0.6 / s),
        approx(-0.4 / s),
        0.0,
        approx(-0.4 / s),
        approx(0.6 / s),
        0.0,
        approx(3 / (1 + D)),
        approx(-0.4 / s),
    ]
    assert a[2] == 0.0 and a[5] == 0.0  # bit-exact zero for an all-equal group
    n = group_advantages(r, g, scale="none")
    assert n.tolist() == [approx(0.6), approx(-0.4), 0.0, approx(-0.4), approx(0.6), 0.0, 3.0, approx(-0.4)]
    with pytest.raises(ValueError, match="scale='batch' must be one of 'std', 'none'"):
        group_advantages(r, g, scale="batch")


# ----------------------------------------------------------------------------- shared
def test_shared():
    # both roles get R_joint = [1, 0 | 1, 1]; A = [+-1/sqrt2 | 0, 0]
    c = shared([1, 0, 1, 1], [0, 0, 1, 1])
    for role in ("thinker", "solver"):
        assert c.rewards[role].tolist() == [1, 0, 1, 1]
        assert c.advantages[role].tolist() == [approx(R2), approx(-R2), 0.0, 0.0]
    assert c.diagnostics["r_joint_mean"] == 0.75


# ----------------------------------------------------------------------------- ccpo
# batch 1: groups [0, 0, 1, 1], R_joint [1, 0, 1, 1], R_solo [0, 0, 1, 0] -> Delta [1, 0, 0, 1]
B1 = dict(r_joint=[1, 0, 1, 1], r_solo=[0, 0, 1, 0], group=[0, 0, 1, 1])


def test_ccpo_warmup_uses_raw_values():
    c, st = ccpo(**B1)
    # warm-up (no update yet), the authors' v1 code: r1 = Delta = [1, 0, 0, 1], r2 = R_joint = [1, 0, 1, 1]
    assert c.rewards["thinker"].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert c.rewards["solver"].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert c.diagnostics["ccpo_gate"] == 0.5  # reported, not used in the raw warm-up
    # groups [1, 0] / [0, 1] -> A1 = +-1/sqrt2; A2: g0 [1, 0] -> +-1/sqrt2, g1 [1, 1] -> 0
    assert c.advantages["thinker"].tolist() == [approx(R2), approx(-R2), approx(-R2), approx(R2)]
    assert c.advantages["solver"].tolist() == [approx(R2), approx(-R2), 0.0, 0.0]
    # warmup="shaped": r1 = tanh(Delta) = [tanh 1, 0, 0, tanh 1]; gate before any update: mu = 0
    # -> g = sigmoid(0) = 0.5; r2 = 0.5 R_joint + 0.5 R_solo
    s, _ = ccpo(**B1, warmup="shaped")
    t1 = math.tanh(1.0)  # 0.761594
    assert s.rewards["thinker"].tolist() == [approx(t1), 0.0, 0.0, approx(t1)]
    assert s.rewards["solver"].tolist() == [0.5, 0.0, 1.0, 0.5]
    # every group has two distinct values -> A = +-1/sqrt2 (t1/2 / (t1/sqrt2 + 1e-6))
    assert s.advantages["thinker"].tolist() == [approx(R2), approx(-R2), approx(-R2), approx(R2)]
    assert s.advantages["solver"].tolist() == [approx(R2), approx(-R2), approx(R2), approx(-R2)]
    # the EMA is updated AFTER normalising: first update = batch mean and population variance
    # Delta [1,0,0,1]: mean .5, var .25; R_joint [1,0,1,1]: .75, .1875; R_solo [0,0,1,0]: .25, .1875
    assert st.delta == EmaStat(0.5, 0.25, 4, 1)
    assert st.joint == EmaStat(0.75, 0.1875, 4, 1)
    assert st.solo == EmaStat(0.25, 0.1875, 4, 1)
    assert c.diagnostics["ccpo_normalised"] == 0.0
    assert c.diagnostics["helpful_frac"] == 0.5 and c.diagnostics["redundant_frac"] == 0.5
    assert c.diagnostics["harmful_frac"] == 0.0 and c.diagnostics["r_solo_mean"] == 0.25


def test_ccpo_normalised_with_previous_statistics():
    _, st = ccpo(**B1, min_samples=4)
    # batch 2: one group of 3, R_joint [1, 1, 0], R_solo [0, 1, 1] -> Delta [1, 0, -1]
    # 4 values seen >= min_samples 4 -> normalise with batch 1's statistics
    c, st2 = ccpo([1, 1, 0], [0, 1, 1], [7, 7, 7], st, min_samples=4)
    s_d = 0.5 + D  # sigma_Delta = sqrt(.25)
    z_d = [(1 - 0.5) / s_d, (0 - 0.5) / s_d, (-1 - 0.5) / s_d]  # [0.999998, -0.999998, -2.999994]
    r1 = [math.tanh(z) for z in z_d]  # [0.761594, -0.761594, -0.995055]
    assert c.rewards["thinker"].tolist() == [approx(x) for x in r1]
    g = sig(0.5 / s_d)  # sigmoid(0.999998) = 0.731058
    assert c.diagnostics["ccpo_gate"] == approx(g)
    s_j = math.sqrt(0.1875) + D  # 0.433014
    z_j = [(1 - 0.75) / s_j, (1 - 0.75) / s_j, (0 - 0.75) / s_j]  # [0.577349, 0.577349, -1.732048]
    z_s = [(0 - 0.25) / s_j, (1 - 0.25) / s_j, (1 - 0.25) / s_j]  # [-0.577349, 1.732048, 1.732048]
    r2 = [g * a + (1 - g) * b for a, b in zip(z_j, z_s, strict=True)]  # [0.266803, 0.887896, -0.800407]
    assert c.rewards["solver"].tolist() == [approx(x) for x in r2]
    assert r2 == [approx(0.266803), approx(0.887896), approx(-0.800407)]
    # within-prompt advantages of r1: mean (-0.995055)/3 = -0.331685,
    # devs [1.093278, -0.429908, -0.663370], ss = 1.195257 + 0.184821 + 0.440059 = 1.820138,
    # sample std sqrt(1.820138/2) = 0.953975; A = devs / (0.953975 + 1e-6)
    m = sum(r1) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in r1) / 2)
    assert sd == approx(0.953975)
    assert c.advantages["thinker"].tolist() == [approx((x - m) / (sd + D)) for x in r1]
    assert c.advantages["thinker"].tolist() == [approx(1.146022), approx(-0.450649), approx(-0.695373)]
    m2 = sum(r2) / 3
    sd2 = math.sqrt(sum((x - m2) ** 2 for x in r2) / 2)
    assert c.advantages["solver"].tolist() == [approx((x - m2) / (sd2 + D)) for x in r2]
    # EMA: Delta batch [1, 0, -1] mean 0, var 2/3 -> mu .99*.5 + .01*0 = .495,
    # sigma^2 = .99*.25 + .01*2/3 = .254167; 7 values, 2 updates
    assert st2.delta.mean == approx(0.495) and st2.delta.var == approx(0.2475 + 0.02 / 3)
    assert (st2.delta.count, st2.delta.updates) == (7, 2)
    # R_joint [1,1,0]: mean 2/3, var 2/9 -> .99*.75 + .01*2/3; .99*.1875 + .01*2/9
    assert st2.joint.mean == approx(0.7425 + 0.02 / 3) and st2.joint.var == approx(0.185625 + 0.02 / 9)
    assert c.diagnostics["ccpo_normalised"] == 1.0 and c.diagnostics["ccpo_delta_ema"] == approx(0.495)


def test_ccpo_min_samples_warmup_counts_values_seen_before_the_batch():
    # default min_samples = 50 (Table 5): after 4 values the second batch is still raw
    _, st = ccpo(**B1)
    c, st2 = ccpo([1, 1, 0], [0, 1, 1], [7, 7, 7], st)
    assert c.rewards["thinker"].tolist() == [1.0, 0.0, -1.0]  # Delta
    assert c.rewards["solver"].tolist() == [1.0, 1.0, 0.0]  # R_joint
    # warmup="shaped": tanh(Delta), and the gate already uses mu_Delta = .5, sigma_Delta = .5:
    # sigmoid(0.999998)
    s, _ = ccpo([1, 1, 0], [0, 1, 1], [7, 7, 7], st, warmup="shaped")
    assert s.rewards["thinker"].tolist() == [approx(math.tanh(1)), 0.0, approx(math.tanh(-1))]
    g = sig(0.5 / (0.5 + D))
    assert s.rewards["solver"].tolist() == [
        approx(g * 1 + (1 - g) * 0),
        approx(1.0),
        approx(g * 0 + (1 - g) * 1),
    ]
    assert st2.delta.count == 7
    # authors' code: min_samples = 10 -> 4 + 3 = 7 seen, still raw on a third batch
    c3, _ = ccpo([1], [0], [0], st2, min_samples=10)
    assert c3.rewards["thinker"].tolist() == [1.0]
    c4, _ = ccpo([1], [0], [0], st2, min_samples=7)
    assert c4.diagnostics["ccpo_normalised"] == 1.0


def test_ccpo_alpha_eta_and_variance_floor():
    # all Delta equal in batch 1 -> var 0 <= 1e-6 -> sigma = 1 (no division by ~0)
    _, st = ccpo([1, 1], [0, 0], [0, 0], min_samples=0)
    assert st.delta == EmaStat(1.0, 0.0, 2, 1) and st.delta.sigma == 1.0
    # next batch, alpha = 2, eta = 3: z_Delta = (Delta - 1)/(1 + 1e-6); g = sigmoid(3 * 1/(1+1e-6))
    c, _ = ccpo([1, 0], [1, 1], [0, 0], st, alpha=2.0, eta=3.0, min_samples=0)
    z = [(0 - 1) / (1 + D), (-1 - 1) / (1 + D)]
    assert c.rewards["thinker"].tolist() == [approx(math.tanh(2 * z[0])), approx(math.tanh(2 * z[1]))]
    assert ccpo_gate(st.delta, eta=3.0) == approx(sig(3 / (1 + D)))  # 0.952574
    assert c.diagnostics["ccpo_gate"] == approx(0.952574)
    # a tiny sigma makes |eta mu / sigma| huge: the gate saturates without overflow
    assert ccpo_gate(EmaStat(-2.0, 2e-6, 10, 3)) == approx(0.0)
    assert ccpo_gate(EmaStat(2.0, 2e-6, 10, 3)) == 1.0


def test_ccpo_is_pure_and_state_round_trips():
    _, st = ccpo(**B1)
    before = st.state_dict()
    ccpo([1, 1, 0], [0, 1, 1], [7, 7, 7], st)
    assert st.state_dict() == before  # the input state is not modified
    d = st.state_dict()
    assert d["delta"] == {"mean": 0.5, "var": 0.25, "count": 4, "updates": 1}
    st2 = CcpoState.from_state_dict(d)
    assert st2 == st
    a, _ = ccpo([1, 0], [0, 0], [0, 0], st, min_samples=4)
    b, _ = ccpo([1, 0], [0, 0], [0, 0], st2, min_samples=4)
    assert a.advantages["solver"].tolist() == b.advantages["solver"].tolist()
    with pytest.raises(ValueError, match="needs keys delta, joint, solo; got \\['delta'\\]"):
        CcpoState.from_state_dict({"delta": {}})
    with pytest.raises(ValueError, match="state_dict\\['delta'\\] needs keys count, mean, updates, var"):
        CcpoState.from_state_dict({"delta": {"mean": 0}, "joint": {}, "solo": {}})


def test_ccpo_input_errors():
    with pytest.raises(ValueError, match="reward array of length 2 for 3 group ids"):
        ccpo([1, 0], [0, 0], [0, 0, 0])
    with pytest.raises(ValueError, match="rewards must be finite"):
        shared([1, float("nan")], [0, 0])


# ----------------------------------------------------------------------------- ccpo_bonus
def test_ccpo_bonus_pm1():
    # g0: R_joint [1, -1, 1], R_solo [-1, -1, 1] -> solo baseline -1/3 < 0:
    #     joint correct where the baseline is negative -> bonus +1 on rollouts 0 and 2
    #     r1 = [1.2, -1, 1.2], mean 1.4/3 -> A1 = [.733333, -1.466667, .733333] (no std scaling)
    #     r2 = R_joint [1, -1, 1], mean 1/3 -> A2 = [.666667, -1.333333, .666667]
    # g1: R_joint [-1, -1], R_solo [1, 1] -> baseline 1 > 0, joint wrong -> bonus -1 on both
    #     r1 = [-1.2, -1.2] -> A1 = [0, 0]
    c = ccpo_bonus([1, -1, 1, -1, -1], [-1, -1, 1, 1, 1], [0, 0, 0, 1, 1])
    assert c.rewards["thinker"].tolist() == [approx(1.2), -1.0, approx(1.2), approx(-1.2), approx(-1.2)]
    assert c.rewards["solver"].tolist() == [1, -1, 1, -1, -1]
    assert c.advantages["thinker"].tolist() == [
        approx(0.733333),
        approx(-1.466667),
        approx(0.733333),
        0.0,
        0.0,
    ]
    assert c.advantages["solver"].tolist() == [approx(2 / 3), approx(-4 / 3), approx(2 / 3), 0.0, 0.0]
    assert c.diagnostics["bonus_pos_frac"] == 0.4 and c.diagnostics["bonus_neg_frac"] == 0.4


def test_ccpo_bonus_01_threshold():
    # 0/1 rewards need threshold 0.5: R_joint [1, 0], R_solo [0, 0] -> baseline 0 < .5 -> +1 on rollout 0
    c = ccpo_bonus([1, 0], [0, 0], [0, 0], threshold=0.5)
    assert c.rewards["thinker"].tolist() == [approx(1.2), 0.0]
    # with the default threshold 0 nothing fires on 0/1 rewards (baseline 0 is not < 0)
    assert ccpo_bonus([1, 0], [0, 0], [0, 0]).rewards["thinker"].tolist() == [1.0, 0.0]


# ----------------------------------------------------------------------------- sepo
def test_sepo_exact():
    # one group of two, R_ver [+1, -1], eta 0.3
    # rollout 0: Thinker rates (0.7, 0.3), Solver rates (0.4, 0.6)
    #   s1 = .3*.7 + .7*.4 = .49 (Eq. 1); s2 = .3*.6 + .7*.3 = .39 (Eq. 2); w = s / (.88 + 1e-6)
    # rollout 1: Thinker's rating failed -> (0.5, 0.5); Solver rates (0.2, 0.8)
    #   s1 = .3*.5 + .7*.2 = .29; s2 = .3*.8 + .7*.5 = .59; w = s / (.88 + 1e-6)
    # w1 = [.556818, .329545] mean .443182 -> bonus1 = [+.113636, -.113636]; bonus2 = -bonus1
    # correct: r = 1 + .2 bonus; wrong: r = -1 - .2 bonus
    #   r1 = [1.022727, -0.977273]; r2 = [0.977273, -1.022727]
    t = [Rating(0.7, 0.3, True, "json"), Rating(0.5, 0.5, False, "fallback")]
    s = [Rating(0.4, 0.6, True, "json"), (0.2, 0.8)]
    c = sepo([1, -1], [0, 0], t, s)
    b = (0.49 - 0.29) / 2 / (0.88 + D)  # 0.113636
    assert b == approx(0.113636)
    assert c.rewards["thinker"].tolist() == [approx(1 + 0.2 * b), approx(-1 + 0.2 * b)]
    assert c.rewards["solver"].tolist() == [approx(1 - 0.2 * b), approx(-1 - 0.2 * b)]
    assert c.rewards["thinker"].tolist() == [approx(1.022727), approx(-0.977273)]
    assert c.advantages["thinker"].tolist() == [approx(R2), approx(-R2)]
    assert c.diagnostics["sepo_invalid_frac"] == 0.25  # 1 fallback out of 4 ratings
    # centring off: bonus = w itself; lam_credit .5, lam_blame .1
    c2 = sepo([1, -1], [0, 0], t, s, center=False, lam_credit=0.5, lam_blame=0.1)
    w1 = [0.49 / (0.88 + D), 0.29 / (0.88 + D)]
    assert c2.rewards["thinker"].tolist() == [approx(1 + 0.5 * w1[0]), approx(-1 - 0.1 * w1[1])]


def test_sepo_errors():
    with pytest.raises(ValueError, match="r_ver must be \\+1 or -1"):
        sepo([1, 0], [0, 0], [(0.5, 0.5)] * 2, [(0.5, 0.5)] * 2)
    with pytest.raises(ValueError, match="thinker_ratings has 1 entries for 2 rollouts"):
        sepo([1, -1], [0, 0], [(0.5, 0.5)], [(0.5, 0.5)] * 2)


@pytest.mark.parametrize(
    "text, correct, want",
    [
        (
            '{"outcome": "correct", "pair": [0.7, 0.3], "brief_reason": "plan was key"}',
            True,
            (0.7, 0.3, True, "json"),
        ),
        # only the first rating object counts: its outcome contradicts the verifier -> fallback
        # (the regex then meets the same contradicting outcome first)
        (
            '{"outcome": "correct", "pair": [0.9, 0.1]} then {"outcome": "incorrect", "pair": [0.2, 0.8]}',
            False,
            (0.5, 0.5, False, "fallback"),
        ),
        # a pair that is not one of the 9 levels: the JSON rating fails, the regex finds the next pair
        (
            '{"outcome": "correct", "pair": [0.75, 0.25]} {"outcome": "correct", "pair": [0.6, 0.4]}',
            True,
            (0.6, 0.4, True, "regex"),
        ),
        # malformed JSON -> regex on the same fields
        ("outcome: correct, pair: (0.6, 0.4)", True, (0.6, 0.4, True, "regex")),
        ('{"outcome": "incorrect", "pair": [0.3, 0.7],}', False, (0.3, 0.7, True, "regex")),
        # regex finds a stated outcome that contradicts the verifier -> fallback
        ("outcome: wrong, pair: (0.6, 0.4)", True, (0.5, 0.5, False, "fallback")),
        ('{"outcome": "correct", "pair": [0.7, 0.3]}', False, (0.5, 0.5, False, "fallback")),
        ("I think we both did well.", True, (0.5, 0.5, False, "fallback")),
        ('{"outcome": "correct", "pair": [1.0, 0.0]}', True, (0.5, 0.5, False, "fallback")),
    ],
)
def test_parse_rating(text, correct, want):
    assert parse_rating(text, correct) == Rating(*want)


def test_levels_and_rating_prompt():
    assert LEVELS[0] == (0.9, 0.1) and LEVELS[-1] == (0.1, 0.9) and len(LEVELS) == 9
    p = rating_prompt("solver", "What is 2+2?", "Add.", "\\boxed{4}", True)
    assert p.startswith("You were the Solver")
    assert "it is correct." in p and "credit for the correct answer" in p
    assert "Problem:\nWhat is 2+2?" in p and "Thinker's plan:\nAdd." in p and "\\boxed{4}" in p
    assert (
        "[0.9, 0.1], [0.8, 0.2]" in p and '{"outcome": "correct", "pair": [Thinker share, Solver share]' in p
    )
    q = rating_prompt("thinker", "x", "y", "z", False)
    assert "it is incorrect." in q and "responsibility for the wrong answer" in q
    # a reply in the requested shape parses
    assert parse_rating('{"outcome": "incorrect", "pair": [0.4, 0.6], "brief_reason": "x"}', False).valid
    with pytest.raises(ValueError, match="rater 'critic' must be one of thinker, solver"):
        rating_prompt("critic", "x", "y", "z", True)


# ----------------------------------------------------------------------------- diagnostics, kwargs
def test_thought_fractions():
    # Delta = [1, 0, -1, 0, 1] -> helpful 2/5, redundant 2/5, harmful 1/5
    f = thought_fractions([1, 0, 0, 1, 1], [0, 0, 1, 1, 0])
    assert f == {"helpful_frac": 0.4, "redundant_frac": 0.4, "harmful_frac": 0.2}
    c = shared([1, 0], [0, 0])
    assert c.diagnostics["thinker_reward_mean"] == 0.5 and c.diagnostics["solver_adv_mean"] == 0.0


def test_resolve_kwargs():
    # the collaboration modules' knobs through the one credit registry (what recipes go through);
    # gamma and CCPO's state are the record-level wrapper's, not the reward functions'
    from agentrl.credit.registry import resolve

    def resolve_fn(name, kw):
        return {k: v for k, v in resolve(name, kw)[1].items() if k not in ("gamma", "state")}

    assert resolve_fn("ccpo", {}) == {"alpha": 1.0, "eta": 1.0, "lam": 0.99, "min_samples": 50, "scale": "std",
                                      "warmup": "raw"}
    assert resolve_fn("sepo", {"eta": 0.5})["eta"] == 0.5
    assert resolve_fn("ccpo_bonus", {})["scale"] == "none"
    with pytest.raises(ValueError, match="unknown credit estimator 'coma'; registered: .*shared, ccpo, ccpo_bonus, sepo"):
        resolve("coma", {})
    with pytest.raises(
        ValueError, match="credit estimator 'ccpo' has no kwarg 'beta' .*\\(its kwargs: gamma, alpha"
    ):
        resolve("ccpo", {"beta": 1})
    with pytest.raises(ValueError, match="kwarg lam=1.5 must be in \\[0.0, 1.0\\]"):
        resolve("ccpo", {"lam": 1.5})
    with pytest.raises(ValueError, match="kwarg min_samples=2.5 must be an integer"):
        resolve("ccpo", {"min_samples": 2.5})
    # every resolved kwarg set is accepted by its function
    c, _ = ccpo(**B1, **resolve_fn("ccpo", {"min_samples": 10}))
    assert np.isfinite(c.advantages["thinker"]).all()
