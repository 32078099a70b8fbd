"""Exact values of the authors'-code settings (README.md "Episode term", "HGPO"), worked out by
hand in the comments: episode statistics over steps, the singleton rule, the invalid-action
penalty taken off one step, HGPO's seven rules, and the registry's duplicate check.

delta = 1e-6 (D below); sample std (ddof 1) for episode terms, population std for HGPO levels.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from credit_helpers import find, traj

from agentrl.credit import compute, register, validate
from agentrl.credit.registry import GAMMA, REGISTRY
from agentrl.records import StepRecord

D = 1e-6


def close(x):
    return pytest.approx(x, rel=1e-9, abs=1e-12)


# ----------------------------------------------------------------------------- episode statistics
def win_and_long_loss():
    # one group: a 1-step win (R=10) and a 3-step loss (R=0); distinct observations, so the step
    # term is 0 everywhere except obs "A", shared by both first steps
    return traj("g", "w", ["A"], ["x"], [10]) + traj("g", "l", ["A", "B", "C"], ["y", "y", "y"], [0, 0, 0])


def test_episode_stats_over_steps_vs_rollouts():
    recs = win_and_long_loss()
    # over steps (authors' code): scores [10, 0, 0, 0], mean 2.5, sample std
    # sqrt((7.5^2 + 3 * 2.5^2) / 3) = sqrt(75 / 3) = 5 -> win (10 - 2.5) / 5 = +1.5, loss -0.5
    steps = compute("gigpo", recs, w=0.0, episode_stats="steps")
    assert steps.step_advantages.tolist() == [close(7.5 / (5 + D))] + [close(-2.5 / (5 + D))] * 3
    # over rollouts (BiPACE Eq. 1, the default): returns [10, 0], mean 5, std sqrt(50) = 7.071068
    # -> +-5 / 7.071068 = +-0.707107 on every step of each rollout
    rolls = compute("gigpo", recs, w=0.0)
    ep = 5 / (math.sqrt(50) + D)
    assert rolls.step_advantages.tolist() == [close(ep)] + [close(-ep)] * 3
    # norm='mean' over steps: 10 - 2.5 = 7.5, 0 - 2.5 = -2.5
    mean = compute("gigpo", recs, w=0.0, norm="mean", episode_stats="steps")
    assert mean.step_advantages.tolist() == [7.5, -2.5, -2.5, -2.5]


def test_grpo_takes_the_same_episode_kwargs():
    # verl-agent's GRPO uses the same statistics: over steps +1.5 / -0.5 as above
    recs = win_and_long_loss()
    res = compute("grpo", recs, episode_stats="steps")
    assert res.step_advantages.tolist() == [close(7.5 / (5 + D))] + [close(-2.5 / (5 + D))] * 3
    # scale='batch' with a second group h (one-step rollouts R = 4, 0): centered values over steps
    # g [7.5, -2.5 x3], h [2, -2]; batch std of the scores [10, 0, 0, 0, 4, 0]: mean 14/6,
    # squares (7.667^2 + 3 * 2.333^2 + 1.667^2 + 2.333^2) = 58.78 + 16.33 + 2.78 + 5.44 = 83.33, / 5
    # -> sqrt(16.667) = 4.082483
    recs += traj("h", "h0", ["Q"], ["x"], [4]) + traj("h", "h1", ["Q"], ["x"], [0])
    sd = math.sqrt(sum((v - 14 / 6) ** 2 for v in (10, 0, 0, 0, 4, 0)) / 5)
    assert sd == pytest.approx(4.082483, abs=1e-6)
    res = compute("grpo", recs, scale="batch", episode_stats="steps")
    assert res.step_advantages.tolist() == [close(v / (sd + D)) for v in (7.5, -2.5, -2.5, -2.5, 2, -2)]


def test_step_term_unchanged_by_episode_kwargs():
    recs = win_and_long_loss()
    # gamma 0.95: R_0 of the win 10, of the loss 0; group A {10, 0}: +-5 / (sqrt(50) + D)
    a = 5 / (math.sqrt(50) + D)
    for kw in ({}, {"episode_stats": "steps", "episode_singleton": "raw", "penalty": "step"}):
        res = compute("gigpo", recs, **kw)
        assert res.step_term.tolist() == [close(a), close(-a), 0.0, 0.0]


def test_episode_singleton_rule():
    # group h: a single one-step rollout, R = 3. group k: a single two-step rollout, R = 1 + 2 = 3.
    recs = traj("h", "h0", ["A"], ["x"], [3]) + traj("k", "k0", ["B", "C"], ["x", "x"], [1, 2])
    # 'zero' (default): a group of one value has no signal
    assert compute("gigpo", recs).step_advantages.tolist() == [0.0, 0.0, 0.0]
    # 'raw' over rollouts: both groups hold one rollout: mean 0, std 1 -> 3 / (1 + D) everywhere
    raw = compute("gigpo", recs, episode_singleton="raw")
    assert raw.step_advantages.tolist() == [close(3 / (1 + D))] * 3
    # 'raw' over steps: h holds one step (singleton: 3 / (1 + D)); k holds two equal scores
    # [3, 3] (not a singleton): 0
    raw_steps = compute("gigpo", recs, episode_singleton="raw", episode_stats="steps")
    assert raw_steps.step_advantages.tolist() == [close(3 / (1 + D)), 0.0, 0.0]
    # norm='mean': the score itself, 3
    assert compute("gigpo", recs, episode_singleton="raw", norm="mean").step_advantages.tolist() == [3.0] * 3


# ----------------------------------------------------------------------------- invalid-action penalty
def penalized():
    # rollout p: rewards [0, -0.1, 1] where step 1 was invalid (penalty 0.1 inside its reward);
    # rollout q: rewards [0, 0]. Both start in obs "A".
    return traj("g", "p", ["A", "B", "C"], ["x", "bad", "z"], [0, -0.1, 1], penalty=[0.0, 0.1, 0.0]) + traj(
        "g", "q", ["A", "E"], ["y", "y"], [0, 0]
    )


def test_penalty_as_reward_is_discounted_back():
    recs = penalized()
    res = compute("gigpo", recs, gamma=0.5, norm="mean")
    # R_t of p: [0 + .5 * -.1 + .25 * 1, -.1 + .5 * 1, 1] = [0.2, 0.4, 1]; q: [0, 0]
    # step group A {0.2, 0}: +-0.1; others singletons
    assert res.step_term[find(recs, "p", 0)] == close(0.1)
    # episode over rollouts: R(tau) = [0.9, 0], mean 0.45 -> +-0.45
    assert res.step_advantages[find(recs, "p", 2)] == close(0.45)


def test_penalty_on_its_step_only():
    recs = penalized()
    res = compute("gigpo", recs, gamma=0.5, norm="mean", penalty="step", episode_stats="steps")
    # env rewards of p without the penalty [0, 0, 1]: R_t [0.25, 0.5, 1], minus each step's own
    # penalty: [0.25, 0.4, 1]. Step group A {0.25, 0}: +-0.125
    assert res.step_term[find(recs, "p", 0)] == close(0.125)
    assert res.step_term[find(recs, "q", 0)] == close(-0.125)
    # episode scores R(tau) - p_i: p [1, 0.9, 1], q [0, 0]; over steps mean 2.9 / 5 = 0.58
    # A_ep: p [0.42, 0.32, 0.42], q [-0.58, -0.58]; plus the step term at t=0
    exp = {("p", 0): 0.42 + 0.125, ("p", 1): 0.32, ("p", 2): 0.42, ("q", 0): -0.58 - 0.125, ("q", 1): -0.58}
    for (tid, t), v in exp.items():
        assert res.step_advantages[find(recs, tid, t)] == close(v)
    # mean_std: sample std of [1, .9, 1, 0, 0] = sqrt((.42^2 * 2 + .32^2 + .58^2 * 2) / 4)
    # = sqrt(1.128 / 4) = 0.531037 -> p step 1: 0.32 / 0.531037 = 0.602595
    ms = compute("gigpo", recs, gamma=0.5, w=0.0, penalty="step", episode_stats="steps")
    assert ms.step_advantages[find(recs, "p", 1)] == close(0.32 / (math.sqrt(1.128 / 4) + D))
    # over rollouts: statistics of R(tau) = [1, 0] (mean 0.5), each step's score minus it:
    # p [0.5, 0.4, 0.5], q [-0.5, -0.5]
    ro = compute("gigpo", recs, gamma=0.5, w=0.0, norm="mean", penalty="step")
    assert ro.step_advantages.tolist() == [close(v) for v in (0.5, 0.4, 0.5, -0.5, -0.5)]


def test_penalty_field_on_step_records_and_errors():
    r = StepRecord("g", "a", 0, "o", "bad", -0.1, True, penalty=0.1)
    assert StepRecord.from_dict(r.to_dict()).penalty == 0.1
    # StepRecords and dicts give the same numbers; a record without the field has penalty 0
    recs = penalized()
    objs = [StepRecord.from_dict(d) for d in recs]
    kw = {"gamma": 0.5, "penalty": "step", "episode_stats": "steps"}
    assert (
        compute("gigpo", objs, **kw).step_advantages.tolist()
        == compute("gigpo", recs, **kw).step_advantages.tolist()
    )
    with pytest.raises(ValueError, match="'penalty' holds NaN"):
        compute("gigpo", [dict(recs[0], penalty=float("nan"))] + recs[1:], penalty="step")
    with pytest.raises(ValueError, match="'penalty' must be a number"):
        compute("gigpo", [dict(recs[0], penalty="0.1")] + recs[1:], penalty="step")
    with pytest.raises(ValueError, match=r"penalty='steps' must be one of 'reward', 'step'"):
        validate("bipace_q", penalty="steps")
    with pytest.raises(ValueError, match=r"episode_stats='traj' must be one of 'rollouts', 'steps'"):
        validate("pace_diff", episode_stats="traj")


def test_family_shares_the_episode_term():
    # bigpo on the one-hot observation hash with eps 0 is GiGPO's partition: same numbers under
    # the authors' settings too
    recs = penalized() + win_and_long_loss()
    kw = {"gamma": 0.5, "penalty": "step", "episode_stats": "steps", "episode_singleton": "raw"}
    g = compute("gigpo", recs, **kw).step_advantages
    b = compute("bigpo", recs, embedder="obs_hash", eps=0.0, **kw).step_advantages
    assert g.tolist() == b.tolist()
    # with w = 0 every combiner gives the same episode term under the same episode kwargs
    ep_only = compute("gigpo", recs, w=0.0, **kw).step_advantages.tolist()
    for name, extra in (("pace_q", {}), ("pace_diff", {"action_key": "action_tag"}), ("hgpo_pairs", {})):
        assert compute(name, recs, w=0.0, **extra, **kw).step_advantages.tolist() == ep_only, name


# ----------------------------------------------------------------------------- HGPO
def hgpo_batch():
    # gamma 1; H = K = 1: level 1 keys on obs_t, level 2 on (obs_{t-1}, obs_t)
    # u: obs [A, B], rewards [0, 1] -> R_t [1, 1]
    # v: obs [A, B], rewards [0, 0] -> [0, 0]   (another action at t=0: HGPO keys ignore actions)
    # x: obs [C, B], rewards [0, 1] -> [1, 1]
    # y: obs [A, E], rewards [0, 0] -> [0, 0]
    return (
        traj("g", "u", ["A", "B"], ["go", "take"], [0, 1])
        + traj("g", "v", ["A", "B"], ["look", "take"], [0, 0])
        + traj("g", "x", ["C", "B"], ["go", "take"], [0, 1])
        + traj("g", "y", ["A", "E"], ["go", "open"], [0, 0])
    )


# level 1, obs A: {u 1, v 0, y 0}: mean 1/3, population std sqrt((4/9 + 1/9 + 1/9) / 3) = sqrt(2/9)
S = math.sqrt(2 / 9)
A_HI, A_LO = (2 / 3) / (S + D), (-1 / 3) / (S + D)  # +1.414213, -0.707107
# level 1, obs B: {u 1, v 0, x 1}: mean 2/3, same std -> u, x (1/3)/S = 0.707107, v -1.414213
B_HI, B_LO = (1 / 3) / (S + D), (-2 / 3) / (S + D)
# level 2, (A, B): {u 1, v 0}: mean .5, population std .5 -> +-.5 / (.5 + D); (C, B), (A, E) alone
L2 = 0.5 / (0.5 + D)


def test_hgpo_authors_levels():
    recs = hgpo_batch()
    res = compute("hgpo", recs, gamma=1.0, K=1, alpha=1.0)
    # weights (k+1)^alpha: level 1 -> 2, level 2 -> 3; a step's sum of weights + D in the denominator;
    # t=0 records are in level 1 only (no padding); x's t=0 (obs C) and y's t=1 (obs E) are alone
    # everywhere: no item, 0
    exp = {
        ("u", 0): 2 * A_HI / (2 + D),
        ("v", 0): 2 * A_LO / (2 + D),
        ("y", 0): 2 * A_LO / (2 + D),
        ("x", 0): 0.0,
        ("u", 1): (2 * B_HI + 3 * L2) / (5 + D),
        ("v", 1): (2 * B_LO - 3 * L2) / (5 + D),
        ("x", 1): 2 * B_HI / (2 + D),
        ("y", 1): 0.0,
    }
    for (tid, t), v in exp.items():
        i = find(recs, tid, t)
        assert res.step_advantages[i] == close(v), (tid, t)
        assert res.step_term[i] == close(v)  # no episode term without base_group
    d = res.diagnostics
    # level 1 keys {A: 3, C: 1, B: 3, E: 1}; level 2 (members t=1 only) {(A,B): 2, (C,B): 1, (A,E): 1}
    assert d["hgpo_k1_singleton_frac"] == close(2 / 4) and d["hgpo_k2_singleton_frac"] == close(2 / 3)
    assert d["hgpo_k2_mean_cluster_size"] == close(4 / 3)
    # nonzero items per record: u0 1, v0 1, x0 0, y0 1, u1 2, v1 2, x1 1, y1 0 -> 8 / 8
    assert d["hgpo_mean_valid_levels"] == close(1.0)


def test_hgpo_mean_norm_and_alpha():
    recs = hgpo_batch()
    # norm='mean': level 1 A: u 2/3, v -1/3; B: u 1/3, v -2/3; level 2 (A,B): +-.5
    # alpha 0: every weight 1 -> u1 (1/3 + .5) / (2 + D), u0 (2/3) / (1 + D)
    res = compute("hgpo", recs, gamma=1.0, K=1, alpha=0.0, norm="mean")
    assert res.step_advantages[find(recs, "u", 1)] == close((1 / 3 + 0.5) / (2 + D))
    assert res.step_advantages[find(recs, "u", 0)] == close((2 / 3) / (1 + D))
    # K=0: level 1 only (GiGPO's key, population std, w 2): u1 2 * B_HI / (2 + D)
    res = compute("hgpo", recs, gamma=1.0, K=0)
    assert res.step_advantages[find(recs, "u", 1)] == close(2 * B_HI / (2 + D))


def test_hgpo_base_group_joins_as_weight_one_item():
    recs = hgpo_batch()
    res = compute("hgpo", recs, gamma=1.0, K=1, base_group=True)
    # episode item (authors' defaults: over steps, sample std): R(tau) u 1, v 0, x 1, y 0, two steps
    # each -> scores [1,1,0,0,1,1,0,0]: mean .5, std sqrt(8 * .25 / 7) = sqrt(2/7) -> +-.5 / .534522
    E = 0.5 / (math.sqrt(2 / 7) + D)
    exp = {
        ("u", 0): (E + 2 * A_HI) / (3 + D),
        ("x", 0): E / (1 + D),  # only the episode item
        ("y", 1): -E / (1 + D),
        ("u", 1): (E + 2 * B_HI + 3 * L2) / (6 + D),
        ("v", 1): (-E + 2 * B_LO - 3 * L2) / (6 + D),
    }
    for (tid, t), v in exp.items():
        i = find(recs, tid, t)
        assert res.step_advantages[i] == close(v), (tid, t)
    # the step term is the history levels' share: u1 (2 B_HI + 3 L2) / (6 + D)
    assert res.step_term[find(recs, "u", 1)] == close((2 * B_HI + 3 * L2) / (6 + D))
    assert res.step_term[find(recs, "x", 0)] == 0.0


def test_hgpo_drops_zero_items():
    # gamma 1, norm 'mean'. R_t: a [0, 0], b [.5, .5], c [1, 1]
    # level 1 obs A (t=1): {a 0, b .5, c 1}, mean .5: b equals the mean -> its level-1 item is 0
    # and is dropped with its weight; level 2 (S, A) pairs a and b: {0, .5}, mean .25 -> b +.25.
    # So b = 3 * .25 / (3 + D), not 3 * .25 / (5 + D)
    recs = (
        traj("g", "a", ["S", "A"], ["x", "y"], [0, 0])
        + traj("g", "b", ["S", "A"], ["x", "y"], [0, 0.5])
        + traj("g", "c", ["T", "A"], ["x", "y"], [0, 1])
    )
    res = compute("hgpo", recs, gamma=1.0, K=1, norm="mean")
    assert res.step_advantages[find(recs, "b", 1)] == close(3 * 0.25 / (3 + D))
    # a: level 1 0 - .5 = -.5 (w 2), level 2 -.25 (w 3): (-1 - .75) / (5 + D)
    assert res.step_advantages[find(recs, "a", 1)] == close(-1.75 / (5 + D))
    # c at t=0: obs T alone at level 1, not a member of level 2 (t < 1): no item, 0
    assert res.step_advantages[find(recs, "c", 0)] == 0.0


def test_hgpo_extreme_alpha():
    recs = traj("g", "a", ["s", "u"], ["x", "y"], [0, 1]) + traj("g", "b", ["s", "u"], ["x", "z"], [0, 0])
    # every level pairs a and b with returns {x, 0}: each item is +-.5 x / (.5 x + D) ~ +-1.
    # alpha = 1000: the weights dwarf delta -> the weighted mean of +-1 items, +-1 (to 1e-5);
    # alpha = -1000: weights 2^-1000 are dwarfed by delta -> about 2^-1000 / 1e-6 = 9.3e-296
    with np.errstate(over="raise", divide="raise", invalid="raise"):  # underflow to 0 is fine
        hi = compute("hgpo", recs, alpha=1000.0).step_advantages
        lo = compute("hgpo", recs, alpha=-1000.0).step_advantages
    assert hi.tolist() == pytest.approx([1, 1, -1, -1], abs=1e-5)
    assert lo.tolist() == pytest.approx([2.0**-1000 / D * v for v in (1, 1, -1, -1)], rel=1e-5)


def test_hgpo_pairs_keeps_the_reconstruction():
    recs = hgpo_batch()
    # hgpo_pairs keys on (obs, action) pairs: at t=1, u (prev action go) and v (look) split, so
    # level 1 of B is {u, x} (both 1): only level 0 counts for u: B {1, 0, 1}, mean 2/3 -> 1/3
    res = compute("hgpo_pairs", recs, gamma=1.0, K=1, norm="mean", w=0.0)
    assert res.step_term[find(recs, "u", 1)] == close(1 / 3)
    assert compute("hgpo", recs, gamma=1.0, K=1, norm="mean").step_term[find(recs, "u", 1)] == close(
        (2 / 3 + 3 * 0.5) / (5 + D)
    )


# ----------------------------------------------------------------------------- registry
def test_register_refuses_a_duplicate_name():
    with pytest.raises(ValueError, match="credit estimator 'gigpo' is already registered .*gigpo"):
        register("gigpo", {}, "nowhere")(lambda batch: None)
    try:
        register("_test_est", {}, "test")(lambda batch: None)
        with pytest.raises(ValueError, match="'_test_est' is already registered"):
            register("_test_est", {}, "test")(lambda batch: None)
    finally:
        REGISTRY.pop("_test_est", None)
    # a declared kwarg the function does not take is refused at registration, not at first use
    with pytest.raises(ValueError, match=r"'_test_est2': .* does not take kwarg\(s\) \['gamma'\]"):
        register("_test_est2", {"gamma": GAMMA}, "test")(lambda batch: None)
    assert "_test_est2" not in REGISTRY


# ----------------------------------------------------------------------------- against a direct loop
def random_batch(seed):
    """2 groups of 1-4 rollouts of 1-5 steps over 3 observations; rewards and penalties dyadic
    (exact in floating point, so "equal to the mean" is decided exactly by both sides)."""
    rng = np.random.default_rng(seed)
    recs = []
    for g in range(2):
        for r in range(int(rng.integers(1, 5))):
            T = int(rng.integers(1, 6))
            pen = [float(rng.choice([0.0, 0.0, 0.25])) for _ in range(T)]
            rew = [float(rng.choice([0.0, 0.0, 1.0, 0.5])) - p for p in pen]
            obs = [str(rng.choice(["A", "B", "C"])) for _ in range(T)]
            recs += traj(f"g{g}", f"g{g}r{r}", obs, ["x"] * T, rew, penalty=pen)
    return recs


def loop_returns(rollout, gamma, penalty):
    """R_t of one rollout's records, written from the rules (README.md "Episode term")."""
    out, run = [], 0.0
    for rec in reversed(rollout):
        r = rec["reward"] + (rec["penalty"] if penalty == "step" else 0.0)
        run = r + gamma * run
        out.append(run - (rec["penalty"] if penalty == "step" else 0.0))
    return out[::-1]


def loop_episode(rollouts, norm, stats, singleton, penalty):
    """A_ep of every record of one group, {(traj, t): value}."""
    pen = (lambda rec: rec["penalty"]) if penalty == "step" else (lambda rec: 0.0)
    R = {k: sum(rec["reward"] + pen(rec) for rec in ro) for k, ro in rollouts.items()}
    score = {(k, rec["t"]): R[k] - pen(rec) for k, ro in rollouts.items() for rec in ro}
    vals = list(R.values()) if stats == "rollouts" else list(score.values())
    if len(vals) == 1:
        if singleton == "zero":
            return dict.fromkeys(score, 0.0)
        mean, std = 0.0, 1.0
    else:
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    return {key: (s - mean) / (std + D) if norm == "mean_std" else s - mean for key, s in score.items()}


def loop_hgpo(recs, gamma, K, alpha, norm, base_group, penalty):
    """The HGPO rules (a)-(g) of README.md, one group and one record at a time."""
    out = {}
    for g in sorted({r["group_id"] for r in recs}):
        rollouts = {}
        for rec in recs:
            if rec["group_id"] == g:
                rollouts.setdefault(rec["traj_id"], []).append(rec)
        ret = {
            (k, t): v for k, ro in rollouts.items() for t, v in enumerate(loop_returns(ro, gamma, penalty))
        }
        clusters = {}
        for k, ro in rollouts.items():
            obs = [rec["obs"] for rec in ro]
            for t in range(len(ro)):
                for level in range(1, min(K + 1, t + 1) + 1):  # (b) members only, (a) observations
                    clusters.setdefault((level, tuple(obs[t - level + 1 : t + 1])), []).append((k, t))
        items = {key: [] for key in ret}
        for (level, _), members in clusters.items():
            if len(members) < 2:
                continue
            vals = [ret[m] for m in members]
            mean = sum(vals) / len(vals)
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))  # (d) population
            for m, v in zip(members, vals, strict=True):
                items[m].append((level, (v - mean) / (std + D) if norm == "mean_std" else v - mean))
        if base_group:  # (g)
            ep = loop_episode(rollouts, norm, "steps", "raw", penalty)
            for key in items:
                items[key].append((0, ep[key]))
        for key, its in items.items():
            kept = [(level, a) for level, a in its if a != 0]  # (e)
            w = [(level + 1) ** alpha for level, _ in kept]  # (c)
            out[(g, *key)] = sum(wi * a for wi, (_, a) in zip(w, kept, strict=True)) / (sum(w) + D)  # (f)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_hgpo_and_episode_term_match_a_direct_loop(seed):
    recs = random_batch(seed)
    for kw in (
        {"K": 2, "alpha": 1.0, "norm": "mean_std", "base_group": False, "penalty": "reward"},
        {"K": 1, "alpha": 0.5, "norm": "mean", "base_group": True, "penalty": "step"},
        {"K": 3, "alpha": 2.0, "norm": "mean_std", "base_group": True, "penalty": "reward"},
    ):
        ref = loop_hgpo(recs, 0.5, **kw)
        got = compute("hgpo", recs, gamma=0.5, **kw).step_advantages
        assert got.tolist() == [close(ref[(r["group_id"], r["traj_id"], r["t"])]) for r in recs], kw
    for stats, singleton, penalty, norm in (
        ("steps", "raw", "step", "mean_std"),
        ("rollouts", "zero", "reward", "mean"),
        ("rollouts", "raw", "step", "mean_std"),
    ):
        got = compute(
            "gigpo",
            recs,
            gamma=0.5,
            w=0.0,
            norm=norm,
            episode_stats=stats,
            episode_singleton=singleton,
            penalty=penalty,
        ).step_advantages
        ref = {}
        for g in sorted({r["group_id"] for r in recs}):
            rollouts = {}
            for rec in recs:
                if rec["group_id"] == g:
                    rollouts.setdefault(rec["traj_id"], []).append(rec)
            ref.update(
                {(g, *k): v for k, v in loop_episode(rollouts, norm, stats, singleton, penalty).items()}
            )
        assert got.tolist() == [close(ref[(r["group_id"], r["traj_id"], r["t"])]) for r in recs]
