"""BiGPO state partition: greedy online cosine clustering (BiPACE Eq. 3, App. D Algorithm 1).

Algorithm 1 is sequential inside a prompt group; it runs here on each group's Gram matrix
(P[j, k] = x_j . c_k updated in O(N_p) per record, independent of the fingerprint dimension) with
all groups of a chunk in lock-step, which gives the same partition faster. Admission is
``1 - sim <= eps + TOL`` (TOL for float32 round-off). The update formulas: README.md, "BiGPO
partition".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .batch import Batch

TOL = 1e-5
"""Slack on the admission test for float32 round-off (cosine distance units)."""

# Elements of each padded (groups, N, N) float32 work array of one lock-step chunk. Kept under
# glibc's largest mmap threshold (32 MiB) so the buffers are reused instead of page-faulted afresh.
_CHUNK_ELEMS = 6 * 2**20


# ---------------------------------------------------------------------------- Gram builders
def _syrk(X: np.ndarray) -> np.ndarray:
    """Upper triangle of X X^T (float32); the strict lower triangle is left as zeros."""
    from scipy.linalg.blas import ssyrk

    if X.shape[0] == 0:
        return np.zeros((0, 0), np.float32)
    return ssyrk(1.0, X)


GramFn = Callable[[np.ndarray], np.ndarray]


def onehot_gram(ids: np.ndarray) -> GramFn:
    """Gram of one-hot vectors of ``ids`` (GiGPO's observation hash as a fingerprint)."""

    def gram(pos: np.ndarray) -> np.ndarray:
        o = ids[pos]
        return (o[:, None] == o[None, :]).astype(np.float32)

    return gram


class _DenseGram:
    """Gram of the L2-normalized fingerprints (canonical order); zero vectors stay zero. With
    ``center`` each call's rows (one prompt group) have their mean subtracted first.

    Called with the positions of one group it returns that group's (n, n) Gram (upper triangle
    valid). (A batched GEMM over a whole zero-padded chunk was measured no faster than one
    syrk per group, so groups are done one at a time.)
    """

    def __init__(self, F: np.ndarray | list, center: bool = False):
        self.F = F
        self.center = center
        first = F[0] if len(F) else None
        self.dim = int(np.size(first)) if first is not None else 0
        """Fingerprint length (of the first record; a mismatch raises in :meth:`_rows`)."""

    def _rows(self, pos: np.ndarray) -> np.ndarray:
        try:
            if isinstance(self.F, np.ndarray):
                X = np.asarray(self.F[pos], dtype=np.float32)
            else:
                X = np.array(self.F[pos[0] : pos[-1] + 1], dtype=np.float32)  # one contiguous run
        except ValueError:
            X = None
        if X is None or X.ndim != 2 or X.shape[1] != self.dim:
            raise ValueError("fingerprints must all be flat float vectors of the same length")
        return X

    @staticmethod
    def _normalize(X: np.ndarray) -> np.ndarray:
        norm = np.sqrt(np.einsum("...j,...j->...", X, X))
        # a NaN or inf anywhere makes its row's norm non-finite (so does float32 overflow of a
        # finite row, hence the exact check only then)
        if not np.isfinite(norm).all() and not np.isfinite(X).all():
            raise ValueError("fingerprints hold NaN or inf")
        X *= np.divide(1.0, norm, out=np.zeros_like(norm), where=norm > 0)[..., None]
        return X

    @staticmethod
    def _centred(X: np.ndarray) -> np.ndarray:
        mean = X.mean(0)
        C = X - mean
        # rows that all equal their mean would become zero vectors, i.e. cosine 0 to everything:
        # a group of one repeated state would split into singletons. Such a group keeps its raw rows
        # (all identical, one cluster at any eps).
        scale = float(np.sqrt(mean @ mean))
        if float(np.abs(C).max(initial=0.0)) <= 1e-6 * max(scale, 1e-30):
            return X
        return C

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        X = self._rows(pos)
        if self.center:
            X = self._centred(X)
        # only the upper triangle (j >= i) is ever read: BLAS syrk does half the GEMM's work
        return _syrk(self._normalize(X))


def dense_gram(F: np.ndarray | list, center: bool = False) -> GramFn:
    """Gram of the L2-normalized fingerprints (canonical order); zero vectors stay zero.

    ``F`` is an (n, d) array or a list of per-record vectors; a list is stacked one group at a
    time (no batch-sized copy). ``center``: subtract the mean fingerprint of the rows asked for
    (the clustering asks one prompt group at a time) before normalizing. Hidden states of a
    small model at one token position share a large common direction, which puts every state of
    a game within a tiny cosine radius of every other (SmolLM2-135M at layer -12: one cluster per
    game at the card's eps 0.05, docs/results/alfworld.md); centring leaves the directions in
    which the group's states differ.
    """
    return _DenseGram(F, center)


class HashNgram:
    """BiPACE's HashNgram fingerprint (Sec. 3.4, App. K): character n-gram feature hash.

    n-grams of the UTF-8 bytes, padded with n-1 boundary marks on each side (so the empty string
    still has features), hashed into ``dim`` buckets (a power of two) by a multiplicative hash;
    the count vector is L2-normalized. The n-gram bucket lists of all texts are computed once,
    vectorized; :meth:`dense` builds the count rows of any subset of texts with one bincount.
    """

    def __init__(self, texts: list[str], n: int = 3, dim: int = 1024):
        if not (1 <= n <= 8):
            raise ValueError(f"hash_ngram n must be in 1..8, got {n}")
        if dim < 2 or dim & (dim - 1):
            raise ValueError(f"hash_ngram dim must be a power of two >= 2, got {dim}")
        self.dim = dim
        self.n = n
        pad_l, pad_r = "\x02" * (n - 1), "\x03" * (n - 1)
        cols, counts = [], []
        block = 4096  # texts per block: keeps the temporaries small (reused, not page-faulted)
        for b0 in range(0, len(texts), block):
            enc = [(pad_l + s + pad_r).encode("utf-8", "replace") for s in texts[b0 : b0 + block]]
            c, k = self._hash_block(enc)
            cols.append(c)
            counts.append(k)
        self.count = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        self.col = np.concatenate(cols) if cols else np.zeros(0, np.int64)
        self.start = np.concatenate([[0], np.cumsum(self.count)[:-1]]).astype(np.int64)

    def _hash_block(self, enc: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        n = self.n
        lens = np.fromiter(map(len, enc), dtype=np.int64, count=len(enc))
        wide = np.uint64 if n > 4 else np.uint32  # n bytes per n-gram code
        buf = np.frombuffer(b"".join(enc), dtype=np.uint8).astype(wide)
        m = max(len(buf) - n + 1, 0)
        code = buf[:m].copy()
        for j in range(1, n):
            code |= buf[j : j + m] << wide(8 * j)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        count = np.maximum(lens - n + 1, 0)  # n-grams per text (padding makes it >= n-1)
        keep = np.ones(m, dtype=bool)  # drop n-grams that straddle two texts
        for j in range(1, n):
            cut = starts + lens - j
            keep[cut[(cut >= 0) & (cut < m)]] = False
        bits = int(self.dim).bit_length() - 1
        if wide is np.uint32:  # Knuth's multiplicative hash, top bits
            col = (code[keep] * np.uint32(2654435761)) >> np.uint32(32 - bits)
        else:
            col = (code[keep] * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits)
        return col.astype(np.int32), count  # bucket ids < dim <= 2**20: int32 halves the memory

    def dense(self, ids: np.ndarray, normalize: bool = True) -> np.ndarray:
        """float32 n-gram count rows of texts ``ids``, L2-normalized unless ``normalize=False``."""
        cnt = self.count[ids]
        tot = int(cnt.sum())
        row = np.repeat(np.arange(len(ids), dtype=np.int64), cnt)
        # positions of each text's n-grams: start[id] + 0..count-1
        off = np.arange(tot, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        cols = self.col[np.repeat(self.start[ids], cnt) + off]
        X = np.bincount(row * self.dim + cols, minlength=len(ids) * self.dim).astype(np.float32)
        X = X.reshape(len(ids), self.dim)
        if not normalize:
            return X
        norm = np.sqrt(np.einsum("ij,ij->i", X, X))
        return X * (1.0 / np.maximum(norm, 1e-30))[:, None]


def text_gram(text_ids: np.ndarray, texts: list[str], n: int = 3, dim: int = 1024) -> GramFn:
    """Gram of HashNgram fingerprints; rows are deduplicated by text id before the GEMM."""
    H = HashNgram(texts, n=n, dim=dim)

    def gram(pos: np.ndarray) -> np.ndarray:
        u, inv = np.unique(text_ids[pos], return_inverse=True)
        Xu = H.dense(u)
        Gu = Xu @ Xu.T
        return Gu[inv[:, None], inv[None, :]]

    return gram


def _to_cosine(G: np.ndarray) -> np.ndarray:
    """Scale a Gram of raw vectors, in place, into the Gram of their unit vectors (a zero
    vector's row and column stay zero)."""
    d = np.sqrt(np.diagonal(G))
    s = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
    G *= s[:, None] * s[None, :]
    return G


def bag_gram(pieces: np.ndarray, texts: list[str], n: int = 3, dim: int = 1024) -> GramFn:
    """Gram of texts assembled from pieces: record r's vector is the sum of the unit HashNgram
    vectors of ``texts[pieces[r, c]]`` over its pieces (-1 = none), L2-normalized.

    Unit pieces weigh the same whatever their length, so a long shared observation cannot
    outvote a different action or outcome (with raw counts, two SALT edges from the same
    observation with different actions and rewards reached cosine 0.95). A SALT edge is a few
    observations and actions from a small per-group vocabulary, so with C the unit rows of the
    group's distinct pieces and M the record-by-piece multiplicities, the Gram is M (C C^T) M^T:
    the n-gram work is done once per distinct piece, never per edge text.
    """
    H = HashNgram(texts, n=n, dim=dim)

    def gram(pos: np.ndarray) -> np.ndarray:
        P = pieces[pos]
        r, c = np.nonzero(P >= 0)
        u, inv = np.unique(P[r, c], return_inverse=True)
        C = H.dense(u, normalize=False)
        K = _to_cosine(C @ C.T)  # the unit piece vectors' Gram, from raw n-gram overlaps
        M = np.bincount(r * len(u) + inv, minlength=len(pos) * len(u)).astype(np.float32)
        M = M.reshape(len(pos), len(u))
        return _to_cosine((M @ K) @ M.T)

    return gram


# ---------------------------------------------------------------------------- clustering
def _chunk_cluster(
    Gm: np.ndarray, sizes: np.ndarray, eps: float, update: bool, pbuf: np.ndarray
) -> list[np.ndarray]:
    """Algorithm 1 on several groups at once (sorted by size, largest first).

    ``Gm[g, :n, :n]`` holds group g's Gram (only the upper triangle, j >= i, is read);
    ``pbuf`` is scratch of at least groups*N*N float32. Rows k < kmax of clusters a group has
    not seeded yet hold -2 (below any cosine; written when some group first uses row k), so the
    argmax needs no mask. Other padding entries are never read: a group is inactive once i >= its
    size, and P[g, k, j] is written when cluster k is seeded, before record j reads it.
    """
    ng, N = Gm.shape[0], Gm.shape[1]
    diag = np.where(np.arange(N) < sizes[:, None], np.diagonal(Gm, axis1=1, axis2=2), 0.0).astype(np.float32)
    inv_root = (1.0 / np.sqrt(np.maximum(diag, 1e-30))) * (diag > 0)
    P = pbuf[: ng * N * N].reshape(ng, N, N)  # P[g, k, j] = centroid_k . x_j
    cnt = np.zeros((ng, N), dtype=np.float32)
    cn2 = np.zeros((ng, N), dtype=np.float32)  # squared centroid norms: 1, or 0 for a zero seed
    K = np.zeros(ng, dtype=np.int64)
    lab = np.zeros((ng, N), dtype=np.int64)
    thr = 1.0 - float(eps) - TOL  # join iff sim >= thr, i.e. 1 - sim <= eps (+TOL)
    n_active = np.searchsorted(-sizes, -np.arange(N), side="left")  # groups with more than i records
    AR = np.arange(ng)
    kmax = 0
    for i in range(N):
        na = int(n_active[i])
        ar = AR[:na]
        if i == 0:
            new = np.ones(na, dtype=bool)
            best = bsim = None
        else:
            sims = P[:na, :kmax, i]
            best = sims.argmax(axis=1)  # line 8 (ties: the oldest cluster)
            bsim = sims[ar, best]
            new = bsim < thr
        nn = int(new.sum())
        gn = ar if nn == na else (ar[new] if nn else None)
        gj = None if nn == na else (ar if nn == 0 else ar[~new])
        if gn is not None:  # lines 6 and 13: seed a new cluster with x_i
            kn = K[gn]
            top = int(kn.max()) + 1
            if top > kmax:  # rows first used now: -2 for the groups that have not seeded them
                P[:, kmax:top, i + 1 :] = -2.0
                kmax = top
            lab[gn, i] = kn
            cnt[gn, kn] = 1.0
            cn2[gn, kn] = diag[gn, i] > 0
            if i + 1 < N:
                P[gn, kn, i + 1 :] = Gm[gn, i, i + 1 :] * inv_root[gn, i, None]
            K[gn] = kn + 1
        if gj is not None:  # lines 10-11: join the nearest centroid and move it
            kj = best[gj]
            m = cnt[gj, kj] + 1.0
            cnt[gj, kj] = m
            lab[gj, i] = kj
            if update and i + 1 < N:
                b = 1.0 / m
                a = 1.0 - b
                nrm2 = a * a * cn2[gj, kj] + 2.0 * a * b * bsim[gj] + b * b * diag[gj, i]
                inv = np.where(nrm2 > 1e-30, 1.0 / np.sqrt(np.maximum(nrm2, 1e-30)), 0.0)
                cn2[gj, kj] = nrm2 > 1e-30
                P[gj, kj, i + 1 :] = (
                    P[gj, kj, i + 1 :] * (a * inv)[:, None] + Gm[gj, i, i + 1 :] * (b * inv)[:, None]
                )
    return [lab[gi, : sizes[gi]] for gi in range(ng)]


def group_bounds(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the prompt groups' runs of records in canonical order."""
    starts = np.flatnonzero(np.r_[True, batch.group[1:] != batch.group[:-1]]) if batch.n else np.zeros(0, np.int64)
    return starts, np.r_[starts[1:], batch.n].astype(np.int64)


def memo_gram(gram: GramFn) -> GramFn:
    """``gram`` computing each group's Gram once (for callers that cluster the same groups at
    several radii; the Grams are held meanwhile: sum of squared group sizes, float32)."""
    memo: dict[tuple[int, int], np.ndarray] = {}

    def cached(pos: np.ndarray) -> np.ndarray:
        key = (int(pos[0]), len(pos))
        if key not in memo:
            memo[key] = gram(pos)
        return memo[key]

    return cached


def greedy_cosine_partition(batch: Batch, gram: GramFn, eps: float, update: bool = True) -> np.ndarray:
    """Cluster ids (global, canonical order) from Algorithm 1 run per prompt group.

    ``update=False`` keeps each cluster's centroid at its first member (leader clustering),
    used by SALT's embedding match where a new edge is compared to an existing graph edge.
    """
    n = batch.n
    if n == 0:
        return np.zeros(0, np.int64)
    starts, ends = group_bounds(batch)
    sizes = ends - starts
    by_size = np.argsort(-sizes, kind="stable")
    local = np.empty(n, dtype=np.int64)
    ncl = np.zeros(len(starts), dtype=np.int64)
    nmax = int(sizes.max())
    cap = max(_CHUNK_ELEMS, nmax * nmax)
    gbuf = np.empty(cap, dtype=np.float32)
    pbuf = np.empty(cap, dtype=np.float32)
    p = 0
    while p < len(by_size):
        N = int(sizes[by_size[p]])
        per = max(1, cap // (N * N))
        chunk = by_size[p : p + per]
        Gm = gbuf[: len(chunk) * N * N].reshape(len(chunk), N, N)
        for gi, g in enumerate(chunk):  # each group's Gram straight into the chunk's work array
            Gm[gi, : sizes[g], : sizes[g]] = gram(np.arange(starts[g], ends[g]))
        with np.errstate(invalid="ignore", over="ignore"):  # uninitialized padding is never read
            labs = _chunk_cluster(Gm, sizes[chunk], eps, update, pbuf)
        for g, lab in zip(chunk, labs, strict=True):
            local[starts[g] : ends[g]] = lab
            ncl[g] = int(lab.max()) + 1
        p += per
    offset = np.concatenate([[0], np.cumsum(ncl)[:-1]])
    return local + offset[batch.group]


def auto_eps(
    batch: Batch,
    gram: GramFn,
    lo: float = 0.02,
    hi: float = 0.40,
    target: tuple[int, int] = (4, 8),
    probes: int = 6,
) -> tuple[float, np.ndarray]:
    """BiPACE App. F: binary-search eps in [lo, hi] for a median cluster size in ``target``.

    At most ``probes`` probe values; returns the first eps whose median lands in the target
    range, else the last probe.
    """
    cached = memo_gram(gram)  # every probe clusters the same groups

    eps, labels = lo, None
    for _ in range(probes):
        eps = 0.5 * (lo + hi)
        labels = greedy_cosine_partition(batch, cached, eps)
        med = float(np.median(np.bincount(labels))) if len(labels) else 0.0
        if target[0] <= med <= target[1]:
            break
        if med < target[0]:
            lo = eps  # clusters too small: widen the radius
        else:
            hi = eps
    assert labels is not None
    return eps, labels
