"""APPO, CCPO and SEPO where the papers (arXiv:2606.12384, arXiv:2603.21563) and their authors'
code disagreed with an earlier version of ours: one exact-value test per point, the numbers
worked out by hand in the comments. std is the population std unless said otherwise; eps = 1e-6.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl.algorithms import appo_branch_points as branching
from agentrl.algorithms.appo import PARAMS as APPO_PARAMS
from agentrl.registry import resolve_params

approx = lambda x: pytest.approx(x, rel=1e-5, abs=1e-9)  # noqa: E731


def _appo_kw(**kw):
    return resolve_params(APPO_PARAMS, kw, "algorithm 'appo'")


# ============================================================================ 1. Eq. 5's population
# One rollout of 4 model tokens; token 3 is a newline (whitespace only: not eligible) with a high
# entropy. H = [0, 0, 1, 3], Omega = [0.9, 1.0, 1.1, 1.0] (inside the [0.8, 1.2] clip).
#
# Over the model tokens (the authors' code, Eq. 5's "within the rollout"):
#   H: mean 1, devs [-1, -1, 0, 2], var 6/4 = 1.5, std 1.224745 -> Z(H) = dev / (1.224745 + 1e-6)
#      = [-.816496, -.816496, 0, 1.632992]
#   Omega: mean 1, devs [-.1, 0, .1, 0], var .02/4, std .0707107 -> Z(O) = dev / (.0707107 + 1e-6)
#      = [-1.414194, 0, 1.414194, 0] (the eps shows in the 5th digit here)
#   BS = [.816496 * 1.414194, 0, 0, 0] = [1.154683, 0, 0, 0]: among tokens 0-2, token 0 wins.
# Over the eligible tokens only (the old code):
#   H [0, 0, 1]: mean 1/3, std sqrt(2/9) = .471405 -> Z(H) = [-.707105, -.707105, 1.414211]
#   Omega [.9, 1, 1.1]: std sqrt(.02/3) = .0816497 -> Z(O) = [-1.224730, 0, 1.224730]
#   BS = [.866013, 0, 1.732026]: token 2 wins.
H1 = np.array([[0.0, 0.0, 1.0, 3.0]])
OMEGA1 = np.array([[0.9, 1.0, 1.1, 1.0]])
MODEL1 = np.array([[True, True, True, True]])
ELIGIBLE1 = np.array([[True, True, True, False]])


def test_branch_score_z_over_model_tokens_whitespace_entropy():
    bs, z_h, z_o = branching.branch_score(H1, OMEGA1, MODEL1)
    assert z_h[0].tolist() == [approx(-0.816496), approx(-0.816496), 0.0, approx(1.632992)]
    assert z_o[0].tolist() == [approx(-1.414194), approx(0.0), approx(1.414194), approx(0.0)]
    assert bs[0, :3].tolist() == [approx(1.154683), approx(0.0), approx(0.0)]
    # the same scores over the eligible tokens alone (what the old code computed)
    bs_e, _, _ = branching.branch_score(H1, OMEGA1, ELIGIBLE1)
    assert bs_e[0, :3].tolist() == [approx(0.866013), approx(0.0), approx(1.732026)]
    # the paper's selection (top-1 of the rollout): token 0 among the eligible ones, not token 2
    rows, pos = branching.choose_branch_points(H1, OMEGA1, MODEL1, 1, eligible=ELIGIBLE1)
    assert (rows.tolist(), pos.tolist()) == ([0], [0])
    # what normalising over the eligible tokens alone would give (the old behaviour): token 2
    old = branching.choose_branch_points(H1, OMEGA1, ELIGIBLE1, 1)
    assert (old[0].tolist(), old[1].tolist()) == ([0], [2])


# Two rollouts of one prompt, the authors' per-prompt pool of B = 1 with the strict rule, Omega
# flat (log-ratio 0: the first iteration), so BS = Z(H) and strict = Z(H) > 0.
#   rollout 0: H = [0, 2, 4], token 2 a newline. Over its 3 model tokens: mean 2, std sqrt(8/3)
#     = 1.632993 -> Z(H) = [-1.224745, 0, 1.224745]; eligible token 1 has Z = 0 (not > 0).
#     Over the eligible tokens [0, 2]: mean 1, std 1 -> Z = [-1, 1]: token 1 would score 1.
#   rollout 1: H = [0, 3, 3], all eligible: mean 2, std sqrt(2) -> Z = [-1.414214, .707107, .707107].
#   Model-token population: strict pool {(1, 1), (1, 2)}, tie at .707107 -> earliest: (1, 1).
#   Eligible population: (0, 1) scores 1 > .707107 -> (0, 1).
H2 = np.array([[0.0, 2.0, 4.0], [0.0, 3.0, 3.0]])
MODEL2 = np.ones((2, 3), dtype=bool)
ELIGIBLE2 = np.array([[True, True, False], [True, True, True]])


def test_trainer_branch_points_normalise_over_model_tokens():
    from agentrl.algorithms.appo import branch_points

    kw = _appo_kw(budget=1, scope="prompt", strict=True)
    stats = {"entropy": H2, "log_ratio": np.zeros((2, 3)), "model_mask": MODEL2, "eligible": ELIGIBLE2}
    rows, pos, omega = branch_points(["g", "g"], stats, kw)
    assert np.all(omega == 1.0)
    assert (rows.tolist(), pos.tolist()) == ([1], [1])
    # the one-rollout case above through the trainer: Omega from log-ratios with gamma = 1
    # (omega_decay 0): log Omega = [ln .9, 0, ln 1.1, 0] = suffix sums of [ln .9, -ln 1.1, ln 1.1, 0]
    lr = np.array([[math.log(0.9), -math.log(1.1), math.log(1.1), 0.0]])
    stats1 = {"entropy": H1, "log_ratio": lr, "model_mask": MODEL1, "eligible": ELIGIBLE1}
    rows, pos, omega = branch_points(["g"], stats1, _appo_kw(budget=1, omega_decay=0.0))
    assert omega[0].tolist() == [approx(0.9), approx(1.0), approx(1.1), 1.0]
    assert (rows.tolist(), pos.tolist()) == ([0], [0])


# ============================================================================ 2. branch returns
def _step(traj, group, t, env_reward, done, **info):
    from agentrl.records import StepRecord

    return StepRecord(group_id=group, traj_id=traj, t=t, obs="o", action="a", reward=env_reward, done=done,
                      info=dict(info))


def _episode(traj, group, steps, n_tokens=0):
    from agentrl.rollout.contexts import TrajectoryTokens
    from agentrl.rollout.episodes import Episode

    toks = TrajectoryTokens(completion_ids=list(range(n_tokens)), env_mask=[1] * n_tokens,
                            step_spans=[(2 * k, 2 * k + 2) for k in range(n_tokens // 2)])
    return Episode(group_id=group, traj_id=traj, steps=steps, tokens=toks)


def test_late_branch_inherits_the_shaped_prefix():
    from agentrl import credit
    from agentrl.algorithms.appo import inherit_prefix_rewards, token_advantages

    # One prompt, valid_action_reward 0.1 on every accepted step (the CPU recipes' shaping), env
    # reward 1 for a right answer on the last step. Two initial rollouts of 3 steps (2 tokens each:
    # step k holds tokens 2k, 2k+1):
    #   P0 wins: shaped rewards [.1, .1, 1.1] -> R = 1.3;   P1 loses: [.1, .1, .1] -> R = 0.3
    # and one branch of each:
    #   b0 from P0's token 4 (step 2, late): its own record is step 2, wins: [1.1]; prefix = P0's
    #      steps 0-1 = .1 + .1 = .2 -> R = 1.3 (without the prefix: 1.1)
    #   b1 from P1's token 0 (step 0, early): 3 own steps, wins: [.1, .1, 1.1] -> R = 1.3, prefix 0
    bonus = 0.1
    p0 = _episode("P0", "g", [_step("P0", "g", 0, 0.0, False), _step("P0", "g", 1, 0.0, False),
                              _step("P0", "g", 2, 1.0, True)], 6)
    p1 = _episode("P1", "g", [_step("P1", "g", t, 0.0, t == 2) for t in range(3)], 6)
    b0 = _episode("P0#b0", "g#branch", [_step("P0#b0", "g#branch", 2, 1.0, True, branch_parent="P0",
                                              branch_pos=4)])
    b1 = _episode("P1#b1", "g#branch", [_step("P1#b1", "g#branch", t, 1.0 if t == 2 else 0.0, t == 2,
                                              branch_parent="P1", branch_pos=0) for t in range(3)])
    episodes = [p0, p1, b0, b1]
    for ep in episodes:  # what AgentGRPOTrainer._shape_rewards does with valid_action_reward 0.1
        for r in ep.steps:
            r.reward += bonus
    inherit_prefix_rewards(episodes)
    assert b0.steps[0].info["branch_prefix_return"] == approx(0.2)
    assert [r.info["branch_prefix_return"] for r in b1.steps] == [0.0, 0.0, 0.0]
    records = [r for ep in episodes for r in ep.steps]

    # record level (credit: appo): initial group [1.3, .3]: mean .8, std .5 -> A = +-.5/(.5 + 1e-6)
    # = +-.999998; branch group [1.3, 1.3]: zero spread -> A = 0 for both (the late branch that won
    # like its parent is not worse than the early one). Without the prefix: [1.1, 1.3] -> mean 1.2,
    # std .1 -> b0 = -.1/(.1 + 1e-6) = -.999990.
    res = credit.compute("appo", records)
    per_traj = {r.traj_id: a for r, a in zip(records, res.step_advantages, strict=True)}
    assert per_traj["P0"] == approx(0.999998) and per_traj["P1"] == approx(-0.999998)
    assert per_traj["P0#b0"] == 0.0 and per_traj["P1#b1"] == 0.0

    # token level (Eq. 6, combine average): P0's tokens 0-4 (up to and including its branch point)
    # get (A_init + A_b0) / 2 = (.999998 + 0) / 2 = .499999, token 5 A_init = .999998;
    # P1's token 0 gets (-.999998 + 0) / 2 = -.499999, tokens 1-5 A_init = -.999998.
    tok = token_advantages(records, [p0, p1], _appo_kw(budget=1))
    assert tok["P0"].tolist() == [approx(0.499999)] * 5 + [approx(0.999998)]
    assert tok["P1"].tolist() == [approx(-0.499999)] + [approx(-0.999998)] * 5


# ============================================================================ 3. Eq. 7's diagnostics
def test_future_weight_diagnostics_are_after_the_safety_clamp():
    import torch

    from agentrl.losses import LossBatch, LossSettings, compute

    # the registered loss (Eq. 7's surrogate with dapo's reduction) needs no trainer: kwargs in,
    # weighted advantages and metrics out
    opts = {"appo": _appo_kw(decay=1.0)}  # gamma = 2^(-1/1) = 0.5
    # two tokens, A = [-1, 2]; Delta = log pi - log pi_old = [ln 7, 0.5]
    #   token 0: Delta = 1.945910 > ln 3 -> left out of FutureKL; ratio 7
    #   FutureKL = [0 + 0.5 * 0.5, 0.5] = [0.25, 0.5]; exp = [1.284025, 1.648721]
    #   f = clip(., 1, 1.2) (high only) = [1.2, 1.2]
    #   safety clamp: token 0 has A < 0 and ratio 7 > 6 -> f0 = clip(1.2, 0.8, 1.0) = 1.0
    #   A~ = A (1 + f) = [-1 * 2.0, 2 * 2.2] = [-2.0, 4.4]
    #   metrics: mean f = (1.0 + 1.2) / 2 = 1.1 (1.2 before the clamp), max 1.2
    old = torch.tensor([[-2.0, -1.0]])
    logps = old + torch.tensor([[math.log(7.0), 0.5]])
    b = LossBatch(logps=logps, advantages=torch.tensor([[-1.0, 2.0]]), mask=torch.ones(1, 2), old_logps=old)
    out, _ = compute("appo+token_mean", b, LossSettings(tokens=2.0, options=opts))
    assert out.debug["weighted"][0].tolist() == [approx(-2.0), approx(4.4)]
    assert out.debug["weight"][0].tolist() == [approx(1.0), approx(1.2)]
    s, c = out.means["appo/future_weight_mean"]
    assert (s / c).item() == approx(1.1)
    assert out.extremes["appo/future_weight_max"][1].tolist() == [approx(1.2)]


# ============================================================================ 4. CCPO warm-up
def test_ccpo_warmup_default_is_the_authors_raw_signals():
    from agentrl.credit.collab import ccpo

    # one prompt of 3, a fresh state (no EMA update yet): R_joint [1, 0, 1], R_solo [0, 1, 1]
    # -> Delta = [1, -1, 0]. Default (authors' v1 code): r1 = Delta, r2 = R_joint.
    #   A1: mean 0, devs [1, -1, 0], sample std sqrt(2/2) = 1 -> [1, -1, 0] / (1 + 1e-6)
    #   A2: R_joint mean 2/3, devs [1/3, -2/3, 1/3], sample var (1/9 + 4/9 + 1/9)/2 = 1/3,
    #       std .577350 -> [.577349, -1.154699, .577349]
    c, _ = ccpo([1, 0, 1], [0, 1, 1], [0, 0, 0])
    assert c.rewards["thinker"].tolist() == [1.0, -1.0, 0.0]
    assert c.rewards["solver"].tolist() == [1.0, 0.0, 1.0]
    assert c.advantages["thinker"].tolist() == [approx(1.0), approx(-1.0), 0.0]
    assert c.advantages["solver"].tolist() == [approx(0.577349), approx(-1.154699), approx(0.577349)]
    # warmup="shaped" (this project's earlier form): r1 = tanh(Delta) = [.761594, -.761594, 0],
    # r2 = .5 R_joint + .5 R_solo (gate sigmoid(0) before any update) = [.5, .5, 1]
    s, _ = ccpo([1, 0, 1], [0, 1, 1], [0, 0, 0], warmup="shaped")
    assert s.rewards["thinker"].tolist() == [approx(0.761594), approx(-0.761594), 0.0]
    assert s.rewards["solver"].tolist() == [0.5, 0.5, 1.0]


# ============================================================================ 5. SEPO, group of one
def test_sepo_group_of_one_gets_no_bonus():
    from agentrl.credit.collab import sepo

    # groups [0 | 1, 1], R_ver [+1 | +1, -1], eta 0.3, lambda_credit = lambda_blame = 0.2
    # rollout 0 (alone): Thinker rates (.7, .3), Solver (.4, .6): s1 = .3*.7 + .7*.4 = .49,
    #   s2 = .3*.6 + .7*.3 = .39, w1 = .49/.88 = .556818. Its group mean is itself: bonus = 0,
    #   r1 = r2 = 1 exactly (the old code centred with a mean of 0 here: r1 = 1 + .2*.556818 = 1.111364).
    # rollouts 1, 2: s1 = [.49, .29] (rollout 2: Thinker (.5, .5), Solver (.2, .8): .3*.5 + .7*.2),
    #   s2 = [.39, .59], w1 = [.556818, .329545], mean .443182 -> bonus1 = [+.113636, -.113636]
    #   r1 = [1 + .2*.113636, -1 - .2*(-.113636)] = [1.022727, -.977273]; bonus2 = -bonus1
    #   r2 = [.977273, -1.022727]
    t = [(0.7, 0.3), (0.7, 0.3), (0.5, 0.5)]
    s = [(0.4, 0.6), (0.4, 0.6), (0.2, 0.8)]
    c = sepo([1, 1, -1], [0, 1, 1], t, s)
    assert c.rewards["thinker"].tolist() == [1.0, approx(1.022727), approx(-0.977273)]
    assert c.rewards["solver"].tolist() == [1.0, approx(0.977273), approx(-1.022727)]
    # advantages keep the authors' group-of-one rule (mean 0, std 1): 1 / (1 + 1e-6)
    assert c.advantages["thinker"][0] == approx(1 / (1 + 1e-6))


# ============================================================================ 6. recipes, ccpo_bonus
def test_gspo_and_sepo_recipes_use_the_authors_settings():
    from pathlib import Path

    from agentrl.recipe_file import read_recipe_file

    repo = Path(__file__).resolve().parents[2]
    for r in sorted((repo / "recipes/ccpo").glob("t[23]_gspo_*.yaml")):
        d = read_recipe_file(r)  # the resolved recipe (base recipes merged)
        # sequence-level ratios clipped at [1 - 3e-4, 1 + 4e-4] (the authors' GSPO scripts), not 0.2
        assert (d["importance_sampling_level"], d["epsilon"], d["epsilon_high"]) == ("sequence", 3e-4, 4e-4), r
        if d["credit"] == "sepo":
            assert d["credit_kwargs"] == {"scale": "none"}, r  # A = r - mean, the authors' scripts
    for r in sorted((repo / "recipes/ccpo").glob("t1_grpo_*.yaml")):
        d = read_recipe_file(r)
        assert d["epsilon"] == 0.2 and "epsilon_high" not in d, r  # Table 5's clip, the GRPO runs


def test_ccpo_bonus_threshold_tied_to_the_reward_scale(capsys, monkeypatch):
    from pathlib import Path

    from agentrl.credit.collab import ccpo_bonus, check_bonus_threshold
    from agentrl.train import check_recipe

    monkeypatch.chdir(Path(__file__).resolve().parents[2])

    # 0/1 rewards, R_joint [1, 0], R_solo [0, 0]: the solo baseline is 0.
    # threshold 0: "R_joint > 0 and baseline < 0" never holds (baseline >= 0 always) -> bonus 0,
    #   r1 = R_joint = [1, 0]; threshold 0.5: 1 > .5 and 0 < .5 -> +1 on rollout 0, r1 = [1.2, 0]
    assert ccpo_bonus([1, 0], [0, 0], [0, 0]).rewards["thinker"].tolist() == [1.0, 0.0]
    assert ccpo_bonus([1, 0], [0, 0], [0, 0], threshold=0.5).rewards["thinker"].tolist() == [approx(1.2), 0.0]
    check_bonus_threshold(0.5, "01")
    check_bonus_threshold(0.0, "pm1")
    with pytest.raises(ValueError, match=r"on 01 rewards \(0 wrong, 1 right\) never fires at threshold 0: "
                                         r"set credit_kwargs: \{threshold: 0.5\}"):
        check_bonus_threshold(0.0, "01")
    with pytest.raises(ValueError, match="never fires at threshold -1"):
        check_bonus_threshold(-1.0, "pm1")
    # the config validation path: one line, exit code 2
    cpu = "recipes/ccpo/cpu/ccpo_shared.yaml"
    assert check_recipe(cpu, ["--credit", "ccpo_bonus"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "never fires at threshold 0: set credit_kwargs: {threshold: 0.5}" in err
    assert check_recipe(cpu, ["--credit", "ccpo_bonus", "--credit_kwargs", '{"threshold": 0.5}']) == 0


# ============================================================================ 7. the rating parser
# The four cases where our fallbacks and the authors' code part ways (agentrl/credit/README.md,
# "SEPO's rating parser"): each reply, the verifier's outcome, and what we return.
@pytest.mark.parametrize("text, correct, want", [
    # (a) a level pair and no stated outcome: accepted (the authors' code falls back unless the
    #     word correct / wrong appears somewhere); a stated contradicting outcome still falls back
    ("pair: (0.6, 0.4)", True, (0.6, 0.4, True, "regex")),
    ('{"pair": [0.3, 0.7], "brief_reason": "x"}', False, (0.3, 0.7, True, "regex")),
    ("outcome: wrong, pair: (0.6, 0.4)", True, (0.5, 0.5, False, "fallback")),
    # (b) three numbers name no level, in JSON or in text: fallback (the authors' text pattern
    #     takes the first two)
    ('{"outcome": "correct", "pair": [0.7, 0.3, 0.5]}', True, (0.5, 0.5, False, "fallback")),
    ("outcome: correct, pair: [0.7, 0.3, 0.5]", True, (0.5, 0.5, False, "fallback")),
    # (c) percentages name the same level: [70, 30] and 70% / 30% -> (0.7, 0.3), as the authors'
    #     code; mixed units ([0.7, 30]) fall back
    ('{"outcome": "correct", "pair": [70, 30]}', True, (0.7, 0.3, True, "json")),
    ("outcome: incorrect, pair: 20% / 80%", False, (0.2, 0.8, True, "regex")),
    ('{"outcome": "correct", "pair": [0.7, 30]}', True, (0.5, 0.5, False, "fallback")),
    # (d) only the first rating object counts: a second object that matches the verifier does not
    #     rescue a first one that contradicts it (as the authors' code; we used to take the second)
    ('{"outcome": "correct", "pair": [0.9, 0.1]} {"outcome": "incorrect", "pair": [0.2, 0.8]}', False,
     (0.5, 0.5, False, "fallback")),
    ('{"note": 1} {"outcome": "incorrect", "pair": [0.2, 0.8]}', False, (0.2, 0.8, True, "json")),
])
def test_rating_parser_fallbacks(text, correct, want):
    from agentrl.credit.collab import Rating, parse_rating

    assert parse_rating(text, correct) == Rating(*want)
