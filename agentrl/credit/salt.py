"""SALT (arXiv 2510.20022 Sec. 3.1-3.2, App. B.2): trajectory-graph refinement of a trajectory-level
advantage; edges equal in (state, action, resulting state) share their set's mean advantage."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import parts
from .batch import Batch, factorize, factorize_rows
from .cluster import bag_gram, dense_gram, greedy_cosine_partition
from .registry import GAMMA, HASH_DIM, NGRAM, Out, Param, register


def _salt_edge_pieces(batch: Batch, h: int) -> tuple[np.ndarray, list[str]]:
    """Each record's SALT edge (s_{t-1}, a_t, s_t), s = last h (action, observation) pairs
    (arXiv 2510.20022 Sec. 3.1.2), as an (n, 2h+2) matrix of ids into one text table, plus that table.

    In record terms, element E_k = (action_{k-1}, obs_k), E_0 = (none, obs_0) the root q. Record t
    (SALT's step t+1) starts in E_{t-h+1..t} and ends in E_{t-h+2..t+1}; the edge is the window
    E_{t-h+1..t+1}, columns oldest first. The last step's resulting observation is the env's final
    one when the record carries info['next_obs'], else a terminal mark with the final reward and
    truncated flag. The table holds the observations, then the actions, then the terminal marks,
    so equal ids mean equal pieces of the same kind; -1 marks a piece before the trajectory start.
    """
    lags = [(batch.lag("act", j + 1), batch.lag("obs", j)) for j in range(h - 1, -1, -1)]
    obs, acts = batch.obs_strings, list(batch._act_table)  # after lag(): it may add history texts
    n_oa = len(obs) + len(acts)
    last = np.flatnonzero(~batch.has_next)
    term = []
    for p in last:
        r = batch._records[p]
        info = Batch._field(r, "info", None) or {}
        nob = info.get("next_obs") if isinstance(info, dict) else None
        trunc = bool(Batch._field(r, "truncated", False))
        term.append(f"<end> {'' if nob is None else nob} r={batch.reward[p]!r} truncated={trunc}")
    term_id, term_texts = factorize(term)
    nxt = np.full(batch.n, -1, dtype=np.int64)
    nxt[batch.has_next] = batch.obs_id[np.flatnonzero(batch.has_next) + 1]
    nxt[last] = n_oa + term_id

    def act_piece(a: np.ndarray) -> np.ndarray:
        return np.where(a >= 0, a + len(obs), -1)

    cols = [c for a, o in lags for c in (act_piece(a), o)] + [act_piece(batch.act_id), nxt]
    return np.stack(cols, axis=1), [*obs, *acts, *term_texts]


def _salt_edge_texts(pieces: np.ndarray, table: list[str], rows: np.ndarray) -> list[str]:
    """Readable text of the edges in ``rows`` (for a user embed_fn): h pairs || action -> result."""
    out = []
    for row in pieces[rows].tolist():
        hist = zip(row[:-2:2], row[1:-2:2], strict=True)
        pairs = [f"{table[a] if a >= 0 else '<start>'} -> {table[o]}" for a, o in hist if o >= 0]
        out.append(" | ".join(pairs) + f" || {table[row[-2]]} -> {table[row[-1]]}")
    return out


@register(
    "salt",
    {
        "gamma": GAMMA,
        "h": Param(
            3, "state = last h (action, observation) pairs (arXiv 2510.20022 Sec. 3.1.2, Table 4: 3)", "int", lo=1
        ),
        "base": Param(
            "grpo", "trajectory-level advantage to refine: 'grpo' or 'rloo'", "choice", ("grpo", "rloo")
        ),
        "match": Param(
            "exact",
            "'exact' edge identity, or 'embedding': cosine similarity of edge embeddings (App. B.2)",
            "choice",
            ("exact", "embedding"),
        ),
        "sim_threshold": Param(
            0.95, "match='embedding': edges merge when cosine similarity >= this", "float", lo=-1.0, hi=1.0
        ),
        "embed_fn": Param(
            None,
            "match='embedding': list[str] -> (n, d) array; None uses the hash_ngram embedder",
            "callable",
        ),
        "ngram": NGRAM,
        "hash_dim": HASH_DIM,
    },
    "SALT Sec. 3.1-3.2, App. B.2",
)
def salt(
    batch: Batch,
    gamma: float,
    h: int,
    base: str,
    match: str,
    sim_threshold: float,
    embed_fn: Callable | None,
    ngram: int,
    hash_dim: int,
) -> Out:
    """Trajectory-graph refinement of a trajectory-level advantage (arXiv 2510.20022 Sec. 3.1-3.2)."""
    if base == "grpo":
        a_traj = parts.episode_advantage(batch, "group")  # arXiv 2510.20022 Eq. 3
    else:
        a_traj = parts.leave_one_out(batch.episode_return(), batch.traj_group)
    a0 = a_traj[batch.traj]
    pieces, table = _salt_edge_pieces(batch, h)
    edge = factorize_rows(batch.group, *pieces.T)[0]
    if match == "embedding":  # App. B.2: edges equivalent when their embeddings' cosine >= threshold
        if embed_fn is None:  # hash_ngram: the sum of the pieces' n-gram count vectors
            gram = bag_gram(pieces, table, n=ngram, dim=hash_dim)
        else:  # identical edges share one text (and one embedding call)
            _, first = factorize_rows(edge)
            E = np.asarray(embed_fn(_salt_edge_texts(pieces, table, first)), dtype=np.float32)
            if E.ndim != 2 or E.shape[0] != len(first):
                raise ValueError(
                    f"salt embed_fn must return an array of shape ({len(first)}, d), got {E.shape}"
                )
            if not np.isfinite(E).all():
                raise ValueError("salt embed_fn returned NaN or inf")
            gram = dense_gram(E[edge])
        # leader clustering: a new edge merges into an existing graph edge (its first member)
        edge = greedy_cosine_partition(batch, gram, 1.0 - sim_threshold, update=False)
    size = np.bincount(edge)[edge]
    merged = size >= 2
    mean = parts.key_stats(a0, edge).mean[edge]  # Eq. 7: merged edges get their set's mean
    adv = np.where(merged, mean, a0)  # divergent edges keep the base advantage
    sizes = np.bincount(edge)
    diag = {
        "salt_merge_rate": float(merged.mean()),
        "salt_merged_sets": float(np.sum(sizes >= 2)),
        "salt_n_edges": float(np.sum(sizes > 0)),
    }
    return adv, adv - a0, diag
