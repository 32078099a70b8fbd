"""The estimators: each one a short composition of the parts in ``parts.py``, registered by name
with its paper's defaults. See README.md in this folder for the table of names, kwargs and
equations."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import parts
from .batch import Batch, factorize, factorize_rows
from .cluster import TOL, auto_eps, bag_gram, dense_gram, greedy_cosine_partition, onehot_gram, text_gram


@dataclass
class CreditResult:
    """What :func:`agentrl.credit.compute` returns."""

    step_advantages: np.ndarray
    """float64 advantage per record, aligned with the input order."""
    diagnostics: dict[str, float]
    """Plain-named floats (the trainer logs them as credit/<key>)."""
    step_term: np.ndarray
    """The step-level part of the advantage per record (input order): A_step for A_ep + w*A_step
    estimators, Q-V for RTMC, the SALT change to the base advantage, zeros for GRPO/RLOO."""
    name: str = ""
    """Estimator name."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """The full kwargs used, defaults filled in (eps resolved when eps='auto')."""


# ============================================================================ kwargs spec
@dataclass(frozen=True)
class Param:
    """One estimator kwarg: default, kind (for validation) and docstring."""

    default: Any
    doc: str
    kind: str  # float | int | bool | choice | eps | callable
    choices: tuple[Any, ...] = ()
    lo: float | None = None
    hi: float | None = None

    def check(self, est: str, key: str, v: Any) -> Any:
        def bad(msg: str) -> ValueError:
            return ValueError(f"credit estimator {est!r}: kwarg {key}={v!r} {msg}")

        is_num = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
        if self.kind == "choice":
            if v not in self.choices:
                raise bad(f"must be one of {', '.join(map(repr, self.choices))}")
            return v
        if self.kind == "bool":
            if not isinstance(v, (bool, np.bool_)):
                raise bad("must be true or false")
            return bool(v)
        if self.kind == "callable":
            if v is not None and not callable(v):
                raise bad("must be a callable (list[str] -> array of shape (n, d)) or None")
            return v
        if self.kind == "eps" and v == "auto":
            return v
        if self.kind == "int":
            if not (isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))):
                raise bad("must be an integer")
            v = int(v)
        else:
            if not is_num:
                raise bad("must be a number" + (" or 'auto'" if self.kind == "eps" else ""))
            v = float(v)
            if not math.isfinite(v):
                raise bad("must be finite")
        if self.lo is not None and v < self.lo or self.hi is not None and v > self.hi:
            raise bad(f"must be in [{self.lo}, {self.hi}]")
        return v


GAMMA = Param(0.95, "discount for returns-to-go R_t (BiPACE App. I: 0.95)", "float", lo=0.0, hi=1.0)
W = Param(
    1.0, "weight of the step term in A_ep + w * A_step (GiGPO/BiPACE Eq. 8); 0 leaves A_ep only", "float"
)
NORM = Param(
    "mean_std",
    "'mean_std': (x - mean) / (std + 1e-6) (Eqs. 1-2); 'mean': x - mean. Applied to both terms",
    "choice",
    parts.NORMS,
)
EMBEDDERS = ("actor_hidden", "hash_ngram", "obs_hash")


def _embedder(default: str) -> Param:
    return Param(
        default,
        "BiGPO fingerprint: 'actor_hidden' (record.fingerprint), 'hash_ngram' (character n-gram hash "
        "of obs), 'obs_hash' (one-hot observation hash; eps<1 gives GiGPO's partition)",
        "choice",
        EMBEDDERS,
    )


EPS = Param(
    0.10,
    "cosine-distance radius of the greedy clustering (BiPACE App. D; 0.10 for 7B); 'auto' runs "
    "App. F's binary search for a median cluster size of 4-8",
    "eps",
    lo=0.0,
    hi=2.0,
)
NGRAM = Param(3, "n of the hash_ngram embedder's character n-grams", "int", lo=1, hi=8)
HASH_DIM = Param(1024, "buckets of the hash_ngram embedder (a power of two)", "int", lo=2, hi=2**20)
ACTION_KEYS = ("first_n", "action_tag")


def _action_key(default: str) -> Param:
    return Param(
        default,
        "PACE action key: 'first_n' (first N response token ids, needs action_token_ids) or "
        "'action_tag' (the <action> body)",
        "choice",
        ACTION_KEYS,
    )


FIRST_N = Param(8, "N of the first_n action key (BiPACE Sec. 3.5: N=8)", "int", lo=1)

# ============================================================================ estimators
ONEHOT_SHORTCUT = True
"""Use the exact observation key for embedder='obs_hash' with eps < 1 (tests switch it off to
run the greedy clustering itself and check it returns the same partition)."""

Out = tuple[np.ndarray, np.ndarray, dict[str, float]]  # advantages, step term, diagnostics


def _episode(batch: Batch, norm: str) -> np.ndarray:
    return parts.episode_advantage(batch, "group" if norm == "mean_std" else "none")


def grpo(batch: Batch, gamma: float, scale: str) -> Out:
    """Episode return standardized in its group (BiPACE Eq. 1), broadcast to every step."""
    a = parts.episode_advantage(batch, scale)
    R = batch.episode_return()
    spread = parts.key_stats(R, batch.traj_group).std
    return a[batch.traj], np.zeros(batch.n), {"zero_std_group_frac": float(np.mean(spread == 0))}


def rloo(batch: Batch, gamma: float) -> Out:
    """Leave-one-out baseline over the group's episode returns, broadcast to every step."""
    a = parts.leave_one_out(batch.episode_return(), batch.traj_group)
    return a[batch.traj], np.zeros(batch.n), {}


def _step_combiner(batch: Batch, gamma: float, w: float, norm: str, key: np.ndarray) -> Out:
    R = batch.returns_to_go(gamma)
    a_step = parts.normalized(R, key, norm)  # Eq. 2 inside each state key
    return parts.combine(batch, _episode(batch, norm), a_step, w), a_step, parts.partition_diagnostics(key)


def gigpo(batch: Batch, gamma: float, w: float, norm: str) -> Out:
    """A_ep + w * A_step, A_step from exact observation-hash groups of R_t (BiPACE Eqs. 1-2)."""
    return _step_combiner(batch, gamma, w, norm, parts.key_obs(batch))


def hgpo(batch: Batch, gamma: float, w: float, norm: str, K: int, alpha: float) -> Out:
    """History-prefix hierarchy: A_step = sum_k w_k A_k / sum_k w_k over levels k = 0..K whose
    group has >= 2 members, w_k = (k+1)^alpha, A_k = Eq. 2 inside the level-k context group."""
    R = batch.returns_to_go(gamma)
    levels = parts.keys_history(batch, K)
    num = np.zeros(batch.n)
    den = np.zeros(batch.n)
    diag = parts.partition_diagnostics(levels[0])
    # w_k = (k+1)^alpha up to a common factor (it cancels in num / den); in logs, so that no
    # alpha overflows
    log_w = alpha * np.log(np.arange(1.0, len(levels) + 1.0))
    weights = np.exp(log_w - log_w.max())
    for k, key in enumerate(levels):
        size = np.bincount(key)[key]
        valid = size >= 2
        wk = weights[k]
        num += np.where(valid, wk * parts.normalized(R, key, norm), 0.0)
        den += np.where(valid, wk, 0.0)
        d = parts.partition_diagnostics(key)
        diag[f"hgpo_k{k}_singleton_frac"] = d["singleton_frac"]
        diag[f"hgpo_k{k}_mean_cluster_size"] = d["mean_cluster_size"]
        diag["hgpo_mean_valid_levels"] = diag.get("hgpo_mean_valid_levels", 0.0) + float(valid.mean())
    a_step = np.divide(num, den, out=np.zeros(batch.n), where=den > 0)
    return parts.combine(batch, _episode(batch, norm), a_step, w), a_step, diag


def _fingerprints(batch: Batch) -> list:
    fps = batch.field("fingerprint", None)
    missing = sum(1 for f in fps if f is None)
    if missing:
        raise ValueError(
            f"embedder='actor_hidden' needs a fingerprint on every record ({missing} of {len(fps)} lack it); "
            "attach them (see agentrl.credit.requirements) or use embedder='hash_ngram'"
        )
    return fps


def state_partition(
    batch: Batch, embedder: str, eps: Any, ngram: int, hash_dim: int
) -> tuple[np.ndarray, dict]:
    """BiGPO's partition C_p (BiPACE Eq. 3) for the chosen fingerprint."""
    if embedder == "obs_hash" and eps != "auto" and eps < 1.0 - TOL and ONEHOT_SHORTCUT:
        # On one-hot vectors Algorithm 1 provably returns the hash classes for any eps < 1 (other
        # hashes have cosine 0, a centroid of equal one-hots stays that one-hot); skip the loop.
        key = parts.key_obs(batch)
        diag = parts.partition_diagnostics(key)
        diag["eps"] = float(eps)
        return key, diag
    if embedder == "obs_hash":
        gram = onehot_gram(batch.obs_id)
    elif embedder == "hash_ngram":
        gram = text_gram(batch.obs_id, batch.obs_strings, n=ngram, dim=hash_dim)
    else:
        gram = dense_gram(_fingerprints(batch))
    if eps == "auto":
        eps, key = auto_eps(batch, gram)
    else:
        key = greedy_cosine_partition(batch, gram, eps)
    diag = parts.partition_diagnostics(key)
    diag["eps"] = float(eps)
    return key, diag


def bigpo(
    batch: Batch, gamma: float, w: float, norm: str, embedder: str, eps: Any, ngram: int, hash_dim: int
) -> Out:
    """GiGPO's A_ep + w * A_step on BiGPO's cosine-cluster partition (BiPACE Sec. 3.4)."""
    key, diag = state_partition(batch, embedder, eps, ngram, hash_dim)
    adv, a_step, _ = _step_combiner(batch, gamma, w, norm, key)
    return adv, a_step, diag


def _pace(kind: str):
    def est(
        batch: Batch,
        gamma: float,
        w: float,
        norm: str,
        embedder: str,
        eps: Any,
        ngram: int,
        hash_dim: int,
        action_key: str,
        first_n: int,
    ) -> Out:
        key, diag = state_partition(batch, embedder, eps, ngram, hash_dim)
        if action_key == "first_n":
            akey = parts.action_key_first_n(batch, first_n)
        else:
            akey, rate = parts.action_key_tag(batch)
            diag["action_tag_parse_rate"] = rate
        R = batch.returns_to_go(gamma)
        p = parts.pace(R, key, akey, kind, norm)  # Eqs. 4-7 with Sec. 3.5 fallbacks
        diag.update(parts.pace_diagnostics(key, akey, p.branch))
        return parts.combine(batch, _episode(batch, norm), p.adv, w), p.adv, diag

    est.__doc__ = (
        f"A_ep + w * PACE-{kind} (BiPACE Eq. {'4' if kind == 'diff' else '5-7'}) inside BiGPO clusters, "
        "with Sec. 3.5's fallbacks (singleton -> 0, degenerate peer set -> RLOO)."
    )
    return est


def rtmc(batch: Batch, gamma: float, n_prior: float, std_norm: bool, signature: str) -> Out:
    """Rollout-tree first-visit Monte Carlo (rtmc.md Alg. 1, Eqs. 7-9, 11)."""
    sigs = batch.field("state_sig", None)
    have = batch.n > 0 and all(s is not None for s in sigs)
    if signature == "env" and not have:
        raise ValueError("rtmc signature='env' needs state_sig on every record; use signature='history'")
    if signature != "history" and have:
        state_raw = factorize([str(s) for s in sigs])[0]
        action = parts.action_key_signature(batch)
    else:
        state_raw = parts.action_prefix_hash(batch).view(np.int64)
        action = batch.act_id
    S = factorize_rows(batch.group, state_raw)[0]  # tree node (state) inside the group
    node = factorize_rows(S, action)[0]  # (s, a) edge
    _, first = factorize_rows(batch.traj, node)  # first visit of (s, a) in each rollout
    fm = np.zeros(batch.n, dtype=bool)
    fm[first] = True
    R = batch.returns_to_go(gamma)  # G_t, Eq. 5
    nS = int(S.max()) + 1
    nN = int(node.max()) + 1
    # shift by the state's first visited return so equal returns give exactly zero
    firstS = np.full(nS, batch.n, dtype=np.int64)
    np.minimum.at(firstS, S[fm], np.flatnonzero(fm))
    ref = R[firstS]
    d = R - ref[S]
    N_sa = np.bincount(node[fm], minlength=nN).astype(np.float64)
    D_sa = np.bincount(node[fm], weights=d[fm], minlength=nN)
    N_s = np.bincount(S[fm], minlength=nS).astype(np.float64)
    D_s = np.bincount(S[fm], weights=d[fm], minlength=nS)
    succ = batch.traj_success().astype(np.float64)
    v_prior = np.bincount(batch.traj_group, weights=succ) / np.bincount(
        batch.traj_group
    )  # group success rate
    q = D_sa[node] / N_sa[node]  # Eq. 7 (minus ref)
    # Eq. 8 visit-weighted V, smoothed by Eq. 11: (n V + n_prior V_prior) / (n + n_prior)
    v = (D_s[S] + n_prior * (v_prior[batch.group] - ref[S])) / (N_s[S] + n_prior)
    adv = q - v  # Eq. 9
    if std_norm:  # Alg. 1 line 21: divide by the group's std of step advantages
        sd = parts.key_stats(adv, batch.group).std
        adv = adv / (sd[batch.group] + parts.DELTA)
    visits = N_s[N_s > 0]
    diag = {
        "rtmc_n_states": float(len(visits)),
        "rtmc_mean_visits": float(visits.mean()),
        "rtmc_single_visit_frac": float(np.mean(visits == 1)),
    }
    for c in range(1, 5):
        diag[f"rtmc_visits_{c}"] = float(np.mean(visits == c))
    diag["rtmc_visits_5plus"] = float(np.mean(visits >= 5))
    return adv, adv, diag


def _salt_edge_pieces(batch: Batch, h: int) -> tuple[np.ndarray, list[str]]:
    """Each record's SALT edge (s_{t-1}, a_t, s_t), s = last h (action, observation) pairs
    (salt.md 3.1.2), as an (n, 2h+2) matrix of ids into one text table, plus that table.

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
    """Trajectory-graph refinement of a trajectory-level advantage (salt.md Sec. 3.1-3.2)."""
    if base == "grpo":
        a_traj = parts.episode_advantage(batch, "group")  # salt.md Eq. 3
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


# ============================================================================ registry
@dataclass(frozen=True)
class Spec:
    """A registered estimator."""

    name: str
    fn: Callable[..., Out]
    params: dict[str, Param]
    paper: str
    requires: Callable[[dict[str, Any]], frozenset[str]] = lambda kw: frozenset()


def _needs_pace(kw: dict[str, Any]) -> frozenset[str]:
    need = set()
    if kw["embedder"] == "actor_hidden":
        need.add("fingerprint")
    if kw["action_key"] == "first_n":
        need.add("action_token_ids")
    return frozenset(need)


def _bigpo_params(embedder: str) -> dict[str, Param]:
    return {
        "gamma": GAMMA,
        "w": W,
        "norm": NORM,
        "embedder": _embedder(embedder),
        "eps": EPS,
        "ngram": NGRAM,
        "hash_dim": HASH_DIM,
    }


def _pace_params(embedder: str, action_key: str) -> dict[str, Param]:
    return {**_bigpo_params(embedder), "action_key": _action_key(action_key), "first_n": FIRST_N}


REGISTRY: dict[str, Spec] = {}


def register(spec: Spec) -> None:
    REGISTRY[spec.name] = spec


register(
    Spec(
        "grpo",
        grpo,
        {
            "gamma": GAMMA,
            "scale": Param(
                "group",
                "std used to scale the centered episode return: 'group' (Eq. 1), 'batch', 'none'",
                "choice",
                ("group", "batch", "none"),
            ),
        },
        "BiPACE Eq. 1",
    )
)
register(Spec("rloo", rloo, {"gamma": GAMMA}, "RLOO (Kool et al. 2019), BiPACE Sec. 1"))
register(Spec("gigpo", gigpo, {"gamma": GAMMA, "w": W, "norm": NORM}, "BiPACE Eqs. 1-2"))
register(
    Spec(
        "hgpo",
        hgpo,
        {
            "gamma": GAMMA,
            "w": W,
            "norm": NORM,
            "K": Param(
                2,
                "deepest history level: groups share the current obs and the last K (obs, action) pairs",
                "int",
                lo=0,
            ),
            "alpha": Param(
                1.0,
                "level weights w_k = (k+1)^alpha (alpha > 0 favors deeper, more consistent groups)",
                "float",
            ),
        },
        "HGPO (He et al. 2026) as cited in BiPACE Sec. 3.4",
    )
)
register(
    Spec(
        "bigpo",
        bigpo,
        _bigpo_params("actor_hidden"),
        "BiPACE Eq. 3, App. D, App. F",
        lambda kw: frozenset({"fingerprint"}) if kw["embedder"] == "actor_hidden" else frozenset(),
    )
)
register(
    Spec(
        "pace_diff", _pace("diff"), _pace_params("obs_hash", "first_n"), "BiPACE Eq. 4, Sec. 3.5", _needs_pace
    )
)
register(
    Spec(
        "pace_q", _pace("q"), _pace_params("obs_hash", "action_tag"), "BiPACE Eqs. 5-7, Sec. 3.5", _needs_pace
    )
)
register(
    Spec(
        "bipace_q", _pace("q"), _pace_params("actor_hidden", "action_tag"), "BiPACE Eqs. 3, 5-8", _needs_pace
    )
)
register(
    Spec(
        "bipace_diff",
        _pace("diff"),
        _pace_params("actor_hidden", "first_n"),
        "BiPACE Eqs. 3, 4, 8",
        _needs_pace,
    )
)
register(
    Spec(
        "rtmc",
        rtmc,
        {
            "gamma": GAMMA,
            "n_prior": Param(
                2.0, "pseudo-visits of the prior in Eq. 11 (RTMC: 2; 0 disables smoothing)", "float", lo=0.0
            ),
            "std_norm": Param(
                False, "divide advantages by the group's std of step advantages (Alg. 1 line 21)", "bool"
            ),
            "signature": Param(
                "auto",
                "'env': records' state_sig/action_sig; 'history': cumulative action history and action "
                "text; 'auto': env signatures when every record has state_sig, else history",
                "choice",
                ("auto", "env", "history"),
            ),
        },
        "RTMC Alg. 1, Eqs. 7-9, 11",
        lambda kw: frozenset() if kw["signature"] == "history" else frozenset({"state_sig", "action_sig"}),
    )
)
register(
    Spec(
        "salt",
        salt,
        {
            "gamma": GAMMA,
            "h": Param(
                3, "state = last h (action, observation) pairs (salt.md Sec. 3.1.2, Table 4: 3)", "int", lo=1
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
                0.95,
                "match='embedding': edges merge when cosine similarity >= this",
                "float",
                lo=-1.0,
                hi=1.0,
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
)


def lookup(name: str) -> Spec:
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(f"unknown credit estimator {name!r}; valid: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def resolve(name: str, kwargs: dict[str, Any]) -> tuple[Spec, dict[str, Any]]:
    """Spec and full kwargs (defaults filled, values checked); one-line ValueError otherwise."""
    spec = lookup(name)
    unknown = [k for k in kwargs if k not in spec.params]
    if unknown:
        raise ValueError(
            f"unknown kwarg(s) {', '.join(map(repr, unknown))} for credit estimator {name!r}; "
            f"valid kwargs: {', '.join(spec.params)}"
        )
    full = {k: p.default for k, p in spec.params.items()}
    for k, v in kwargs.items():
        full[k] = spec.params[k].check(name, k, v)
    if "hash_dim" in full and full["hash_dim"] & (full["hash_dim"] - 1):
        raise ValueError(
            f"credit estimator {name!r}: kwarg hash_dim={full['hash_dim']} must be a power of two"
        )
    return spec, full
