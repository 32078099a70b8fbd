"""``agentrl bench envs``: reset and step latency of each registered env, driven by its expert.

    agentrl bench envs --episodes 10 [--envs ID,...] [--alfworld-engines native,textworld] [--fleet N]

Each env is driven by its own expert through ``gymnasium.make`` (the path the trainer uses) over
``--episodes`` seeds of the train split. Reports the first reset apart (ALFWorld loads its game
there), the median of the others (wall and CPU of this process: the honest figure on a shared
machine), the median and 90th percentile step, and the expert's win rate; ALFWorld once per
engine (``--alfworld-engines``, default native and textworld side by side); ``--fleet N`` adds
the time to create and reset N envs warm. An env without an expert, or one that cannot be made
here (a missing extra, data set or sandbox), is listed as skipped with its reason on one line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench envs", description=__doc__.splitlines()[0].strip('`"'))
    ap.add_argument("--envs", default=None, help="comma-separated env ids (default: all registered)")
    ap.add_argument("--episodes", type=int, default=10, help="expert episodes per env (seeds 0..N-1)")
    ap.add_argument("--alfworld-engines", default="native,textworld",
                    help="ALFWorld engines benched side by side (default native,textworld; '' = the env's default)")
    ap.add_argument("--fleet", type=int, default=0,
                    help="also time creating + resetting this many envs, warm (default 0: off)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
