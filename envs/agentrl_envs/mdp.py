"""``agentrl/FiniteMDP-v0``: finite text MDPs with known dynamics, generated from a seed.

Credit assignment has a ground truth wherever the dynamics and the policy are known exactly:
``agentrl.truth`` runs dynamic programming on the arrays (``succ``, ``prob``, ``base_reward``,
``arrive_reward``) that are the whole dynamics, and the gymnasium env below plays them as text,
with the optimal policy of the same arrays as its expert. The knobs (``MDPConfig``) are the ones
credit estimators are sensitive to: recurring states, sparse or dense rewards, traps, slips,
distractor and invalid actions, aliased or noisy text, noisy fingerprints. Why each:
docs/environments.md, "FiniteMDP".
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from agentrl_envs.base import TextEnv, parse_reset_options

MOVE, DISTRACTOR, INVALID = 0, 1, 2
"""Action kinds (``FiniteMDP.kind``)."""
MAX_STATES = 50_000
"""Generation refuses larger MDPs (a tree of ``moves ** depth`` leaves grows fast)."""

_ADJ = ("red", "blue", "green", "dusty", "quiet", "narrow", "bright", "cold", "old", "round", "tall", "dark")
_ROOM = ("kitchen", "hall", "cellar", "attic", "garden", "study", "library", "workshop", "pantry", "gallery")
_OBJ = ("lamp", "key", "box", "map", "rope", "coin", "book", "jar", "bell", "mirror", "clock", "shelf")
_VERB = ("open", "take", "push", "climb", "follow", "enter", "search", "turn", "lift", "cross")
_DISTRACT = ("look around", "check inventory", "wait", "listen", "think")
_INVALID = ("fly to the moon", "eat the wall", "dance with the door", "sing to the floor", "swallow the key")
_NOISE = ("A clock ticks somewhere.", "Somewhere a dog barks.", "The air smells of rain.",
          "A floorboard creaks.", "Dust drifts in the light.", "You hear distant voices.")
TOKEN_VOCAB = 32_000
"""Word-level token ids of action texts (``action_token_ids``): crc32(word) mod this."""


@dataclass(frozen=True)
class MDPConfig:
    """Knobs of a generated MDP family (docs/environments.md, "FiniteMDP"). Validated by :meth:`check`."""

    depth: int = 4
    """Progress moves from a start state to a leaf (the plan length)."""
    horizon: int = 8
    """Step limit H of an episode (>= depth, else no leaf is reachable)."""
    moves: int = 3
    """Progress actions per state."""
    distractors: int = 1
    """Valid actions per state that change nothing (reward 0)."""
    invalid: int = 1
    """Actions per state the env rejects: reward -penalty, state unchanged, ``valid`` False."""
    penalty: float = 0.1
    """Invalid-action penalty (>= 0)."""
    recurrence: float = 0.5
    """Chance that a move leads to an existing state of the next depth instead of a new one."""
    goal_frac: float = 0.3
    """Share of leaves that are goals (reward 1 on arrival; every task has at least one)."""
    trap: float = 0.1
    """Chance that a move (other than each state's first) leads to a dead end (episode over, 0)."""
    step_reward: float = 0.0
    """Half-width of the fixed uniform reward of each move (0: the goal reward only)."""
    slip: float = 0.0
    """Chance that a move lands on another move's target of the same state."""
    alias: float = 0.0
    """Share of states rendered with another state's text (same task and depth)."""
    noise_words: float = 0.0
    """Chance that an observation carries an irrelevant sentence, drawn per visit."""
    fp_dim: int = 16
    """Fingerprint dimension (a fixed Gaussian projection of the state)."""
    fp_noise: float = 0.0
    """Std of the Gaussian noise added to the fingerprint per visit (unit-norm projections)."""
    tasks: int = 4
    """Start states (tasks) of one MDP; ``reset(seed=s)`` plays task ``s % tasks``."""

    def check(self) -> MDPConfig:
        """Self, or a one-line ValueError naming the bad knob."""
        ints = {"depth": 1, "horizon": 1, "moves": 1, "distractors": 0, "invalid": 0, "fp_dim": 1, "tasks": 1}
        for k, lo in ints.items():
            v = getattr(self, k)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
                raise ValueError(f"MDP knob {k}={v!r} must be an integer >= {lo}")
        probs = ("recurrence", "goal_frac", "trap", "slip", "alias", "noise_words")
        for k in probs:
            v = getattr(self, k)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v <= 1.0:
                raise ValueError(f"MDP knob {k}={v!r} must be a probability in [0, 1]")
        for k in ("penalty", "step_reward", "fp_noise"):
            v = getattr(self, k)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v < float("inf"):
                raise ValueError(f"MDP knob {k}={v!r} must be a finite number >= 0")
        if self.horizon < self.depth:
            raise ValueError(f"MDP knob horizon={self.horizon} must be >= depth={self.depth} (no leaf reachable)")
        return self

    @classmethod
    def from_kwargs(cls, kw: dict[str, Any]) -> MDPConfig:
        names = [f.name for f in fields(cls)]
        bad = sorted(set(kw) - set(names))
        if bad:
            raise ValueError(f"unknown MDP knob(s) {bad}; valid: {', '.join(names)}")
        return cls(**kw).check()


@dataclass
class FiniteMDP:
    """A generated MDP as arrays over states s and action slots a (every non-terminal state has
    the same number A of actions). ``succ[s, a, k]`` / ``prob[s, a, k]``: successor states and
    their probabilities; the reward of (s, a, s') is ``base_reward[s, a] + arrive_reward[s']``."""

    config: MDPConfig
    seed: int
    succ: np.ndarray
    prob: np.ndarray
    base_reward: np.ndarray
    arrive_reward: np.ndarray
    kind: np.ndarray
    terminal: np.ndarray
    goal: np.ndarray
    depth: np.ndarray
    task: np.ndarray
    roots: np.ndarray
    obs_text: list[str]
    action_text: list[list[str]]
    projection: np.ndarray

    @property
    def n_states(self) -> int:
        return len(self.terminal)

    @property
    def n_actions(self) -> int:
        return self.succ.shape[1]

    @functools.cached_property
    def reward(self) -> np.ndarray:
        """Expected reward of (s, a): base + expected arrival reward."""
        return self.base_reward + (self.prob * self.arrive_reward[self.succ]).sum(-1)

    def backup(self, v_next: np.ndarray, gamma: float) -> np.ndarray:
        """Q(s, a) = r(s, a) + gamma * E[V_next(s')], with Q = 0 on terminal states (the episode
        is over there) and V_next of terminal states taken as 0."""
        v = np.where(self.terminal, 0.0, v_next)
        q = self.reward + gamma * (self.prob * v[self.succ]).sum(-1)
        q[self.terminal] = 0.0
        return q

    def backward(self, gamma: float = 1.0, pi: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Backward induction over the horizon: Q[t, s, a] and V[t, s] (t = 0..H; V[H] = 0), with
        V_t = sum_a pi Q_t for a policy ``pi`` (S, A), or max_a Q_t (the optimum) without one."""
        H = self.config.horizon
        V = np.zeros((H + 1, self.n_states))
        Q = np.zeros((H, self.n_states, self.n_actions))
        for t in range(H - 1, -1, -1):
            Q[t] = self.backup(V[t + 1], gamma)
            v = Q[t].max(-1) if pi is None else (pi * Q[t]).sum(-1)
            V[t] = np.where(self.terminal, 0.0, v)
        return Q, V

    def optimal(self, gamma: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Finite-horizon optimal values Q*, V* (:meth:`backward` without a policy)."""
        return self.backward(gamma)

    @staticmethod
    def token_ids(text: str) -> list[int]:
        """Word-level token ids of an action text (PACE's first-N action key)."""
        return [zlib.crc32(w.encode()) % TOKEN_VOCAB for w in text.split()]

    @functools.cached_property
    def action_tokens(self) -> list[list[tuple[int, ...]]]:
        """:meth:`token_ids` of every action text, per state (computed once)."""
        return [[tuple(self.token_ids(a)) for a in acts] for acts in self.action_text]

    @functools.cached_property
    def projection_lists(self) -> list[list[float]]:
        """The noiseless fingerprint of every state as a list (computed once)."""
        return self.projection.tolist()

    def render(self, s: int, rng: np.random.Generator | None = None) -> str:
        """Observation text of state ``s`` (with a noise sentence drawn from ``rng`` per visit)."""
        text = self.obs_text[s]
        if rng is not None and self.config.noise_words > 0 and rng.random() < self.config.noise_words:
            text = f"{text} {_NOISE[int(rng.integers(len(_NOISE)))]}"
        return text

    @property
    def n_obs_variants(self) -> int:
        """Texts one state can show: its own, and (with ``noise_words``) its own plus each noise sentence."""
        return 1 + len(_NOISE) if self.config.noise_words > 0 else 1

    def obs_variant_probs(self) -> np.ndarray:
        """Probability of each observation variant of a visit (the same for every state): what
        :meth:`render` draws, so a policy that reads the text has a known observation model."""
        if self.n_obs_variants == 1:
            return np.ones(1)
        nw = self.config.noise_words
        return np.array([1.0 - nw] + [nw / len(_NOISE)] * len(_NOISE))

    def variant_text(self, s: int, o: int) -> str:
        """Text of state ``s`` in observation variant ``o`` (0: no noise; k: noise sentence k - 1)."""
        return self.obs_text[s] if o == 0 else f"{self.obs_text[s]} {_NOISE[o - 1]}"

    def fingerprint(self, s: int, rng: np.random.Generator | None = None) -> list[float]:
        """The state's fixed random projection, plus noise of norm ~``fp_noise`` drawn per visit."""
        if rng is None or self.config.fp_noise <= 0:
            return self.projection_lists[s]
        fp = self.projection[s] + self.config.fp_noise * rng.standard_normal(self.config.fp_dim) / np.sqrt(self.config.fp_dim)
        return fp.tolist()


# ============================================================================ generation
def _state_text(rng: np.random.Generator, task: int, depth: int, idx: int) -> str:
    adj, room, obj = _ADJ[rng.integers(len(_ADJ))], _ROOM[rng.integers(len(_ROOM))], _OBJ[rng.integers(len(_OBJ))]
    return f"Task {task}: you are in the {adj} {room} (place {depth}-{idx}). A {obj} is here."


def _action_texts(rng: np.random.Generator, kinds: np.ndarray) -> list[str]:
    """Distinct texts for one state's action slots."""
    out: list[str] = []
    distract = list(rng.permutation(len(_DISTRACT)))
    invalid = list(rng.permutation(len(_INVALID)))
    for k in kinds:
        if k == DISTRACTOR and distract:
            out.append(_DISTRACT[distract.pop()])
        elif k == INVALID and invalid:
            out.append(_INVALID[invalid.pop()])
        else:
            while True:
                text = f"{_VERB[rng.integers(len(_VERB))]} the {_ADJ[rng.integers(len(_ADJ))]} {_OBJ[rng.integers(len(_OBJ))]}"
                if text not in out:
                    break
            out.append(text)
    return out


class _Builder:
    """Grows states task by task, depth by depth (breadth first)."""

    def __init__(self, cfg: MDPConfig, rng: np.random.Generator):
        self.cfg, self.rng = cfg, rng
        self.depth: list[int] = []
        self.task: list[int] = []
        self.terminal: list[bool] = []
        self.goal: list[bool] = []
        self.targets: dict[int, list[int]] = {}  # state -> target of each move slot

    def new(self, task: int, depth: int, terminal: bool) -> int:
        self.depth.append(depth)
        self.task.append(task)
        self.terminal.append(terminal)
        self.goal.append(False)
        if len(self.depth) > MAX_STATES:
            raise ValueError(f"MDP has more than {MAX_STATES} states; lower depth or moves, or raise recurrence")
        return len(self.depth) - 1

    def existing(self, layer: list[int], chosen: list[int]) -> int | None:
        """A random state of ``layer`` that this state's other moves do not lead to (None after a
        few draws that all hit one: a new state then)."""
        for _ in range(4):
            x = layer[int(self.rng.integers(len(layer)))]
            if x not in chosen:
                return x
        return None

    def grow_task(self, task: int) -> int:
        cfg, rng = self.cfg, self.rng
        root = self.new(task, 0, False)
        trap = self.new(task, -1, True)
        layer = [root]
        for d in range(cfg.depth):
            nxt: list[int] = []
            last = d + 1 == cfg.depth
            for s in layer:
                chosen: list[int] = []
                for m in range(cfg.moves):
                    if m > 0 and rng.random() < cfg.trap:
                        chosen.append(trap)
                        continue
                    target = self.existing(nxt, chosen) if nxt and rng.random() < cfg.recurrence else None
                    if target is None:
                        nxt.append(self.new(task, d + 1, last))
                        target = nxt[-1]
                    chosen.append(target)
                self.targets[s] = chosen
            layer = nxt
        goals = [s for s in layer if rng.random() < cfg.goal_frac] or [layer[int(rng.integers(len(layer)))]]
        for s in goals:
            self.goal[s] = True
        return root


def generate(config: MDPConfig | None = None, seed: int = 0) -> FiniteMDP:
    """The MDP of ``config`` for ``seed`` (deterministic: same arguments, same arrays and texts)."""
    cfg = (config or MDPConfig()).check()
    rng = np.random.default_rng([int(seed), 0x4D4450])
    b = _Builder(cfg, rng)
    roots = np.array([b.grow_task(k) for k in range(cfg.tasks)], dtype=np.int64)
    S, A, K = len(b.depth), cfg.moves + cfg.distractors + cfg.invalid, cfg.moves
    terminal = np.array(b.terminal, dtype=bool)
    succ = np.tile(np.arange(S)[:, None, None], (1, A, K))
    prob = np.zeros((S, A, K))
    base = np.zeros((S, A))
    kind = np.full((S, A), -1, dtype=np.int64)
    obs_text = [""] * S
    action_text: list[list[str]] = [[] for _ in range(S)]
    per_layer: dict[tuple[int, int], int] = {}
    for s in range(S):
        if terminal[s]:
            obs_text[s] = "The episode is over." if b.goal[s] or b.depth[s] < 0 else "A dead end."
            continue
        key = (b.task[s], b.depth[s])
        per_layer[key] = per_layer.get(key, 0) + 1
        obs_text[s] = _state_text(rng, b.task[s], b.depth[s], per_layer[key])
        kinds = np.array([MOVE] * cfg.moves + [DISTRACTOR] * cfg.distractors + [INVALID] * cfg.invalid)
        slots = rng.permutation(A)  # the action's slot does not reveal its kind
        kind[s, slots] = kinds
        action_text[s] = _action_texts(rng, kind[s])
        targets = b.targets[s]
        move_slots = slots[: cfg.moves]
        for m, a in enumerate(move_slots):
            succ[s, a, :] = targets  # with slip, any move's target, own target weighted up
            if K > 1:
                prob[s, a, :] = cfg.slip / (K - 1)
                prob[s, a, m] = 1.0 - cfg.slip
            else:
                prob[s, a, 0] = 1.0
            if cfg.step_reward > 0:
                base[s, a] = rng.uniform(-cfg.step_reward, cfg.step_reward)
        for a in slots[cfg.moves:]:
            prob[s, a, 0] = 1.0  # stays in s
            if kind[s, a] == INVALID:
                base[s, a] = -cfg.penalty
    _alias(cfg, rng, b, terminal, obs_text)
    proj = rng.standard_normal((S, cfg.fp_dim))
    proj /= np.linalg.norm(proj, axis=1, keepdims=True)
    arrive = np.array(b.goal, dtype=np.float64)
    return FiniteMDP(cfg, int(seed), succ, prob, base, arrive, kind, terminal, np.array(b.goal, dtype=bool),
                     np.array(b.depth), np.array(b.task), roots, obs_text, action_text, proj)


def _alias(cfg: MDPConfig, rng: np.random.Generator, b: _Builder, terminal: np.ndarray, obs_text: list[str]) -> None:
    """Give a share ``alias`` of the non-start states the text of another state of their layer."""
    if cfg.alias <= 0:
        return
    layers: dict[tuple[int, int], list[int]] = {}
    for s in range(len(terminal)):
        if not terminal[s] and b.depth[s] > 0:
            layers.setdefault((b.task[s], b.depth[s]), []).append(s)
    for members in layers.values():
        for s in members[1:]:
            if rng.random() < cfg.alias:
                obs_text[s] = obs_text[members[int(rng.integers(members.index(s)))]]


# ============================================================================ named families
FAMILIES: dict[str, MDPConfig] = {
    "tree": MDPConfig(recurrence=0.0, distractors=0, invalid=0, trap=0.2),
    "recurrent": MDPConfig(recurrence=0.8, distractors=1, invalid=1),
    "dense": MDPConfig(recurrence=0.5, step_reward=0.2),
    "stochastic": MDPConfig(recurrence=0.5, slip=0.2),
    "aliased": MDPConfig(recurrence=0.5, alias=0.5, noise_words=0.5, fp_noise=0.2),
    "long": MDPConfig(depth=6, horizon=12, moves=3, recurrence=0.8, trap=0.15),
}
"""The suite's MDP families: each changes one or two knobs of the default ``MDPConfig``."""


def family_config(family: str | None = None, **knobs: Any) -> MDPConfig:
    """A named family's config with ``knobs`` overriding it; one-line ValueError on a bad name."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"unknown MDP family {family!r}; valid: {', '.join(FAMILIES)}")
    base = asdict(FAMILIES[family]) if family else {}
    return MDPConfig.from_kwargs({**base, **knobs})


@functools.lru_cache(maxsize=32)
def _cached(cfg: MDPConfig, seed: int) -> FiniteMDP:
    return generate(cfg, seed)


# ============================================================================ the gymnasium env
class FiniteMDPEnv(TextEnv):
    """A generated MDP played as text: ``reset(seed=s)`` starts task ``s % tasks``; the admissible
    actions are the state's action texts (invalid ones included: the env rejects them with its
    penalty, as a real env rejects a well-formed but impossible command); the expert plays the
    finite-horizon optimal policy. The observation is always the current state's text (after a
    rejected or malformed command too; the env's message is ``info["feedback"]``), so text keys
    see what :mod:`agentrl.truth` samples. Reset options: ``split`` (train/valid: the same tasks)."""

    env_title = "a generated maze of rooms"

    def __init__(self, family: str | None = "recurrent", mdp_seed: int = 0, knobs: dict[str, Any] | None = None,
                 history_length: int = 2, render_mode: str | None = None):
        self.config = family_config(family, **(knobs or {}))
        super().__init__(invalid_action_penalty=self.config.penalty, history_length=history_length,
                         render_mode=render_mode)
        self.mdp = _cached(self.config, int(mdp_seed))
        # discounted by a hair, so that among equally good actions the expert takes the one that
        # gets there first (undiscounted, a distractor ties with the right move while time is left)
        self._qstar = self.mdp.optimal(gamma=0.99)[0]
        self._rng = np.random.default_rng(0)
        self._s = int(self.mdp.roots[0])

    def _reset_task(self, seed: int | None, options: dict[str, Any]):
        parse_reset_options(options, ("train", "valid"), ("mdp",))
        seed = 0 if seed is None else int(seed)
        k = seed % self.config.tasks
        self._rng = np.random.default_rng([seed, 0x454E56])
        self._s = int(self.mdp.roots[k])
        self._family = "mdp"
        return f"reach a goal room of task {k}", self.mdp.render(self._s, self._rng), "mdp", {}

    # resume: the state and the slip / text generator (its bit state) are the whole episode state
    resume_kind = "snapshot"

    def _snapshot_state(self) -> dict[str, Any]:
        return {"s": self._s, "rng": self._rng.bit_generator.state}

    def _restore_state(self, state: dict[str, Any]) -> None:
        self._s = int(state["s"])
        self._rng.bit_generator.state = state["rng"]

    def _execute(self, action: str):
        texts = self.mdp.action_text[self._s]
        if action not in texts:
            return f'Nothing happens: "{action[:80]}" is not possible here.', 0.0, False, False, {}
        a = texts.index(action)
        if self.mdp.kind[self._s, a] == INVALID:
            return "That does not work here.", 0.0, False, False, {}
        k = int(self._rng.choice(self.mdp.succ.shape[2], p=self.mdp.prob[self._s, a]))
        s2 = int(self.mdp.succ[self._s, a, k])
        reward = float(self.mdp.base_reward[self._s, a] + self.mdp.arrive_reward[s2])
        self._s = s2
        return self.mdp.render(s2, self._rng), reward, bool(self.mdp.terminal[s2]), True, {"won": bool(self.mdp.goal[s2])}

    def step(self, response: str):
        obs, reward, terminated, _, info = super().step(response)
        if not info["action_valid"]:
            # the observation is a function of the state (the truth's contract), and a rejected
            # command leaves the state as it was: its text again, the env's message in info
            info["feedback"] = obs
            obs = self._obs = self.mdp.render(self._s, self._rng)
        # the MDP's own step limit: its truth (agentrl.truth) is computed for this horizon
        return obs, reward, terminated, not terminated and self._steps >= self.config.horizon, info

    def admissible_actions(self) -> list[str] | None:
        return list(self.mdp.action_text[self._s]) or None

    def signatures(self, action: str | None) -> dict[str, str]:
        """RTMC's signatures: the true state the observation shows, and the action text."""
        return {"state_sig": self.state_key(), "action_sig": action or ""}

    def state_key(self) -> str:
        """The true state (its observation text may be noisy, or alias another state's)."""
        return f"s{self._s}"

    def expert_action(self) -> str | None:
        if self.mdp.terminal[self._s]:
            return None
        t = min(self._steps, self.config.horizon - 1)
        return self.mdp.action_text[self._s][int(np.argmax(self._qstar[t, self._s]))]
