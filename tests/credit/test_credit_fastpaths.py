"""Fast paths of the credit library against direct reference implementations."""

from __future__ import annotations

import numpy as np
import pytest
from credit_helpers import reference_algorithm1

from agentrl.credit import cluster, parts
from agentrl.credit.batch import Batch, _canonical_order


def _recs(n_groups, sizes, **extra):
    recs = []
    for g in range(n_groups):
        for i in range(sizes[g]):
            recs.append(
                dict(group_id=f"g{g:02d}", traj_id=f"g{g:02d}-{i:03d}", t=0, obs="o", action="a", reward=0.0, done=True)
            )
    return recs


def test_first_n_key_matches_tuple_partition():
    # ragged token lists (shorter than N, empty, a prefix of another) and numpy arrays
    toks = [[1, 2, 3], [1, 2, 3, 4], [1, 2], [], [1, 2, 3, 9], np.array([1, 2]), [5], (1, 2, 3)]
    recs = _recs(1, [len(toks)])
    for r, t in zip(recs, toks, strict=True):
        r["action_token_ids"] = t
    b = Batch(recs)  # canonical order == input order (traj ids sorted)
    for n in (1, 2, 3, 4):
        got = parts.action_key_first_n(b, n)
        want = [tuple(int(x) for x in t[:n]) for t in toks]  # the key is the tuple of the first n ids
        assert np.array_equal(got[:, None] == got[None, :], np.array([[a == c for c in want] for a in want]))
        assert sorted(set(got.tolist())) == list(range(len(set(want))))  # dense ids 0..U-1


def test_canonical_order_equals_lexsort():
    rng = np.random.default_rng(0)
    for _ in range(20):
        g, tr, t = (rng.integers(0, 4, 30) for _ in range(3))
        ref = np.lexsort((t, tr, g))
        assert np.array_equal(_canonical_order(g, tr, t), ref)
        assert np.array_equal(_canonical_order(g[ref], tr[ref], t[ref]), np.arange(30))


@pytest.mark.parametrize("eps", [0.0, 0.05, 0.15, 0.4])
def test_chunked_partition_matches_algorithm1(monkeypatch, eps):
    # many groups of very different sizes and a tiny chunk budget: several lock-step chunks,
    # padded groups inside each chunk, and -2 rows for clusters some groups never seed
    monkeypatch.setattr(cluster, "_CHUNK_ELEMS", 3000)
    rng = np.random.default_rng(1)
    sizes = [int(s) for s in rng.integers(1, 60, 12)]
    recs = _recs(len(sizes), sizes)
    X = []
    for s in sizes:
        centers = rng.standard_normal((4, 16))
        for _ in range(s):
            x = centers[rng.integers(0, 4)] + 0.35 * rng.standard_normal(16)
            X.append(x / np.linalg.norm(x))
    X = np.array(X)
    lab = cluster.greedy_cosine_partition(Batch(recs), cluster.dense_gram(X.astype(np.float32)), eps)
    start = 0
    for s in sizes:
        ref, margin = reference_algorithm1(X[start : start + s], eps)
        got = lab[start : start + s]
        if margin > 1e-4:  # decisions at the exact boundary may differ in float32
            assert np.array_equal(got - got.min(), ref)
        start += s
    assert len(np.unique(lab)) == lab.max() + 1  # global ids are dense
