"""The Eq. 2 family: GRPO/RLOO (episode only), GiGPO, BiGPO and PACE (A_ep + w * A_step), each a
short composition of the parts in ``parts.py``, registered at its definition with its paper's
defaults. HGPO lives in ``history.py``, RTMC in ``rtmc.py``, SALT in ``salt.py``. See README.md in
this folder for the table of names, kwargs and equations."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import parts
from .batch import Batch
from .cluster import TOL, auto_eps, dense_gram, greedy_cosine_partition, onehot_gram, text_gram
from .registry import GAMMA, HASH_DIM, NGRAM, NORM, Out, Param, W, episode_params, register

EMBEDDERS = ("actor_hidden", "hash_ngram", "obs_hash")
ACTION_KEYS = ("first_n", "action_tag")


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


def _action_key(default: str) -> Param:
    return Param(
        default,
        "PACE action key: 'first_n' (first N response token ids, needs action_token_ids) or "
        "'action_tag' (the <action> body)",
        "choice",
        ACTION_KEYS,
    )


CENTER = Param(
    False,
    "embedder='actor_hidden' only: subtract the prompt group's mean fingerprint before the cosine "
    "(our addition, not the paper's: a small model's hidden states share one large direction; on "
    "SmolLM2-135M the paper's rule made one cluster per ALFWorld game, docs/results/alfworld.md)",
    "bool",
)
FIRST_N = Param(8, "N of the first_n action key (BiPACE Sec. 3.5: N=8)", "int", lo=1)
COMBINER = {"gamma": GAMMA, "w": W, "norm": NORM, **episode_params()}
"""kwargs of every A_ep + w * A_step estimator of this module."""


def _bigpo_params(embedder: str) -> dict[str, Param]:
    return {**COMBINER, "embedder": _embedder(embedder), "eps": EPS, "center": CENTER, "ngram": NGRAM,
            "hash_dim": HASH_DIM}


def _pace_params(embedder: str, action_key: str) -> dict[str, Param]:
    return {**_bigpo_params(embedder), "action_key": _action_key(action_key), "first_n": FIRST_N}


def _needs_pace(kw: dict[str, Any]) -> frozenset[str]:
    need = set()
    if kw["embedder"] == "actor_hidden":
        need.add("fingerprint")
    if kw["action_key"] == "first_n":
        need.add("action_token_ids")
    return frozenset(need)


ONEHOT_SHORTCUT = True
"""Use the exact observation key for embedder='obs_hash' with eps < 1 (tests switch it off to
run the greedy clustering itself and check it returns the same partition)."""


# ============================================================================ episode only
@register(
    "grpo",
    {
        "gamma": GAMMA,
        "scale": Param(
            "group",
            "std used to scale the centered episode return: 'group' (Eq. 1), 'batch', 'none'",
            "choice",
            ("group", "batch", "none"),
        ),
        **episode_params(),
    },
    "BiPACE Eq. 1",
)
def grpo(batch: Batch, gamma: float, scale: str, **ep: str) -> Out:
    """Episode return standardized in its group (BiPACE Eq. 1), broadcast to every step; the
    episode kwargs act as on the combiners' A_ep (README.md, "Episode term")."""
    a = episode(batch, "mean_std" if scale == "group" else "mean", **ep)
    if scale == "batch":  # centered, divided by the batch std of the values the statistics use
        R, s = parts.episode_scores(batch, ep["penalty"])
        x = R if ep["episode_stats"] == "rollouts" else s
        a = a / ((float(np.std(x, ddof=1)) if len(x) > 1 else 0.0) + parts.DELTA)
    spread = parts.key_stats(batch.episode_return(), batch.traj_group).std
    return a, np.zeros(batch.n), {"zero_std_group_frac": float(np.mean(spread == 0))}


@register("rloo", {"gamma": GAMMA}, "RLOO (Kool et al. 2019), BiPACE Sec. 1")
def rloo(batch: Batch, gamma: float) -> Out:
    """Leave-one-out baseline over the group's episode returns, broadcast to every step."""
    a = parts.leave_one_out(batch.episode_return(), batch.traj_group)
    return a[batch.traj], np.zeros(batch.n), {}


# ============================================================================ A_ep + w * A_step
def episode(batch: Batch, norm: str, episode_stats: str, episode_singleton: str, penalty: str) -> np.ndarray:
    """A_ep per record with the episode kwargs (README.md, "Episode term")."""
    return parts.episode_term(batch, norm, episode_stats, episode_singleton, penalty)


def _step_combiner(batch: Batch, gamma: float, w: float, norm: str, key: np.ndarray, **ep: str) -> Out:
    R = parts.step_returns(batch, gamma, ep["penalty"])
    a_step = parts.normalized(R, key, norm)  # Eq. 2 inside each state key
    adv = parts.combine(episode(batch, norm, **ep), a_step, w)
    return adv, a_step, parts.partition_diagnostics(key)


@register("gigpo", COMBINER, "BiPACE Eqs. 1-2 (GiGPO, arXiv 2505.10978 Eqs. 3, 6-8)")
def gigpo(batch: Batch, gamma: float, w: float, norm: str, **ep: str) -> Out:
    """A_ep + w * A_step, A_step from exact observation-hash groups of R_t (BiPACE Eqs. 1-2)."""
    return _step_combiner(batch, gamma, w, norm, parts.key_obs(batch), **ep)


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
    batch: Batch, embedder: str, eps: Any, ngram: int, hash_dim: int, center: bool = False
) -> tuple[np.ndarray, dict]:
    """BiGPO's partition C_p (BiPACE Eq. 3) for the chosen fingerprint (``center``: actor_hidden's
    fingerprints centred in their prompt group, ``cluster.dense_gram``)."""
    if center and embedder != "actor_hidden":
        raise ValueError(f"center=True centres actor_hidden fingerprints only; embedder is {embedder!r}")
    if embedder == "obs_hash" and eps != "auto" and eps < 1.0 - TOL and ONEHOT_SHORTCUT:
        # On one-hot vectors Algorithm 1 provably returns the hash classes for any eps < 1 (other
        # hashes have cosine 0, a centroid of equal one-hots stays that one-hot); skip the loop.
        key = parts.key_obs(batch)
        diag = parts.partition_diagnostics(key)
        diag["eps"] = float(eps)
        return key, diag
    if embedder == "obs_hash":
        gram = onehot_gram(batch.state_id)
    elif embedder == "hash_ngram":
        gram = text_gram(batch.obs_id, batch.obs_strings, n=ngram, dim=hash_dim)
    else:
        gram = dense_gram(_fingerprints(batch), center=center)
    if eps == "auto":
        eps, key = auto_eps(batch, gram)
    else:
        key = greedy_cosine_partition(batch, gram, eps)
    diag = parts.partition_diagnostics(key)
    diag["eps"] = float(eps)
    return key, diag


@register(
    "bigpo",
    _bigpo_params("actor_hidden"),
    "BiPACE Eq. 3, App. D, App. F",
    lambda kw: frozenset({"fingerprint"}) if kw["embedder"] == "actor_hidden" else frozenset(),
)
def bigpo(
    batch: Batch,
    gamma: float,
    w: float,
    norm: str,
    embedder: str,
    eps: Any,
    center: bool,
    ngram: int,
    hash_dim: int,
    **ep: str,
) -> Out:
    """GiGPO's A_ep + w * A_step on BiGPO's cosine-cluster partition (BiPACE Sec. 3.4)."""
    key, diag = state_partition(batch, embedder, eps, ngram, hash_dim, center)
    adv, a_step, _ = _step_combiner(batch, gamma, w, norm, key, **ep)
    return adv, a_step, diag


def _pace(kind: str):
    def est(
        batch: Batch,
        gamma: float,
        w: float,
        norm: str,
        embedder: str,
        eps: Any,
        center: bool,
        ngram: int,
        hash_dim: int,
        action_key: str,
        first_n: int,
        **ep: str,
    ) -> Out:
        key, diag = state_partition(batch, embedder, eps, ngram, hash_dim, center)
        if action_key == "first_n":
            akey = parts.action_key_first_n(batch, first_n)
        else:
            akey, rate = parts.action_key_tag(batch)
            diag["action_tag_parse_rate"] = rate
        R = parts.step_returns(batch, gamma, ep["penalty"])
        p = parts.pace(R, key, akey, kind, norm)  # Eqs. 4-7 with Sec. 3.5 fallbacks
        diag.update(parts.pace_diagnostics(key, akey, p.branch))
        return parts.combine(episode(batch, norm, **ep), p.adv, w), p.adv, diag

    est.__doc__ = (
        f"A_ep + w * PACE-{kind} (BiPACE Eq. {'4' if kind == 'diff' else '5-7'}) inside BiGPO clusters, "
        "with Sec. 3.5's fallbacks (singleton -> 0, degenerate peer set -> RLOO)."
    )
    est.__qualname__ = est.__name__ = f"pace_{kind}"
    return est


pace_diff = register("pace_diff", _pace_params("obs_hash", "first_n"), "BiPACE Eq. 4, Sec. 3.5", _needs_pace)(
    _pace("diff")
)
pace_q = register("pace_q", _pace_params("obs_hash", "action_tag"), "BiPACE Eqs. 5-7, Sec. 3.5", _needs_pace)(
    _pace("q")
)
bipace_q = register(
    "bipace_q", _pace_params("actor_hidden", "action_tag"), "BiPACE Eqs. 3, 5-8", _needs_pace
)(_pace("q"))
bipace_diff = register(
    "bipace_diff", _pace_params("actor_hidden", "first_n"), "BiPACE Eqs. 3, 4, 8", _needs_pace
)(_pace("diff"))
