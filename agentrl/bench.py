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
Reports the first reset apart (ALFWorld loads its game there), the median of the others (wall
and CPU of this process: the honest figure on a shared machine), the median and 90th percentile
step, and the expert's win rate; ALFWorld once per engine (``--alfworld-engines``, default
native and textworld side by side); ``--fleet N`` adds the time to create and reset N envs warm.
An env without an expert, or one that cannot be made here (a missing extra, data set or
sandbox), is listed as skipped with its reason on one line.
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
    ("appo", {}),
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


def _env_variants(env_ids: list[str], alfworld_engines: list[str]) -> list[tuple[str, str, dict]]:
    """(label, env id, kwargs) to bench: ALFWorld once per engine (before/after side by side)."""
    out = []
    for env_id in env_ids:
        if env_id == "agentrl/ALFWorld-v0" and alfworld_engines:
            out += [(f"{env_id}[{e}]", env_id, {"engine": e}) for e in alfworld_engines]
        else:
            out.append((env_id, env_id, {}))
    return out


def _skip_reason(env) -> str | None:
    """Why the expert cannot drive this env's steps, or None."""
    expert = getattr(env.unwrapped, "expert_action", None)
    if expert is None:
        return f"{type(env.unwrapped).__name__} has no expert_action (nothing to drive its steps)"
    return None


def bench_envs(env_ids: list[str], episodes: int, alfworld_engines: list[str] | None = None,
               fleet: int = 0) -> list[dict[str, Any]]:
    """Expert-driven latency rows, one per env (and per ALFWorld engine); an env that cannot be
    made, reset or driven by its expert gets a row with ``skipped`` (the reason, one line)."""
    import agentrl_envs  # noqa: F401 - registers the agentrl/* ids
    import gymnasium as gym

    rows = []
    for label, env_id, kwargs in _env_variants(env_ids, alfworld_engines or []):
        try:
            row = _bench_one(gym, env_id, kwargs, episodes, fleet)
        except Exception as e:      # a missing extra, data set or sandbox: report, go on
            row = {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}
        rows.append({"env": label, "episodes": episodes, **row})
    return rows


def _bench_one(gym, env_id: str, kwargs: dict, episodes: int, fleet: int) -> dict[str, Any]:
    from agentrl_envs.actions import format_action

    env = gym.make(env_id, **kwargs)
    resets, steps, wins = [], [], 0
    reset_cpu, step_cpu = [], []
    try:
        reason = _skip_reason(env)
        if reason:
            return {"skipped": reason}
        for ep in range(episodes):
            t0, c0 = time.perf_counter(), time.process_time()
            _, info = env.reset(seed=ep)
            resets.append(time.perf_counter() - t0)
            reset_cpu.append(time.process_time() - c0)
            done = False
            while not done:
                try:
                    body = env.unwrapped.expert_action()
                except NotImplementedError:
                    return {"skipped": f"{type(env.unwrapped).__name__}.expert_action is not implemented"}
                if body is None:
                    break
                t0, c0 = time.perf_counter(), time.process_time()
                _, _, term, trunc, info = env.step(format_action(body))
                steps.append(time.perf_counter() - t0)
                step_cpu.append(time.process_time() - c0)
                done = term or trunc
            wins += bool(info.get("won"))
    finally:
        env.close()
    later, later_cpu = resets[1:] or resets, reset_cpu[1:] or reset_cpu
    row = {
        "first_reset_ms": round(1e3 * resets[0], 2),
        "reset_ms": round(1e3 * statistics.median(later), 2),
        "reset_cpu_ms": round(1e3 * statistics.median(later_cpu), 2),
        "step_ms": round(1e3 * statistics.median(steps), 2) if steps else None,
        "step_cpu_ms": round(1e3 * statistics.median(step_cpu), 3) if steps else None,
        "step_p90_ms": round(1e3 * float(np.percentile(steps, 90)), 2) if steps else None,
        "steps": len(steps),
        "expert_win_rate": wins / episodes,
    }
    if fleet:
        row["fleet"] = fleet
        row["fleet_create_reset_s"] = round(_fleet(gym, env_id, kwargs, fleet), 3)
    return row


def _fleet(gym, env_id: str, kwargs: dict, n: int) -> float:
    """Seconds to create and reset ``n`` envs (seeds 0..n-1), warm: the process has played the
    env before (per-process caches filled)."""
    t0 = time.perf_counter()
    envs = []
    for i in range(n):
        e = gym.make(env_id, **kwargs)
        e.reset(seed=i)
        envs.append(e)
    took = time.perf_counter() - t0
    for e in envs:
        e.close()
    return took


def _main_envs(args: argparse.Namespace) -> int:
    import agentrl_envs as envs
    from agentrl_envs.alfworld.env import ENGINES

    ids = [s.strip() for s in args.envs.split(",")] if args.envs else list(envs.ENV_SPECS)
    bad = [i for i in ids if i not in envs.ENV_SPECS]
    engines = [s.strip() for s in args.alfworld_engines.split(",") if s.strip()]
    bad_engines = [e for e in engines if e not in ENGINES]
    if bad or bad_engines or args.episodes < 1 or args.fleet < 0:
        msg = (f"unknown env id(s) {bad}; valid: {', '.join(envs.ENV_SPECS)}" if bad else
               f"unknown ALFWorld engine(s) {bad_engines}; valid: {', '.join(ENGINES)}" if bad_engines else
               "--episodes must be positive" if args.episodes < 1 else "--fleet must be >= 0")
        print(f"error: {msg}", file=sys.stderr)
        return 2
    rows = bench_envs(ids, args.episodes, engines, args.fleet)
    if args.json:
        print(json.dumps({"episodes": args.episodes, "results": rows}, indent=1))
        return 0
    print(f"{'env':<32} {'first_reset_ms':>14} {'reset_ms':>9} {'reset_cpu':>9} {'step_ms':>8} "
          f"{'step_cpu':>8} {'p90_ms':>8} {'steps':>6} {'expert_win':>10}"
          + (f" {'fleet_s':>8}" if args.fleet else ""))
    for r in rows:
        if "skipped" in r:
            print(f"{r['env']:<32} skipped: {r['skipped']}")
            continue
        print(
            f"{r['env']:<32} {r['first_reset_ms']:>14.2f} {r['reset_ms']:>9.2f} {r['reset_cpu_ms']:>9.2f} "
            f"{r['step_ms'] or 0:>8.2f} {r['step_cpu_ms'] or 0:>8.3f} {r['step_p90_ms'] or 0:>8.2f} "
            f"{r['steps']:>6} {r['expert_win_rate']:>10.2f}"
            + (f" {r['fleet_create_reset_s']:>8.3f}" if args.fleet else "")
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
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError:
        env_kwargs = None
    if not isinstance(env_kwargs, dict):
        print(f"error: --env-kwargs must be a JSON object, got {args.env_kwargs!r}", file=sys.stderr)
        return 2
    gen, tok = eb.tiny_generate() if args.model == "tiny" else (None, None)
    try:
        rows = [eb.bench_rollout(args.env, args.episodes, w, args.repeats, args.max_turns, gen, tok, overlap=o,
                                 env_kwargs=env_kwargs)
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
    e.add_argument("--alfworld-engines", default="native,textworld",
                   help="ALFWorld engines benched side by side (default native,textworld; '' = the env's default)")
    e.add_argument("--fleet", type=int, default=0,
                   help="also time creating + resetting this many envs, warm (default 0: off)")
    e.add_argument("--json", action="store_true", help="print JSON instead of a table")
    r = sub.add_parser("rollout", help="env share of rollout wall time, in-process vs env workers")
    r.add_argument("--env", default="agentrl/TextCraft-v0", help="env id (module:ID imports module first)")
    r.add_argument("--episodes", type=int, default=32, help="episodes per rollout (default 32)")
    r.add_argument("--workers", default="0,2", help="comma-separated worker counts, 0 = in-process")
    r.add_argument("--repeats", type=int, default=3, help="rollouts per count; medians are reported")
    r.add_argument("--max-turns", type=int, default=None, help="turn cap (default the env's step limit)")
    r.add_argument("--env-kwargs", default="{}",
                   help='JSON object of env constructor arguments, e.g. \'{"engine": "textworld"}\'')
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
