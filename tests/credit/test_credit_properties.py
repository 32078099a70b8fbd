"""Identities and hypothesis property tests: reductions between estimators, permutation
equivariance, zero advantages for equal returns, no NaN/inf for degenerate inputs, and the
greedy clustering against a direct implementation of BiPACE Algorithm 1."""

from __future__ import annotations

import math

import numpy as np
import pytest
from credit_helpers import reference_algorithm1
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentrl.credit import available, compute, estimators
from agentrl.credit.batch import Batch
from agentrl.credit.cluster import TOL, auto_eps, dense_gram, greedy_cosine_partition, onehot_gram

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

OBS = ["", "kitchen", "kitchen ", "hall", "a cabinet 1", "a cabinet 2"]
ACTS = ["", "go", "<action>go</action>", "take", "<action></action>", "look"]


@st.composite
def batches(draw, equal_returns=False):
    """Random small batches: 1-3 groups of 1-4 rollouts of 1-5 steps, repeated observations,
    empty strings, 0/1 (or constant) rewards, fingerprints (sometimes all-zero) and token ids."""
    recs = []
    const = draw(st.sampled_from([0.0, 1.0, 0.3]))
    for g in range(draw(st.integers(1, 3))):
        for r in range(draw(st.integers(1, 4))):
            T = draw(st.integers(1, 5))
            for t in range(T):
                o = draw(st.integers(0, len(OBS) - 1))
                fp = [0.0, 0.0, 0.0] if o == 0 else [1.0, float(o % 3), float(o % 2)]
                recs.append(
                    {
                        "group_id": f"g{g}",
                        "traj_id": f"g{g}-r{r}",
                        "t": t,
                        "obs": OBS[o],
                        "action": draw(st.sampled_from(ACTS)),
                        "reward": const
                        if equal_returns
                        else float(draw(st.sampled_from([0.0, 0.0, 1.0, 0.5]))),
                        "done": t == T - 1,
                        "fingerprint": fp,
                        "action_token_ids": draw(st.lists(st.integers(0, 3), max_size=10)),
                        "state_sig": OBS[o][:3],
                        "action_sig": "s",
                    }
                )
    return recs


CASES = [(n, {}) for n in available()] + [
    ("bigpo", {"embedder": "hash_ngram", "eps": 0.3}),
    ("bigpo", {"embedder": "obs_hash", "eps": 1.5}),
    ("bipace_q", {"eps": "auto"}),
    ("salt", {"match": "embedding", "sim_threshold": 0.9}),
    ("rtmc", {"signature": "history", "std_norm": True}),
    ("hgpo_pairs", {"K": 3, "alpha": 2.0, "norm": "mean"}),
    ("hgpo", {"K": 3, "alpha": 2.0, "norm": "mean", "base_group": True, "episode_stats": "rollouts"}),
    ("gigpo", {"episode_stats": "steps", "episode_singleton": "raw", "penalty": "step"}),
]


@SETTINGS
@given(batches(), st.randoms(use_true_random=False))
def test_no_nan_and_permutation_equivariance(recs, rnd):
    # Shuffle whole trajectories and the records inside the batch: every output is the same
    # per record (bit for bit), and nothing is NaN/inf.
    perm = list(range(len(recs)))
    rnd.shuffle(perm)
    shuffled = [recs[i] for i in perm]
    for name, kw in CASES:
        a = compute(name, recs, **kw)
        b = compute(name, shuffled, **kw)
        assert np.isfinite(a.step_advantages).all(), name
        assert np.array_equal(a.step_advantages[perm], b.step_advantages), (name, kw)
        assert a.diagnostics == b.diagnostics, (name, kw)
        assert all(math.isfinite(v) for v in a.diagnostics.values()), name


@SETTINGS
@given(batches(equal_returns=True))
def test_equal_returns_give_zero_advantages(recs):
    # one-step episodes, every reward equal: all returns tie, so every estimator gives exactly 0
    flat = [dict(r, t=0, done=True, traj_id=f"{r['traj_id']}-{r['t']}") for r in recs]
    for name in available():
        kw = {"n_prior": 0.0} if name == "rtmc" else {}
        res = compute(name, flat, **kw)
        assert np.all(res.step_advantages == 0.0), name


def test_equal_returns_multistep_zero():
    # three rollouts, terminal reward 1 each, gamma 1: every R_t and every R(tau) is 1 -> exactly 0
    recs = []
    for r in range(3):
        for t in range(4):
            recs.append(
                dict(
                    group_id="g",
                    traj_id=f"r{r}",
                    t=t,
                    obs=f"o{t % 2}",
                    action=f"a{(t + r) % 3}",
                    reward=float(t == 3),
                    done=t == 3,
                    fingerprint=[1.0, t],
                    action_token_ids=[t],
                )
            )
    for name in available():
        kw = {"n_prior": 0.0} if name == "rtmc" else {}
        res = compute(name, recs, gamma=1.0, **kw)
        if name == "graphgpo":
            # credits shortest-path progress, not returns: from o1 the step to SUCCESS (d 0) beats
            # the detour back to o0 (d 2) although every rollout wins; its episode term is 0
            assert np.all(res.step_advantages - res.step_term == 0.0) and np.any(res.step_term != 0)
            continue
        assert np.all(res.step_advantages == 0.0), name


@SETTINGS
@given(batches())
def test_bigpo_obs_hash_eps0_equals_gigpo(recs):
    # BiPACE Sec. 3.4 / App. O: one-hot observation hash with eps = 0 recovers GiGPO exactly; run
    # the greedy clustering itself (shortcut off), for both norms.
    estimators.ONEHOT_SHORTCUT = False
    try:
        for norm in ("mean_std", "mean"):
            g = compute("gigpo", recs, norm=norm)
            b = compute("bigpo", recs, embedder="obs_hash", eps=0.0, norm=norm)
            assert np.array_equal(g.step_advantages, b.step_advantages)
    finally:
        estimators.ONEHOT_SHORTCUT = True


@SETTINGS
@given(batches())
def test_hgpo_pairs_k0_equals_gigpo(recs):
    # with only level 0 the hierarchy is GiGPO's observation grouping (weights cancel)
    assert np.array_equal(compute("hgpo_pairs", recs, K=0).step_advantages, compute("gigpo", recs).step_advantages)


@SETTINGS
@given(st.lists(st.sampled_from([0.0, 1.0, 0.5]), min_size=1, max_size=6))
def test_one_state_key_reduces_to_trajectory_level(final):
    # Every step in one state key, equal-length trajectories, gamma 1, terminal-style returns:
    # GiGPO's step term (norm='mean') is R(tau) - mean, i.e. GRPO with scale='none'; RTMC with one
    # state signature and the rollout id as action signature gives Q - V = R(tau) - mean too.
    recs = []
    for i, f in enumerate(final):
        for t, r in enumerate([0.0, 0.0, f]):  # terminal reward: R_t = R(tau) at every step
            recs.append(
                dict(
                    group_id="g",
                    traj_id=f"r{i}",
                    t=t,
                    obs="same",
                    action=f"a{i}{t}",
                    reward=r,
                    done=t == 2,
                    state_sig="root",
                    action_sig=f"r{i}",
                )
            )
    grpo = compute("grpo", recs, scale="none").step_advantages
    gig = compute("gigpo", recs, gamma=1.0, norm="mean")
    np.testing.assert_allclose(gig.step_term, grpo, atol=1e-12)
    rt = compute("rtmc", recs, gamma=1.0, n_prior=0, signature="env")
    np.testing.assert_allclose(rt.step_advantages, grpo, atol=1e-12)


# ----------------------------------------------------------------------------- clustering
@SETTINGS
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=4),
    st.integers(0, 2**31 - 1),
    st.sampled_from([0.0, 0.02, 0.1, 0.3, 0.8]),
)
def test_greedy_clustering_matches_algorithm1(group_sizes, seed, eps):
    rng = np.random.default_rng(seed)
    recs, X = [], []
    for g, n in enumerate(group_sizes):
        centers = rng.standard_normal((3, 6))
        for i in range(n):
            x = centers[rng.integers(0, 3)] + 0.3 * rng.standard_normal(6)
            X.append(x / np.linalg.norm(x))
            recs.append(
                dict(
                    group_id=f"g{g}", traj_id=f"g{g}-{i:03d}", t=0, obs="o", action="a", reward=0.0, done=True
                )
            )
    X = np.array(X)
    batch = Batch(recs)  # canonical order == input order here (ids sorted)
    labels = greedy_cosine_partition(batch, dense_gram(X.astype(np.float32)), eps)
    start = 0
    for n in group_sizes:
        ref, margin = reference_algorithm1(X[start : start + n], eps)
        assume(margin > 1e-4)  # float32 vs float64 may disagree at an exact boundary
        got = labels[start : start + n]
        assert np.array_equal(got - got.min(), ref), (got, ref)
        start += n


@SETTINGS
@given(st.lists(st.integers(0, 5), min_size=1, max_size=60), st.sampled_from([0.0, 0.1, 0.5, 0.99]))
def test_greedy_on_onehot_is_the_hash_partition(ids, eps):
    recs = [
        dict(group_id="g", traj_id=f"r{i:03d}", t=0, obs=str(o), action="a", reward=0.0, done=True)
        for i, o in enumerate(ids)
    ]
    batch = Batch(recs)
    lab = greedy_cosine_partition(batch, onehot_gram(batch.obs_id), eps)
    # same label <=> same id
    ids = np.array(ids)
    assert np.array_equal(lab[:, None] == lab[None, :], ids[:, None] == ids[None, :])


def test_auto_eps_binary_search():
    # 8 orthogonal directions x 5 noisy copies: any eps in [0.02, 0.4] gives 8 clusters of 5, so the
    # first probe (0.02 + 0.40) / 2 = 0.21 already has median 5 in [4, 8]
    rng = np.random.default_rng(0)
    X, recs = [], []
    for i in range(40):
        v = np.eye(8)[i % 8] + 0.01 * rng.standard_normal(8)
        X.append(v)
        recs.append(
            dict(
                group_id="g",
                traj_id=f"r{i:02d}",
                t=0,
                obs="o",
                action="a",
                reward=0.0,
                done=True,
                fingerprint=v.tolist(),
            )
        )
    eps, lab = auto_eps(Batch(recs), dense_gram(np.array(X, dtype=np.float32)))
    assert eps == pytest.approx(0.21) and np.median(np.bincount(lab)) == 5
    res = compute("bigpo", recs, eps="auto")
    assert res.diagnostics["eps"] == pytest.approx(0.21) and res.kwargs["eps"] == pytest.approx(0.21)
    # all-orthogonal records: median stays 1 < 4, every probe moves lo up:
    # 0.21, 0.305, 0.3525, 0.37625, 0.388125, 0.3940625 (six probes)
    recs1 = [dict(r, fingerprint=np.eye(40)[i].tolist()) for i, r in enumerate(recs)]
    assert compute("bigpo", recs1, eps="auto").diagnostics["eps"] == pytest.approx(0.3940625)


def test_hash_ngram_similarity():
    from agentrl.credit.cluster import HashNgram

    texts = ["you see a cabinet 1 and a drawer 2", "you see a cabinet 1 and a drawer 3", "xyzzy", "", ""]
    X = HashNgram(texts).dense(np.arange(5))
    G = X @ X.T
    assert np.allclose(np.diag(G), 1.0, atol=1e-6)  # the empty string still has boundary n-grams
    assert G[3, 4] == pytest.approx(1.0)
    assert G[0, 1] > 0.8 and G[0, 2] < 0.3
    assert 0.0 <= TOL < 1e-3


def test_bag_gram_is_cosine_of_summed_unit_pieces():
    from agentrl.credit.cluster import HashNgram, bag_gram

    texts = ["go to cabinet 1", "you see a mug", "take mug", "you see nothing", "<end> r=1.0"]
    pieces = np.array([[0, 1, 2, 3], [0, 1, 2, 4], [-1, 1, 2, 1], [2, 2, -1, -1]])
    U = HashNgram(texts).dense(np.arange(len(texts)))  # unit n-gram vector per piece
    E = np.stack([sum(U[j] for j in row if j >= 0) for row in pieces])
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    G = bag_gram(pieces, texts)(np.arange(4))
    assert np.allclose(G, E @ E.T, atol=1e-5)
    assert np.allclose(np.diag(G), 1.0, atol=1e-5)


def _common_direction_records():
    """Two prompt groups whose fingerprints share one large direction (100 e0, as a small model's
    hidden states at one token do) and differ by a unit offset per state: group g0 visits states
    A, A, B, C, B, A (offsets e1, e2, e3), group g1 one state five times."""
    e = np.eye(4)
    offsets = {"A": e[1], "B": e[2], "C": e[3]}
    recs = []
    for i, s in enumerate("AABCBA"):
        recs.append(dict(group_id="g0", traj_id=f"g0-{i}", t=0, obs=s, action="a", reward=float(i % 2), done=True,
                         fingerprint=(100 * e[0] + offsets[s]).tolist()))
    for i in range(5):
        recs.append(dict(group_id="g1", traj_id=f"g1-{i}", t=0, obs="D", action="a", reward=float(i % 2), done=True,
                         fingerprint=(100 * e[0] + 0.5 * e[2]).tolist()))
    return recs


def test_centred_fingerprints_separate_states_sharing_a_direction():
    recs = _common_direction_records()
    batch = Batch(recs)
    F = np.asarray(batch.field("fingerprint"), dtype=np.float32)
    # raw: A and B are 1 - 10000/10001 ~ 1e-4 apart, so eps 0.05 puts all of g0 in one cluster
    raw = greedy_cosine_partition(batch, dense_gram(F), 0.05)
    assert len(set(raw[:6])) == 1
    # centred in g0 (mean 100 e0 + (3 e1 + 2 e2 + e3) / 6): A, B, C point apart (cosines < 0),
    # each state's copies stay together; g1's one repeated state stays one cluster, not five
    cen = greedy_cosine_partition(batch, dense_gram(F, center=True), 0.05)
    g0 = cen[:6] - cen[:6].min()
    assert g0.tolist() == [0, 0, 1, 2, 1, 0]
    assert len(set(cen[6:])) == 1 and cen[6] not in set(cen[:6])
    # through the estimator: the kwarg reaches the partition
    assert compute("bipace_q", recs, eps=0.05).diagnostics["n_clusters"] == 2
    assert compute("bipace_q", recs, eps=0.05, center=True).diagnostics["n_clusters"] == 4
    with pytest.raises(ValueError, match="actor_hidden fingerprints only"):  # not silently ignored
        compute("bigpo", recs, embedder="hash_ngram", center=True)
