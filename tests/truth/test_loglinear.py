"""The log-linear policy: its features by hand, its exact gradient against finite differences of
J and against the tabular gradient, its sampler against its observation model, and a per-record
change of advantage that moves its gradient but not the tabular one."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl_envs.mdp import MDPConfig, generate

from agentrl.truth.exact import TabularPolicy, objective, truth
from agentrl.truth.loglinear import Features, LogLinearPolicy, build_features, make_policy, text_features
from agentrl.truth.sample import sample_batch

NOISY = MDPConfig(depth=2, horizon=4, moves=2, distractors=1, invalid=1, recurrence=0.5, trap=0.3, goal_frac=0.5,
                  step_reward=0.3, slip=0.25, alias=0.5, noise_words=0.4, tasks=2)
"""Every kind of dynamics, plus aliased texts and noise sentences (7 observation variants per state)."""


def test_text_features_by_hand():
    f = text_features("You are in the red hall.", "take the key")
    # observation words: are, hall, in, red, the, you (6); action words: key, take, the (3):
    # 1 action text + 3 action words + 6 x 3 pairs = 22 names
    assert len(f) == 22 and f[:4] == ["a=take the key", "w=key", "w=take", "w=the"]
    assert "x=hall|key" in f and "x=the|the" in f and "x=red|take" in f
    mdp = generate(NOISY, 0)
    phi = build_features(mdp)
    # every row has unit norm: k entries of 1 / sqrt(k)
    norms = np.bincount(phi.rows, weights=phi.vals ** 2)
    np.testing.assert_allclose(norms[norms > 0], 1.0)
    # the matrix holds text_features of each (state, observation variant, action) row
    _, n_obs, A = phi.shape
    for s in np.flatnonzero(~mdp.terminal)[:3]:
        for o in (0, 6):
            r = (int(s) * n_obs + o) * A + 1
            got = sorted(phi.names[c] for c in phi.cols[phi.rows == r])
            assert got == text_features(mdp.variant_text(int(s), o), mdp.action_text[s][1])


def test_score_by_hand():
    """One state, two observation variants, two actions, two features: rows (o0, a0) = f0,
    (o0, a1) = f1, (o1, a0) = f0 + f1, (o1, a1) = f1. theta = (ln 3, ln 2): logits (ln 3, ln 2)
    -> pi(.|o0) = (3/5, 2/5); logits (ln 6, ln 2) -> pi(.|o1) = (3/4, 1/4). The record (o1, a1)
    with weight 1: w[o1] = onehot(a1) - pi(.|o1) = (-3/4, 3/4); Phi^T w: f0 = -3/4,
    f1 = -3/4 + 3/4 = 0."""
    phi = Features(np.array([0, 1, 2, 2, 3]), np.array([0, 1, 0, 1, 1]), np.ones(5), (1, 2, 2), ["f0", "f1"])
    pol = LogLinearPolicy(phi, np.log([3.0, 2.0]), np.array([0.5, 0.5]))
    np.testing.assert_allclose(pol.act_probs[0], [[0.6, 0.4], [0.75, 0.25]])
    np.testing.assert_allclose(pol.probs[0], [0.675, 0.325])  # the mixture over the two variants
    np.testing.assert_allclose(pol.score(np.array([0]), np.array([1]), np.array([1]), np.ones(1)), [-0.75, 0.0],
                               atol=1e-15)


def test_identity_features_give_the_tabular_gradient():
    """With one feature per (state, action) and no observation noise, the log-linear policy is the
    tabular one: same J, same gradient (the tabular one is checked against finite differences in
    test_exact.py)."""
    mdp = generate(MDPConfig(depth=2, horizon=4, moves=2, slip=0.25, step_reward=0.3, tasks=2), seed=3)
    tab = TabularPolicy.random(mdp, seed=5, scale=0.8)
    S, A = tab.logits.shape
    eye = Features(np.arange(S * A), np.arange(S * A), np.ones(S * A), (S, 1, A), [str(i) for i in range(S * A)])
    ll = LogLinearPolicy(eye, tab.logits.ravel().copy(), np.ones(1))
    np.testing.assert_allclose(ll.probs, tab.probs, atol=1e-15)
    np.testing.assert_allclose(truth(mdp, ll).grad, truth(mdp, tab).grad.ravel(), atol=1e-15)


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_exact_gradient_matches_finite_differences(gamma):
    mdp = generate(NOISY, seed=3)
    pol = make_policy("loglinear", mdp, seed=5, scale=0.8)
    assert mdp.n_obs_variants == 7 and pol.features.dim > 50
    tr = truth(mdp, pol, gamma)
    h = 1e-6
    fd = np.zeros_like(pol.theta)
    for j in range(pol.features.dim):
        up, dn = (LogLinearPolicy(pol.features, pol.theta.copy(), pol.obs_probs) for _ in range(2))
        up.theta[j] += h
        dn.theta[j] -= h
        fd[j] = (objective(mdp, up, gamma) - objective(mdp, dn, gamma)) / (2 * h)
    assert np.abs(fd).max() > 1e-3  # a gradient worth checking
    np.testing.assert_allclose(tr.grad, fd, atol=1e-7)


def test_sampled_observations_follow_the_model_and_the_estimate_is_unbiased():
    """The true advantages A^pi as weights: the batch gradient's mean is dJ/dtheta (the policy
    gradient theorem), so the sampler's observation variants must follow obs_variant_probs."""
    mdp = generate(NOISY, seed=3)
    pol = make_policy("loglinear", mdp, seed=5, scale=0.8)
    tr = truth(mdp, pol)
    rng = np.random.default_rng(0)
    gs, variants = [], []
    for _ in range(300):
        smp = sample_batch(mdp, pol.act_probs, 4, 8, rng, fingerprints=False)
        assert all(r["obs"] == mdp.variant_text(int(s), int(o)) for r, s, o in zip(smp.records, smp.s, smp.o,
                                                                                       strict=True))
        gs.append(pol.score_sample(smp, tr.A[smp.t, smp.s, smp.a]) / smp.n_rollouts)
        variants.append(smp.o)
    o = np.concatenate(variants)
    # noise_words 0.4: variant 0 (no noise) 0.6 of the visits, each of the 6 sentences 0.4 / 6
    freq = np.bincount(o, minlength=7) / len(o)
    assert abs(freq[0] - 0.6) < 4 * np.sqrt(0.24 / len(o))
    g = np.array(gs)
    se = g.std(0, ddof=1) / np.sqrt(len(g))
    z = (g.mean(0) - tr.grad) / np.maximum(se, 1e-12)
    assert np.abs(z).max() < 5.0  # every coordinate within 5 s.e. (a few hundred coordinates)
    assert np.abs(tr.grad).max() > 3 * se.max()  # and the gradient stands out of that noise


def test_a_per_record_change_moves_only_the_shared_gradient():
    """Two visits of one state taking one action, one without and one with a noise sentence.
    Advantages (1, 0) and (0.5, 0.5) have the same sum, so the tabular gradient is the same; the
    log-linear one differs by 0.5 (psi(o=0) - psi(o=1)), psi = dlog pi/dtheta, nonzero because
    the noise sentence adds features."""
    mdp = generate(NOISY, seed=3)
    s = int(np.flatnonzero(~mdp.terminal)[0])
    ss, oo, aa = np.array([s, s]), np.array([0, 1]), np.array([0, 0])
    tab = TabularPolicy.random(mdp, 1)
    np.testing.assert_array_equal(tab.score(ss, aa, np.array([1.0, 0.0])), tab.score(ss, aa, np.array([0.5, 0.5])))
    ll = make_policy("loglinear", mdp, 1)
    d = ll.score(ss, oo, aa, np.array([1.0, 0.0])) - ll.score(ss, oo, aa, np.array([0.5, 0.5]))
    half = 0.5 * (ll.score(ss[:1], oo[:1], aa[:1], np.ones(1)) - ll.score(ss[1:], oo[1:], aa[1:], np.ones(1)))
    np.testing.assert_allclose(d, half, atol=1e-12)
    assert np.abs(d).max() > 0.01


def test_unknown_policy_is_one_line():
    with pytest.raises(ValueError, match="^unknown policy 'mlp'; valid: tabular, loglinear$"):
        make_policy("mlp", generate(NOISY, 0), 0)
