"""``agentrl credit advise RUN``: which estimator suits a run's task, from its saved rollouts.

It measures, from the step records, the properties the truth factorial varies
(docs/results/truth_factorial.md): state recurrence across a group (by state key), the share of
invalid actions and their penalty, reward density, episode length, and, where the records carry
state keys, slips and aliased or noisy observation texts. It measures the same properties on the
factorial's own conditions (the truth bench's MDPs and policies, sampled here), finds the nearest
conditions, and ranks the estimators by that condition's measured effect (cosine with dJ/dtheta
minus GRPO's, mean +- s.e. over 16 MDPs, tabular policy), printing the evidence and the distance.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..credit.batch import Batch, factorize_rows
from ..credit.parts import key_obs

# ============================================================================ the factorial
ESTIMATORS = ("gigpo", "bigpo", "bipace_q", "hgpo", "hgpo_pairs", "rtmc", "salt", "rloo", "graphgpo", "g2po")
"""The estimators the factorial measured against GRPO (its tabular-policy table's columns)."""


@dataclass(frozen=True)
class FactorialRow:
    """One condition of the factorial: its knobs and each estimator's cosine minus GRPO's."""

    label: str
    knobs: tuple[tuple[str, float], ...]
    grpo_cos: tuple[float, float]
    effects: tuple[tuple[float, float], ...]
    """(mean, s.e.) per ``ESTIMATORS`` entry."""

    def effect(self, name: str) -> tuple[float, float]:
        return self.effects[ESTIMATORS.index(name)]


def _row(label: str, knobs: dict[str, float], grpo: tuple[float, float], *effects: tuple[float, float]) -> FactorialRow:
    return FactorialRow(label, tuple(knobs.items()), grpo, effects)


# docs/results/truth_factorial.md, "Every estimator, both policies" and "The graph estimators",
# tabular policy (make truth-factorial, 2026-11-26 and 2026-11-28): every condition shares depth 4, horizon 8, 3 moves, no distractor,
# no trap, 30% goal leaves, 4 tasks. SALT's 0 is GRPO's gradient up to rounding.
_NI, _IP = {"invalid": 0}, {"invalid": 1, "penalty": 0.1}
FACTORIAL: tuple[FactorialRow, ...] = (
    _row("no invalid, rec 0, goal only", {**_NI, "recurrence": 0, "step_reward": 0}, (0.41, 0.01),
         (-0.001, 0.003), (-0.001, 0.003), (-0.002, 0.002), (-0.042, 0.005), (-0.001, 0.003), (0.001, 0.003),
         (0, 0), (0.003, 0.001), (-0.036, 0.006), (-0.007, 0.003)),
    _row("no invalid, rec 0, dense", {**_NI, "recurrence": 0, "step_reward": 0.2}, (0.43, 0.01),
         (0.007, 0.004), (0.007, 0.004), (-0.002, 0.003), (-0.044, 0.007), (0.007, 0.004), (0.030, 0.006),
         (0, 0), (0.013, 0.003), (-0.054, 0.01), (0.018, 0.007)),
    _row("no invalid, rec 0.8, goal only", {**_NI, "recurrence": 0.8, "step_reward": 0}, (0.45, 0.01),
         (-0.019, 0.002), (-0.019, 0.002), (-0.014, 0.002), (-0.064, 0.004), (-0.027, 0.002), (-0.014, 0.002),
         (0, 0), (0.003, 0.001), (0.003, 0.002), (-0.011, 0.003)),
    _row("no invalid, rec 0.8, dense", {**_NI, "recurrence": 0.8, "step_reward": 0.2}, (0.47, 0.01),
         (-0.008, 0.003), (-0.008, 0.003), (-0.010, 0.002), (-0.062, 0.004), (-0.014, 0.003), (0.014, 0.005),
         (0, 0), (0.015, 0.003), (-0.008, 0.006), (0.013, 0.005)),
    _row("invalid -0.1, rec 0, goal only", {**_IP, "recurrence": 0, "step_reward": 0}, (0.42, 0.02),
         (0.045, 0.004), (0.045, 0.004), (0.038, 0.003), (0.020, 0.007), (0.044, 0.004), (0.061, 0.005),
         (0, 0), (0.010, 0.003), (0.09, 0.007), (0.073, 0.005)),
    _row("invalid -0.1, rec 0, dense", {**_IP, "recurrence": 0, "step_reward": 0.2}, (0.43, 0.01),
         (0.047, 0.003), (0.047, 0.003), (0.037, 0.002), (0.014, 0.005), (0.044, 0.003), (0.065, 0.003),
         (0, 0), (0.006, 0.002), (0.035, 0.012), (0.08, 0.003)),
    _row("invalid -0.1, rec 0.8, goal only", {**_IP, "recurrence": 0.8, "step_reward": 0}, (0.42, 0.01),
         (0.039, 0.003), (0.039, 0.003), (0.039, 0.003), (0.025, 0.005), (0.038, 0.003), (0.051, 0.006),
         (0, 0), (0.010, 0.004), (0.087, 0.008), (0.063, 0.004)),
    _row("invalid -0.1, rec 0.8, dense", {**_IP, "recurrence": 0.8, "step_reward": 0.2}, (0.44, 0.01),
         (0.028, 0.003), (0.028, 0.003), (0.026, 0.003), (-0.002, 0.005), (0.026, 0.003), (0.043, 0.005),
         (0, 0), (0.010, 0.002), (0.077, 0.01), (0.057, 0.004)),
    _row("no invalid, rec 0.8, goal only + slip 0.2", {**_NI, "recurrence": 0.8, "slip": 0.2}, (0.31, 0.01),
         (-0.018, 0.001), (-0.018, 0.001), (-0.014, 0.001), (-0.058, 0.003), (-0.023, 0.001), (-0.010, 0.001),
         (0, 0), (0.004, 0.001), (0.025, 0.003), (0.019, 0.002)),
    _row("no invalid, rec 0.8, goal only + alias 0.5", {**_NI, "recurrence": 0.8, "alias": 0.5}, (0.45, 0.01),
         (-0.011, 0.002), (-0.019, 0.002), (-0.014, 0.002), (-0.037, 0.004), (-0.021, 0.002), (-0.014, 0.002),
         (0, 0), (0.003, 0.001), (0.024, 0.003), (0.016, 0.004)),
    _row("no invalid, rec 0.8, goal only + noise words 0.5", {**_NI, "recurrence": 0.8, "noise_words": 0.5},
         (0.45, 0.01), (-0.024, 0.002), (-0.019, 0.002), (-0.014, 0.002), (-0.184, 0.007), (-0.023, 0.002),
         (-0.014, 0.002), (0, 0), (0.003, 0.001), (-0.018, 0.002), (-0.056, 0.004)),
    _row("invalid, no penalty, rec 0.8, goal only", {"invalid": 1, "penalty": 0, "recurrence": 0.8}, (0.39, 0.01),
         (-0.011, 0.002), (-0.011, 0.002), (-0.007, 0.002), (-0.051, 0.004), (-0.016, 0.002), (-0.015, 0.003),
         (0, 0), (0.003, 0.001), (0.027, 0.006), (0.011, 0.004)),
    _row("invalid, no penalty, rec 0, goal only", {"invalid": 1, "penalty": 0, "recurrence": 0}, (0.37, 0.01),
         (0.014, 0.003), (0.014, 0.003), (0.015, 0.003), (-0.013, 0.006), (0.011, 0.003), (-0.002, 0.006),
         (0, 0), (0.001, 0.001), (0.039, 0.011), (0.021, 0.004)),
)
SHARED_KNOBS = {"distractors": 0, "trap": 0}
"""Knobs every factorial condition sets (the rest are ``MDPConfig``'s defaults)."""
N_MDPS = 16
"""MDPs per condition behind each effect's s.e."""

# ============================================================================ measuring a run
FEATURES = ("invalid_share", "invalid_penalty", "reward_density", "recurrence", "slip", "alias", "noise")
"""The measured properties that place a run among the conditions (episode length is reported,
not compared: every condition has the same horizon)."""
NEEDS_KEYS = ("slip", "alias", "noise")
"""Measurable only where the records carry state keys (text alone confounds them)."""


def _share(x: np.ndarray) -> float | None:
    return float(x.mean()) if len(x) else None


def measure(records: list[Any]) -> dict[str, Any]:
    """The run's properties (README of this function's module; each a share in [0, 1] but the
    penalty, which is in reward units, and the mean episode length in steps)."""
    b = Batch.from_records(records)
    penalty = b.penalty
    # ``valid`` where recorded; records from elsewhere without it: a penalised step is an invalid one
    valid = np.array([p == 0 if v is None else bool(v) for v, p in zip(b.field("valid", None), penalty, strict=True)],
                     dtype=bool)
    invalid = ~valid
    pen = float(np.mean(np.where(penalty[invalid] > 0, penalty[invalid], -np.minimum(b.reward[invalid], 0))))\
        if invalid.any() else 0.0
    keyed = np.array([k is not None for k in b.field("state_key", None)])
    out: dict[str, Any] = {
        "records": b.n, "groups": b.n_groups, "rollouts": b.n_traj,
        "episode_length": float(b.traj_len.mean()) if b.n else 0.0,
        "state_key_share": float(keyed.mean()) if b.n else 0.0,
        "invalid_share": float(invalid.mean()) if b.n else 0.0,
        "invalid_penalty": pen,
        "reward_density": _share(b.reward[valid & b.has_next] != 0) or 0.0,
        "recurrence": _merge_share(b),
    }
    full_keys = b.n > 0 and bool(keyed.all())
    out["slip"] = _slip_share(b) if full_keys else None
    out["alias"], out["noise"] = _text_vs_key(b) if full_keys else (None, None)
    return out


def _merge_share(b: Batch) -> float:
    """Share of the states entered from another state whose group entered them from >= 2
    different states: 0 in a tree (each state has one parent), > 0 where paths meet."""
    s = key_obs(b)
    idx = np.flatnonzero(b.has_next)
    moved = idx[s[idx + 1] != s[idx]]
    if not len(moved):
        return 0.0
    child, parent = s[moved + 1], s[moved]
    pairs = np.unique(np.stack([child, parent], axis=1), axis=0)
    parents_per_child = np.bincount(pairs[:, 0])
    entered = parents_per_child[parents_per_child > 0]
    return float(np.mean(entered >= 2))


def _slip_share(b: Batch) -> float:
    """Among (state, action) pairs taken >= 2 times with a next state, the share whose next state
    varied (0 in a deterministic env)."""
    s = key_obs(b)
    idx = np.flatnonzero(b.has_next)
    if not len(idx):
        return 0.0
    sa = factorize_rows(s[idx], b.act_id[idx])[0]
    n = np.bincount(sa)
    nxt = np.unique(np.stack([sa, s[idx + 1]], axis=1), axis=0)
    outcomes = np.bincount(nxt[:, 0], minlength=len(n))
    rep = n >= 2
    return float(np.mean(outcomes[rep] >= 2)) if rep.any() else 0.0


def _text_vs_key(b: Batch) -> tuple[float, float]:
    """(alias, noise): the share of a group's observation texts shown for >= 2 states, and of
    its states shown with >= 2 texts."""
    s = key_obs(b)
    text = factorize_rows(b.group, b.obs_id)[0]
    pairs = np.unique(np.stack([text, s], axis=1), axis=0)
    per_text = np.bincount(pairs[:, 0])
    per_state = np.bincount(pairs[:, 1])
    return float(np.mean(per_text[per_text > 0] >= 2)), float(np.mean(per_state[per_state > 0] >= 2))


# ============================================================================ the conditions, measured
REFERENCE_SEEDS, REFERENCE_BATCHES = 4, 4
"""MDPs and batches per condition for its measured properties (B = 4 tasks x G = 8, as the factorial)."""


@functools.lru_cache(maxsize=1)
def reference() -> tuple[dict[str, float], ...]:
    """Every factorial condition's measured properties: its MDPs (seeds 0..3) under the
    factorial's policy (``TabularPolicy.random``, seeded by the MDP), sampled as the truth bench
    samples, keyed by the true state; averaged over the batches."""
    from agentrl_envs.mdp import family_config, generate

    from .exact import TabularPolicy
    from .sample import sample_batch

    out = []
    for row in FACTORIAL:
        cfg = family_config(None, **SHARED_KNOBS, **dict(row.knobs))
        acc: dict[str, list[float]] = {f: [] for f in FEATURES}
        for seed in range(REFERENCE_SEEDS):
            mdp = generate(cfg, seed)
            pi = TabularPolicy.random(mdp, seed).probs
            rng = np.random.default_rng([seed, 0x414456])
            for _ in range(REFERENCE_BATCHES):
                recs = sample_batch(mdp, pi, 4, 8, rng, fingerprints=False).records
                m = measure([dict(r, state_key=r["state_sig"]) for r in recs])
                for f in FEATURES:
                    acc[f].append(m[f])
        out.append({f: float(np.mean(v)) for f, v in acc.items()})
    return tuple(out)


def _scales(ref: tuple[dict[str, float], ...]) -> dict[str, float]:
    """Each feature's unit in the distance: its largest value among the conditions (so every
    feature spans about [0, 1] over the factorial)."""
    return {f: max(max(r[f] for r in ref), 1e-9) for f in FEATURES}


def distances(run: dict[str, Any], ref: tuple[dict[str, float], ...]) -> tuple[np.ndarray, list[str]]:
    """Euclidean distance of the run to every condition over the features the run has (scaled by
    ``_scales``), and the features used."""
    sc = _scales(ref)
    used = [f for f in FEATURES if run.get(f) is not None]
    d = np.array([math.sqrt(sum(((run[f] - r[f]) / sc[f]) ** 2 for f in used)) for r in ref])
    return d, used


def advise(records: list[Any], k: int = 3) -> dict[str, Any]:
    """The run's properties, the ``k`` nearest conditions and the ranking by the nearest one."""
    run = measure(records)
    ref = reference()
    d, used = distances(run, ref)
    order = np.argsort(d, kind="stable")
    best = FACTORIAL[int(order[0])]
    ranking = sorted(
        [{"estimator": e, "effect": best.effect(e)[0], "se": best.effect(e)[1]} for e in ESTIMATORS]
        + [{"estimator": "grpo", "effect": 0.0, "se": 0.0}],
        key=lambda r: -r["effect"])
    for r in ranking:
        r["verdict"] = "baseline" if r["estimator"] == "grpo" else _verdict(r["effect"], r["se"])
    return {
        "measured": run,
        "features_used": used,
        "not_measured": [f for f in FEATURES if f not in used],
        "nearest": [{"condition": FACTORIAL[i].label, "distance": float(d[i]),
                     "measured": ref[i], "grpo_cos": FACTORIAL[i].grpo_cos[0]} for i in order[:k]],
        "distance": float(d[order[0]]),
        "ranking": ranking,
        "not_in_factorial": ["bipace_diff", "pace_q", "pace_diff", "appo"],
        "source": "docs/results/truth_factorial.md (make truth-factorial), tabular policy, "
                  f"{N_MDPS} MDPs per condition",
    }


def _verdict(effect: float, se: float) -> str:
    """A 2-s.e. reading of one effect (the page's marks are Holm-adjusted over 11 comparisons)."""
    if se == 0:  # SALT's row: GRPO's gradient on every batch, up to rounding
        return "GRPO's gradient"
    if effect > 2 * se:
        return "better than GRPO"
    if effect < -2 * se:
        return "worse than GRPO"
    return "not resolved"


# ============================================================================ command line
def _fmt(v: Any) -> str:
    return "n/a (needs state keys)" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def _print(out: dict[str, Any], source: str) -> None:
    m = out["measured"]
    print(f"{source}: {m['records']} step records, {m['groups']} groups, {m['rollouts']} rollouts, "
          f"state keys on {m['state_key_share']:.0%} of steps")
    print("measured (the factorial's conditions, measured the same way, in brackets for the nearest):")
    near = out["nearest"][0]["measured"]
    for f in ("episode_length", *FEATURES):
        ref = f"  [{near[f]:.3f}]" if f in near else ""
        print(f"  {f:<16} {_fmt(m[f])}{ref}")
    print("nearest conditions of the truth factorial (distance in units of each feature's range):")
    for c in out["nearest"]:
        print(f"  {c['distance']:6.2f}  {c['condition']}  (GRPO cosine {c['grpo_cos']:.2f})")
    if out["distance"] > 1.0:
        print(f"  ! the run is {out['distance']:.2f} from every measured condition: the ranking below is a "
              "guess from the nearest one")
    print(f"ranking in '{out['nearest'][0]['condition']}': cosine with dJ/dtheta minus GRPO's, mean ± s.e. "
          f"({out['source']}):")
    for i, r in enumerate(out["ranking"], 1):
        print(f"  {i:2d}. {r['estimator']:<11} {r['effect']:+.3f} ± {r['se']:.3f}  {r['verdict']}")
    print(f"not in the factorial (no evidence either way): {', '.join(out['not_in_factorial'])}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="agentrl credit advise",
        description="Measure a run's task properties from its saved rollouts and rank the credit "
                    "estimators by the truth factorial's nearest conditions.")
    ap.add_argument("rollouts", help="a run folder (its rollouts/), a folder of *.jsonl, or one JSONL of step records")
    ap.add_argument("--nearest", type=int, default=3, help="conditions to list (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from ..credit.compare import rollouts_command

    if not Path(args.rollouts).exists():
        print(f"agentrl credit advise: {args.rollouts}: no such file or folder", file=sys.stderr)
        return 2
    if args.nearest < 1:
        print("agentrl credit advise: --nearest must be >= 1", file=sys.stderr)
        return 2
    return rollouts_command("agentrl credit advise", args.rollouts, lambda recs: advise(recs, args.nearest), _print,
                            args.json)


if __name__ == "__main__":
    sys.exit(main())
