"""A log-linear policy whose parameters are shared across states: pi(a|o) = softmax_a(theta . phi(o, a))
over features of the observation text o and the action text a, and its exact policy gradient.

Why: under the tabular policy (``exact.TabularPolicy``) each state has its own logits, so an
estimator that only moves advantage between records of one (state, action) cannot change the
gradient. Here the policy reads the text the agent sees: words are shared across states, an
observation that carries a noise sentence has other features than the same state without it, and
states whose texts are aliased share their observation features. The truth stays exact: the
observation of a visit is drawn afresh from a known model (``FiniteMDP.obs_variant_probs``), so the
state-level policy is pi(a|s) = sum_o p(o|s) pi(a|o) and the gradient is (derivation:
agentrl/credit/README.md, "Against the truth")

    dJ/dz[s, o, b] = p(o|s) pi(b|s, o) (M(s, b) - sum_a pi(a|s, o) M(s, a)),   M(s, a) = sum_t d_t(s) A_t(s, a)
    dJ/dtheta = Phi^T dJ/dz          (z = Phi theta: the logits of every (s, o, a) row)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from agentrl_envs.mdp import FiniteMDP, MDPConfig, generate
from scipy import sparse

from agentrl.truth.exact import TabularPolicy

POLICY_KINDS = ("tabular", "loglinear")
"""The policies the bench scores and races (``make_policy``)."""


def _words(text: str) -> list[str]:
    """Lower-cased words with the punctuation around them dropped, each once, sorted."""
    return sorted({w.strip(".,:;()!?").lower() for w in text.split()} - {""})


def text_features(obs: str, action: str) -> list[str]:
    """Feature names of one (observation, action) pair: the whole action text (``a=``), each action
    word (``w=``), and each (observation word, action word) pair (``x=``); sorted, each once.
    Action words are shared by every state ("fly" marks an invalid action anywhere); the pairs
    carry the state, and pairs with a shared word ("kitchen", "place 2-1") are shared too."""
    aw = _words(action)
    feats = {f"a={action}"} | {f"w={w}" for w in aw} | {f"x={o}|{w}" for o in _words(obs) for w in aw}
    return sorted(feats)


@dataclass
class Features:
    """The feature matrix Phi as coordinates: row r = (s * O + o) * A + a of every live state's
    (observation variant, action slot), column = feature index, value 1 / sqrt(features of the row)
    (every row has unit norm, so that theta ~ N(0, scale^2) gives logits of std ``scale``)."""

    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    shape: tuple[int, int, int]
    """(S, O, A)."""
    names: list[str]
    """Feature names, indexed by column."""

    @property
    def dim(self) -> int:
        return len(self.names)

    @functools.cached_property
    def _phi(self) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
        """Phi and Phi^T as sparse matrices (a sparse product: the race calls these every update)."""
        phi = sparse.csr_matrix((self.vals, (self.rows, self.cols)), shape=(int(np.prod(self.shape)), self.dim))
        return phi, phi.T.tocsr()

    def logits(self, theta: np.ndarray) -> np.ndarray:
        """z = Phi theta as an (S, O, A) array (0 on rows without features: terminal states)."""
        return (self._phi[0] @ theta).reshape(self.shape)

    def pull(self, w: np.ndarray) -> np.ndarray:
        """Phi^T w for an (S, O, A) array ``w``: a gradient in logits becomes one in theta."""
        return self._phi[1] @ w.ravel()


_KIND = 1 << 40
"""Feature keys as integers: kind * _KIND + payload (a cross pair's payload: obs word * _WORD + action word)."""
_WORD = 1 << 20


class _Vocab:
    """Word ids in order of first appearance, and the words of each text once (cached)."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self._texts: dict[str, np.ndarray] = {}

    def id(self, w: str) -> int:
        return self.ids.setdefault(w, len(self.ids))

    def words(self, text: str) -> np.ndarray:
        if text not in self._texts:
            self._texts[text] = np.array([self.id(w) for w in _words(text)], dtype=np.int64)
        return self._texts[text]


def _row_keys(voc: _Vocab, text: str, act: str) -> np.ndarray:
    """The integer keys of :func:`text_features` (text, act)."""
    ow, aw = voc.words(text), voc.words(act)
    return np.concatenate([[voc.id("\0" + act)], _KIND + aw, 2 * _KIND + (ow[:, None] * _WORD + aw[None, :]).ravel()])


def _key_name(key: int, words: list[str]) -> str:
    kind, rest = divmod(int(key), _KIND)
    if kind == 0:
        return "a=" + words[rest][1:]
    if kind == 1:
        return "w=" + words[rest]
    return f"x={words[rest // _WORD]}|{words[rest % _WORD]}"


def build_features(mdp: FiniteMDP) -> Features:
    """Phi of ``mdp``: :func:`text_features` of every live state's observation variants and action
    texts (as integer keys, for speed: the race builds one per MDP), columns in key order."""
    S, n_obs, A = mdp.n_states, mdp.n_obs_variants, mdp.n_actions
    voc = _Vocab()
    rows, keys = [], []
    for s in np.flatnonzero(~mdp.terminal):
        for o in range(n_obs):
            text = mdp.variant_text(int(s), o)
            for a, act in enumerate(mdp.action_text[s]):
                k = _row_keys(voc, text, act)
                rows.append(np.full(len(k), (int(s) * n_obs + o) * A + a))
                keys.append(k)
    uniq, cols = np.unique(np.concatenate(keys), return_inverse=True)
    row = np.concatenate(rows)
    counts = np.bincount(row, minlength=S * n_obs * A)
    words = list(voc.ids)
    return Features(row, cols.astype(np.int64), 1.0 / np.sqrt(counts[row]), (S, n_obs, A),
                    [_key_name(k, words) for k in uniq])


@functools.lru_cache(maxsize=4)
def _features_of(cfg: MDPConfig, seed: int) -> Features:
    return build_features(generate(cfg, seed))


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class LogLinearPolicy:
    """pi(a|s, o) = softmax_a(Phi theta) over the action slots of the observation variant o of s."""

    features: Features
    theta: np.ndarray
    """(D,) float64: the shared parameters (what the race updates)."""
    obs_probs: np.ndarray
    """(O,) p(o|s), the same for every state (``FiniteMDP.obs_variant_probs``)."""

    @classmethod
    def random(cls, mdp: FiniteMDP, seed: int, scale: float = 1.0) -> LogLinearPolicy:
        """theta ~ N(0, scale^2), seeded (a stream apart from the tabular policy's)."""
        # generated MDPs are a function of (config, seed): one race job builds Phi once for every estimator
        phi = _features_of(mdp.config, mdp.seed)
        rng = np.random.default_rng([int(seed), 0x4C4C50])
        return cls(phi, scale * rng.standard_normal(phi.dim), mdp.obs_variant_probs())

    @property
    def params(self) -> np.ndarray:
        return self.theta

    @property
    def act_probs(self) -> np.ndarray:
        """(S, O, A) pi(a|s, o): what the sampler draws actions from (kept until theta changes:
        an update reads it three times, for sampling, the score and J)."""
        memo = self.__dict__.get("_memo")
        if memo is None or not np.array_equal(memo[0], self.theta):
            memo = self.__dict__["_memo"] = (self.theta.copy(), _softmax(self.features.logits(self.theta)))
        return memo[1]

    @property
    def log_act_probs(self) -> np.ndarray:
        """(S, O, A) log pi(a|s, o) as a log-softmax (finite where pi underflows to 0)."""
        z = self.features.logits(self.theta)
        z = z - z.max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))

    def log_prob_sample(self, smp) -> np.ndarray:
        """log pi(a_i|s_i, o_i) of each record of a ``sample.Sample`` (the observation it was shown)."""
        return self.log_act_probs[smp.s, smp.o, smp.a]

    def with_params(self, params: np.ndarray) -> LogLinearPolicy:
        """The same policy (features, observation model) with other weights (copied)."""
        return LogLinearPolicy(self.features, np.array(params, dtype=np.float64), self.obs_probs)

    @property
    def probs(self) -> np.ndarray:
        """(S, A) pi(a|s) = sum_o p(o|s) pi(a|s, o): the state-level policy of the dynamic programme."""
        return np.einsum("o,soa->sa", self.obs_probs, self.act_probs)

    def exact_grad(self, M: np.ndarray) -> np.ndarray:
        """dJ/dtheta from M(s, a) = sum_t gamma^t d_t(s) A_t(s, a) (module docstring)."""
        pz = self.act_probs
        centred = M[:, None, :] - (pz * M[:, None, :]).sum(-1, keepdims=True)
        return self.features.pull(self.obs_probs[None, :, None] * pz * centred)

    def score(self, s: np.ndarray, o: np.ndarray, a: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """sum_i weights_i dlog pi(a_i|s_i, o_i)/dtheta = Phi^T w, w[s_i, o_i, .] = weights_i
        (onehot(a_i) - pi(.|s_i, o_i))."""
        pz = self.act_probs
        w = np.zeros(pz.shape)
        np.add.at(w, (s, o, a), weights)
        np.add.at(w, (s, o), -weights[:, None] * pz[s, o])
        return self.features.pull(w)

    def score_sample(self, smp, weights: np.ndarray) -> np.ndarray:
        """:meth:`score` of a ``sample.Sample``'s records."""
        return self.score(smp.s, smp.o, smp.a, weights)


def make_policy(kind: str, mdp: FiniteMDP, seed: int, scale: float = 1.0) -> TabularPolicy | LogLinearPolicy:
    """The seeded initial policy of ``kind`` (:data:`POLICY_KINDS`); one-line ValueError otherwise."""
    if kind == "tabular":
        return TabularPolicy.random(mdp, seed, scale=scale)
    if kind == "loglinear":
        return LogLinearPolicy.random(mdp, seed, scale=scale)
    raise ValueError(f"unknown policy {kind!r}; valid: {', '.join(POLICY_KINDS)}")
