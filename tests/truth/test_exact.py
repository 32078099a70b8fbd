"""The truth itself: dynamic programming against brute-force Monte Carlo, the exact policy
gradient against finite differences, and a two-armed bandit whose expected gradient cosine is
known in closed form."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl_envs.mdp import MDPConfig, generate

from agentrl.credit import compute
from agentrl.truth.exact import TabularPolicy, objective, occupancy, optimal_objective, truth, values
from agentrl.truth.sample import rollouts, sample_batch
from agentrl.truth.score import cosine, gradient_estimate, mean_direction_cosine, pearson

TINY = MDPConfig(depth=2, horizon=4, moves=2, distractors=1, invalid=1, recurrence=0.5, trap=0.3, goal_frac=0.5,
                 step_reward=0.3, slip=0.25, tasks=2)
"""Every kind of dynamics at once: recurrence, traps, dense rewards, slips, distractors, invalid
actions, a horizon longer than the plan."""


def tiny():
    mdp = generate(TINY, seed=3)
    return mdp, TabularPolicy.random(mdp, seed=5, scale=0.8)


def test_values_match_brute_force_monte_carlo():
    mdp, pol = tiny()
    tr = truth(mdp, pol)
    rng = np.random.default_rng(0)
    n = 40_000
    tasks = np.repeat(np.arange(len(mdp.roots)), n // len(mdp.roots))
    S, A, R, live, _ = rollouts(mdp, pol.probs, tasks, rng)
    ret = R.sum(1)
    for k, root in enumerate(mdp.roots):
        x = ret[tasks == k]
        # V_0(root) is the expected undiscounted return from the task's start
        assert abs(x.mean() - tr.V[0, root]) < 4 * x.std() / np.sqrt(len(x))
        for a in range(mdp.n_actions):  # Q_0(root, a): the return of the rollouts that chose a first
            y = ret[(tasks == k) & (A[:, 0] == a)]
            assert abs(y.mean() - tr.Q[0, root, a]) < 4 * y.std() / np.sqrt(len(y)) + 1e-9
    # occupancy: the share of rollouts still running in each state at each step
    for t in range(mdp.config.horizon):
        emp = np.bincount(S[live[:, t], t], minlength=mdp.n_states) / len(tasks)
        assert np.abs(emp - tr.occupancy[t]).max() < 0.01
    assert tr.J == pytest.approx(ret.mean(), abs=4 * ret.std() / np.sqrt(len(ret)))


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_exact_gradient_matches_finite_differences(gamma):
    mdp, pol = tiny()
    pol.temperature = 0.7
    tr = truth(mdp, pol, gamma)
    h = 1e-6
    fd = np.zeros_like(pol.logits)
    for s in range(mdp.n_states):
        if mdp.terminal[s]:
            continue
        for a in range(mdp.n_actions):
            up, dn = (TabularPolicy(pol.logits.copy(), pol.temperature) for _ in range(2))
            up.logits[s, a] += h
            dn.logits[s, a] -= h
            fd[s, a] = (objective(mdp, up, gamma) - objective(mdp, dn, gamma)) / (2 * h)
    assert np.abs(fd).max() > 1e-3  # a gradient worth checking
    np.testing.assert_allclose(tr.grad, fd, atol=1e-7)
    assert tr.J == pytest.approx(objective(mdp, pol, gamma))


def test_advantage_definition_and_optimum():
    mdp, pol = tiny()
    tr = truth(mdp, pol)
    pi = pol.probs
    live = ~mdp.terminal
    # sum_a pi(a|s) A_t(s, a) = 0 on every live state, and Q of the terminal states is 0
    np.testing.assert_allclose((pi[None] * tr.A).sum(-1)[:, live], 0.0, atol=1e-12)
    assert (tr.Q[:, mdp.terminal] == 0).all()
    # the optimum bounds every policy's J, and a policy greedy on Q* attains it
    Jstar = optimal_objective(mdp)
    assert tr.J < Jstar
    qstar = mdp.optimal()[0]
    assert Jstar == pytest.approx(float(mdp.optimal()[1][0, mdp.roots].mean()))
    greedy = TabularPolicy(200.0 * (qstar[0] == qstar[0].max(-1, keepdims=True)), 1.0)
    # stationary greedy-on-Q*_0 is optimal here when Q*_t's argmax does not change with t on the
    # states the policy visits; check the weaker, always-true bound instead
    assert objective(mdp, greedy) <= Jstar + 1e-12
    assert occupancy(mdp, pi)[0, mdp.roots].sum() == pytest.approx(1.0)


def bandit(p0: float = 0.5) -> tuple:
    """One state, two arms: arm 0 reaches a goal (reward 1), arm 1 a dead end (0); H = 1."""
    mdp = generate(MDPConfig(depth=1, horizon=1, moves=2, distractors=0, invalid=0, trap=0.0, recurrence=0.0,
                             goal_frac=0.0, tasks=1), seed=0)
    root = int(mdp.roots[0])
    leaves = mdp.succ[root, np.arange(2), mdp.prob[root].argmax(-1)]  # each arm's (sure) target
    mdp.arrive_reward[:] = 0.0
    mdp.goal[:] = False
    good = int(np.argmin(leaves))
    mdp.arrive_reward[leaves[good]] = 1.0
    mdp.goal[leaves[good]] = True
    mdp.__dict__.pop("reward", None)  # the cached expected reward
    logits = np.zeros((mdp.n_states, mdp.n_actions))
    logits[root, good] = np.log(p0 / (1 - p0))
    return mdp, TabularPolicy(logits), good


@pytest.mark.parametrize("G", [2, 4])
@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo"])
def test_bandit_cosine_closed_form(G, name):
    """Two arms, uniform policy, one group of G: the advantages are a positive multiple of the
    centred rewards, so g_hat = c * n0 * n1 / G * (e_good - e_bad), parallel to the true
    gradient (0.25, -0.25) whenever both arms were drawn (cosine 1) and 0 when all G rollouts drew
    one arm (probability 2 * 2^-G). E[cos] = 1 - 2^(1-G): 0.5 for G=2, 0.875 for G=4. The
    advantage correlation with A^pi = (+0.5, -0.5) is 1 or 0 on the same events."""
    mdp, pol, good = bandit()
    tr = truth(mdp, pol)
    root = int(mdp.roots[0])
    np.testing.assert_allclose(tr.grad[root, [good, 1 - good]], [0.25, -0.25])
    rng = np.random.default_rng(G)
    cos, corr = [], []
    for _ in range(400):
        smp = sample_batch(mdp, pol.probs, 1, G, rng)
        adv = compute(name, smp.records).step_advantages
        cos.append(cosine(gradient_estimate(pol, smp, adv), tr.grad))
        corr.append(pearson(adv, tr.A[smp.t, smp.s, smp.a]))
    expected = 1 - 2.0 ** (1 - G)
    assert set(np.round(cos, 12)) <= {0.0, 1.0}
    se = np.sqrt(expected * (1 - expected) / len(cos))
    assert abs(np.mean(cos) - expected) < 4 * se
    np.testing.assert_allclose(corr, cos, atol=1e-9)


def test_mean_direction_cosine_removes_the_noise():
    # hand-worked: g1 = (1, 0), g2 = (0, 1), true = (1, 1). sum = (1, 1), |sum|^2 = 2,
    # sum |g|^2 = 2 -> |E g|^2 estimate (2 - 2) / 2 = 0: no detectable mean direction (NaN)
    assert np.isnan(mean_direction_cosine([np.array([1.0, 0.0]), np.array([0.0, 1.0])], np.array([1.0, 1.0])))
    # g = (2, 0), (0, 2), (2, 2): sum (4, 4), |sum|^2 = 32, sum |g|^2 = 4 + 4 + 8 = 16,
    # |E g|^2 = (32 - 16) / 6 = 8/3; with true = (1, 0): mean.true = 4/3 -> cos = (4/3) / sqrt(8/3)
    # = sqrt(2/3); with true = (1, 1): (8/3) / sqrt(2) / sqrt(8/3) = sqrt(4/3) > 1, clipped to 1
    gs = [np.array([2.0, 0.0]), np.array([0.0, 2.0]), np.array([2.0, 2.0])]
    assert mean_direction_cosine(gs, np.array([1.0, 0.0])) == pytest.approx(np.sqrt(2 / 3))
    assert mean_direction_cosine(gs, np.array([1.0, 1.0])) == 1.0
    # an unbiased estimator with heavy noise: the plain mean's cosine stays low, this one finds 1
    rng = np.random.default_rng(0)
    true = np.array([1.0, 0.0, 0.0, 0.0])
    draws = [true + 3.0 * rng.standard_normal(4) for _ in range(400)]
    assert cosine(np.mean(draws, axis=0), true) < 0.95
    assert mean_direction_cosine(draws, true) == pytest.approx(1.0, abs=0.05)


def test_values_discount():
    # H = 1 bandit: Q = the arm's reward whatever gamma; V = pi . r
    mdp, pol, good = bandit(0.8)
    Q, V = values(mdp, pol.probs, 0.5)
    root = int(mdp.roots[0])
    assert Q[0, root, good] == 1.0 and Q[0, root, 1 - good] == 0.0
    assert V[0, root] == pytest.approx(0.8)
