"""Micro-benchmarks. ``python -m agentrl.bench credit --records 100000 --json``,
``python -m agentrl.bench envs --episodes 10``, ``python -m agentrl.bench rollout --env ID``
(``agentrl/rollout/env_pool_bench.py``) and ``python -m agentrl.bench overhead``
(``agentrl/trainer/overhead_bench.py``).

``credit``: times every credit estimator (``agentrl.credit.compute`` end to end, from a list of
record dicts) on a synthetic batch shaped like ALFWorld: groups of G=8 rollouts of up to 50
steps through a per-task state graph (so observations repeat across rollouts), ~200-character
observations, terminal 0/1 reward, 8-16 action tokens, and a ``fingerprint`` per record (a noisy
per-state vector standing in for the actor's hidden state; the model forward is not timed).
Reports the median of ``--repeats`` runs: wall seconds, CPU seconds of this process (the
honest figure on a shared machine) and records/s (from wall time). Run it with
OMP_NUM_THREADS=1 (one BLAS thread) for one-core figures.

``envs``: reset and step latency of each registered env, driven by the env's own expert through
``gymnasium.make`` (the path the trainer uses) over ``--episodes`` seeds of the train split.
Reports the first reset apart (ALFWorld loads its game there), the median of the others, the
median and 90th percentile step, and the expert's win rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import zlib
from typing import Any

import numpy as np

_ROOMS = [
    "cabinet",
    "countertop",
    "drawer",
    "fridge",
    "microwave",
    "shelf",
    "sinkbasin",
    "stoveburner",
    "toaster",
]
_VERBS = ["go to", "open", "close", "take", "put", "examine", "heat", "cool", "clean", "use"]

# (name, kwargs) rows of the credit benchmark: every estimator at its defaults plus the variants
# with a different cost profile.
CREDIT_CASES: list[tuple[str, dict[str, Any]]] = [
    ("grpo", {}),
    ("rloo", {}),
    ("gigpo", {}),
    ("hgpo", {}),
    ("hgpo_pairs", {}),
    ("bigpo", {}),
    ("bigpo", {"embedder": "hash_ngram", "eps": 0.25}),
    ("bigpo", {"embedder": "obs_hash", "eps": 0.0}),
    ("pace_diff", {}),
    ("pace_q", {}),
    ("bipace_q", {}),
    ("bipace_diff", {}),
    ("rtmc", {}),
    ("salt", {}),
    ("salt", {"match": "embedding"}),
    ("bigpo", {"eps": "auto"}),
]


def synthetic_records(
    n_records: int, group_size: int = 8, max_steps: int = 50, dim: int = 256, seed: int = 0
) -> list[dict[str, Any]]:
    """ALFWorld-shaped step records (see module docstring); at least ``n_records`` records,
    trimmed to exactly ``n_records`` by dropping whole trailing trajectories' tails."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    g = 0
    while len(out) < n_records:
        n_states = int(rng.integers(20, 60))
        goal = n_states - 1
        items = [f"{_ROOMS[i % len(_ROOMS)]} {1 + i // len(_ROOMS)}" for i in range(int(rng.integers(8, 20)))]
        obs_text = [
            f"Task {g}: You are in the middle of a room. Looking quickly around you, you see "
            + ", ".join(items[(s + k) % len(items)] for k in range(4))
            + f". You are facing the {items[s % len(items)]}. Next to it, you see nothing. (state {s})"
            for s in range(n_states)
        ]
        acts = [f"{_VERBS[a % len(_VERBS)]} {items[a % len(items)]}" for a in range(12)]
        trans = rng.integers(0, n_states, size=(n_states, len(acts)))
        trans[:, 0] = np.minimum(np.arange(n_states) + 1, goal)  # action 0 makes progress
        base = rng.standard_normal((n_states, dim)).astype(np.float32)
        p_good = float(rng.uniform(0.2, 0.9))
        for r in range(group_size):
            s = 0
            for t in range(max_steps):
                a = 0 if rng.random() < p_good else int(rng.integers(1, len(acts)))
                s2 = int(trans[s, a])
                done = s2 == goal or t == max_steps - 1
                fp = base[s] + 0.15 * rng.standard_normal(dim).astype(np.float32)
                toks = [zlib.crc32(w.encode()) % 50000 for w in acts[a].split()] + [
                    int(x) for x in rng.integers(0, 50000, 6)
                ]
                out.append(
                    {
                        "group_id": f"task{g}",
                        "traj_id": f"task{g}-r{r}",
                        "t": t,
                        "obs": obs_text[s],
                        "action": acts[a],
                        "reward": 1.0 if s2 == goal else 0.0,
                        "done": done,
                        "won": s2 == goal,
                        "action_token_ids": toks,
                        "fingerprint": fp,
                    }
                )
                s = s2
                if done:
                    break
        g += 1
    del out[n_records:]
    if out:
        out[-1]["done"] = True
    return out


def bench_credit(n_records: int, repeats: int, dim: int, cases=None) -> list[dict[str, Any]]:
    from agentrl import credit

    records = synthetic_records(n_records, dim=dim)
    rows = []
    for name, kw in cases or CREDIT_CASES:
        times, cpu = [], []
        diag: dict[str, float] = {}
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            res = credit.compute(name, records, **kw)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            diag = res.diagnostics
        sec = statistics.median(times)
        label = name + ("" if not kw else "[" + ",".join(f"{k}={v}" for k, v in kw.items()) + "]")
        rows.append(
            {
                "estimator": label,
                "records": n_records,
                "seconds": round(sec, 4),
                "cpu_seconds": round(statistics.median(cpu), 4),
                "records_per_s": round(n_records / sec) if sec > 0 else None,
                "step_signal_frac": round(diag.get("step_signal_frac", 0.0), 4),
                "singleton_frac": round(diag["singleton_frac"], 4) if "singleton_frac" in diag else None,
            }
        )
    return rows


def bench_envs(env_ids: list[str], episodes: int) -> list[dict[str, Any]]:
    """Expert-driven latency rows, one per env (see the module docstring)."""
    import gymnasium as gym

    import agentrl.envs  # noqa: F401 - registers the agentrl/* ids
    from agentrl.actions import format_action

    rows = []
    for env_id in env_ids:
        env = gym.make(env_id)
        resets, steps, wins = [], [], 0
        try:
            for ep in range(episodes):
                t0 = time.perf_counter()
                _, info = env.reset(seed=ep)
                resets.append(time.perf_counter() - t0)
                done = False
                while not done:
                    body = env.unwrapped.expert_action()
                    if body is None:
                        break
                    t0 = time.perf_counter()
                    _, _, term, trunc, info = env.step(format_action(body))
                    steps.append(time.perf_counter() - t0)
                    done = term or trunc
                wins += bool(info.get("won"))
        finally:
            env.close()
        later = resets[1:] or resets
        rows.append(
            {
                "env": env_id,
                "episodes": episodes,
                "first_reset_ms": round(1e3 * resets[0], 2),
                "reset_ms": round(1e3 * statistics.median(later), 2),
                "step_ms": round(1e3 * statistics.median(steps), 2) if steps else None,
                "step_p90_ms": round(1e3 * float(np.percentile(steps, 90)), 2) if steps else None,
                "steps": len(steps),
                "expert_win_rate": wins / episodes,
            }
        )
    return rows


def _main_envs(args: argparse.Namespace) -> int:
    from agentrl import envs

    ids = [s.strip() for s in args.envs.split(",")] if args.envs else list(envs.ENV_SPECS)
    bad = [i for i in ids if i not in envs.ENV_SPECS]
    if bad or args.episodes < 1:
        msg = f"unknown env id(s) {bad}; valid: {', '.join(envs.ENV_SPECS)}" if bad else "--episodes must be positive"
        print(f"error: {msg}", file=sys.stderr)
        return 2
    rows = bench_envs(ids, args.episodes)
    if args.json:
        print(json.dumps({"episodes": args.episodes, "results": rows}, indent=1))
        return 0
    print(f"{'env':<22} {'first_reset_ms':>14} {'reset_ms':>9} {'step_ms':>8} {'p90_ms':>8} {'steps':>6} {'expert_win':>10}")
    for r in rows:
        print(
            f"{r['env']:<22} {r['first_reset_ms']:>14.2f} {r['reset_ms']:>9.2f} {r['step_ms'] or 0:>8.2f} "
            f"{r['step_p90_ms'] or 0:>8.2f} {r['steps']:>6} {r['expert_win_rate']:>10.2f}"
        )
    return 0


def _main_rollout(args: argparse.Namespace) -> int:
    """``rollout``: env share of rollout wall time with 0 (in-process) and W env workers
    (``agentrl/rollout/env_pool_bench.py``)."""
    from agentrl.rollout import env_pool_bench as eb

    try:
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        workers = [-1]
    if (min(workers) < 0 or args.episodes < 1 or args.repeats < 1
            or not set(args.overlap.split(",")) <= {"none", "halves"}):
        print("error: --workers must be integers >= 0, --episodes and --repeats positive, --overlap from "
              "none, halves", file=sys.stderr)
        return 2
    gen, tok = eb.tiny_generate() if args.model == "tiny" else (None, None)
    try:
        rows = [eb.bench_rollout(args.env, args.episodes, w, args.repeats, args.max_turns, gen, tok, overlap=o)
                for w in workers for o in args.overlap.split(",")]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"results": rows}, indent=1))
    else:
        eb.print_table(rows)
    return 0


def _main_overhead(args: argparse.Namespace) -> int:
    """``overhead``: agentrl's step over plain TRL's on equal work (``agentrl/trainer/overhead_bench.py``)."""
    import os

    if min(args.repeats, args.steps, args.tokens, args.rows) < 1 or args.rows % 4:
        print("error: --repeats, --steps, --tokens must be positive and --rows a positive multiple of 4",
              file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from agentrl.trainer import overhead_bench as ob

    res = ob.bench_overhead(args.repeats, args.steps, args.tokens, args.rows, env_workers=args.env_workers)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        ob.print_overhead(res)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench", description="Micro-benchmarks: credit estimators on a synthetic ALFWorld-shaped batch "
                                             "(credit), env reset/step latency driven by each env's expert (envs).",
                                 epilog="examples: agentrl bench credit --records 100000 --json; "
                                        "agentrl bench envs --episodes 10")
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("credit", help="time every credit estimator on a synthetic ALFWorld-shaped batch")
    c.add_argument("--records", type=int, default=100_000, help="records in the batch (default 100000)")
    c.add_argument("--repeats", type=int, default=3, help="runs per estimator; the median is reported")
    c.add_argument("--dim", type=int, default=256, help="fingerprint dimension (default 256)")
    c.add_argument("--estimators", default=None, help="comma-separated names (default: all cases)")
    c.add_argument("--json", action="store_true", help="print JSON instead of a table")
    e = sub.add_parser("envs", help="reset/step latency of each env, driven by its expert")
    e.add_argument("--envs", default=None, help="comma-separated env ids (default: all registered)")
    e.add_argument("--episodes", type=int, default=10, help="expert episodes per env (seeds 0..N-1)")
    e.add_argument("--json", action="store_true", help="print JSON instead of a table")
    r = sub.add_parser("rollout", help="env share of rollout wall time, in-process vs env workers")
    r.add_argument("--env", default="agentrl/TextCraft-v0", help="env id (module:ID imports module first)")
    r.add_argument("--episodes", type=int, default=32, help="episodes per rollout (default 32)")
    r.add_argument("--workers", default="0,2", help="comma-separated worker counts, 0 = in-process")
    r.add_argument("--repeats", type=int, default=3, help="rollouts per count; medians are reported")
    r.add_argument("--max-turns", type=int, default=None, help="turn cap (default the env's step limit)")
    r.add_argument("--model", choices=["none", "tiny"], default="none",
                   help="'tiny': a tiny random model generates each turn (its tokens unused)")
    r.add_argument("--overlap", default="none",
                   help="comma-separated: none, halves (two halves pipelined: one steps while the other generates)")
    r.add_argument("--json", action="store_true", help="print JSON instead of a table")
    o = sub.add_parser("overhead", help="agentrl's training step over plain TRL's on equal work (tiny model)")
    o.add_argument("--repeats", type=int, default=3, help="train() calls per trainer, alternating (default 3)")
    o.add_argument("--steps", type=int, default=2, help="timed steps per call, after one warm-up (default 2)")
    o.add_argument("--tokens", type=int, default=24, help="new tokens per row (default 24)")
    o.add_argument("--rows", type=int, default=32, help="rows per step, 4 generations per task (default 32)")
    o.add_argument("--env-workers", default="0", help="agentrl's env_workers (default 0: in-process envs)")
    o.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    if args.what == "overhead":
        return _main_overhead(args)
    if args.what == "rollout":
        return _main_rollout(args)
    if args.what == "envs":
        return _main_envs(args)
    if args.records < 1 or args.repeats < 1 or args.dim < 1:
        print("error: --records, --repeats and --dim must be positive", file=sys.stderr)
        return 2
    cases = None
    if args.estimators:
        from agentrl.credit import available

        names = [s.strip() for s in args.estimators.split(",") if s.strip()]
        bad = [s for s in names if s not in available()]
        if bad:
            print(f"error: unknown estimator(s) {bad}; valid: {', '.join(available())}", file=sys.stderr)
            return 2
        cases = [(n, kw) for n, kw in CREDIT_CASES if n in names]
    rows = bench_credit(args.records, args.repeats, args.dim, cases)
    if args.json:
        print(
            json.dumps(
                {"records": args.records, "dim": args.dim, "repeats": args.repeats, "results": rows}, indent=1
            )
        )
    else:
        print(f"{'estimator':<44} {'seconds':>8} {'cpu_s':>8} {'records/s':>11} {'step_sig':>8}")
        for r in rows:
            print(
                f"{r['estimator']:<44} {r['seconds']:>8.3f} {r['cpu_seconds']:>8.3f} {r['records_per_s']:>11,} "
                f"{r['step_signal_frac']:>8.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
