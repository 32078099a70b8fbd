"""``agentrl bench envs``: reset and step latency of each registered env, driven by its expert.

    agentrl bench envs --episodes 10 [--envs ID,...] [--alfworld-engines native,textworld] [--fleet N]
    agentrl bench envs --server --episodes 10 [--envs ID,...]

Each env is driven by its own expert through ``gymnasium.make`` (the path the trainer uses) over
``--episodes`` seeds of the train split. Reports the first reset apart (ALFWorld loads its game
there), the median of the others (wall and CPU of this process: the honest figure on a shared
machine), the median and 90th percentile step, and the expert's win rate; ALFWorld once per
engine (``--alfworld-engines``, default native and textworld side by side); ``--fleet N`` adds
the time to create and reset N envs warm. An env without an expert, or one that cannot be made
here (a missing extra, data set or sandbox), is listed as skipped with its reason on one line.

``--server`` compares each env in-process with the same env behind ``agentrl-envs serve`` (a
child process on loopback, played through ``openenv:URL``): the expert's episodes are recorded
in-process, then replayed through the server on the same seeds. Per env: resets/s and steps/s
both ways (1 / median), and the server's overhead per step: the median step through the server
minus the median in-process step plus the prompts the server renders with every observation
(``user_prompt`` for h = 0..2 and ``turn_message``), i.e. transport, OpenEnv's server and JSON.
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


def bench_server(env_ids: list[str], episodes: int) -> list[dict[str, Any]]:
    """In-process vs through ``agentrl-envs serve``, one row per env (module docstring); an env
    that cannot be benched gets a row with ``skipped``."""
    rows = []
    for env_id in env_ids:
        try:
            row = _server_one(env_id, episodes)
        except Exception as e:      # a missing extra, data set, sandbox or expert: report, go on
            row = {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}
        rows.append({"env": env_id, "episodes": episodes, **row})
    return rows


def _server_one(env_id: str, episodes: int) -> dict[str, Any]:
    from agentrl_envs.interop.local_server import LocalServer
    from agentrl_envs.probe import make_env

    local = make_env(env_id)
    try:
        inproc, scripts = _play_timed(local, episodes, None, with_prompts=True)
    finally:
        local.close()
    with LocalServer(env_id) as srv:
        remote = make_env("openenv:" + srv.url)
        try:
            served, _ = _play_timed(remote, episodes, scripts, with_prompts=False)
        finally:
            remote.close()
    med = {k: statistics.median(v) for k, v in {**_prefixed("in_", inproc), **_prefixed("srv_", served)}.items()}
    return {
        "steps": len(served["step"]),
        "inproc_reset_ms": round(1e3 * med["in_reset"], 3), "server_reset_ms": round(1e3 * med["srv_reset"], 3),
        "inproc_step_ms": round(1e3 * med["in_step"], 3),
        "inproc_step_prompts_ms": round(1e3 * med["in_step_prompts"], 3),
        "server_step_ms": round(1e3 * med["srv_step"], 3),
        "server_step_client_cpu_ms": round(1e3 * med["srv_step_cpu"], 3),
        "resets_per_s": [round(1 / med["in_reset"], 1), round(1 / med["srv_reset"], 1)],
        "steps_per_s": [round(1 / med["in_step"], 1), round(1 / med["srv_step"], 1)],
        "overhead_step_ms": round(1e3 * (med["srv_step"] - med["in_step_prompts"]), 3),
    }


def _prefixed(prefix: str, d: dict) -> dict:
    return {prefix + k: v for k, v in d.items()}


def _play_timed(env, episodes: int, scripts: list[list[str]] | None, with_prompts: bool):
    """Seeds 0..episodes-1: the expert's episodes (``scripts`` None: recorded and returned) or
    ``scripts`` replayed. Times each reset after the first and each step (with the server's prompt
    work after it, in-process); the CPU of this process per step."""
    from agentrl_envs.actions import format_action
    from agentrl_envs.prompts import history_entry, turn_message, user_prompt

    t = {"reset": [], "step": [], "step_prompts": [], "step_cpu": []}
    recorded = []
    for ep in range(episodes):
        t0 = time.perf_counter()
        obs, info = env.reset(seed=ep)
        if ep:
            t["reset"].append(time.perf_counter() - t0)
        script = [] if scripts is None else scripts[ep]
        history, k = [], 0
        while True:
            if scripts is None:
                body = env.unwrapped.expert_action()
                if body is None:
                    break
                script.append(format_action(body))
            elif k >= len(script):
                break
            response = script[k]
            t0, c0 = time.perf_counter(), time.process_time()
            result = env.step(response)
            t["step"].append(time.perf_counter() - t0)
            t["step_cpu"].append(time.process_time() - c0)
            history.append((obs, history_entry(result[4], response)))
            obs, info, k = result[0], result[4], k + 1
            done = result[2] or result[3]
            if with_prompts and not done:  # what the server renders with each observation
                for h in range(3):
                    user_prompt(env.unwrapped, obs, info, history, k, h)
                turn_message(env.unwrapped, obs, info, k)
            t["step_prompts"].append(time.perf_counter() - t0)
            if done:
                break
        recorded.append(script)
    if not t["step"]:
        raise ValueError("the expert took no step")
    return t, recorded


def _print_server(rows: list[dict[str, Any]]) -> None:
    print(f"{'env':<24} {'resets/s in|srv':>16} {'steps/s in|srv':>16} {'step_ms':>8} {'+prompts':>9} "
          f"{'srv_step':>9} {'overhead':>9} {'steps':>6}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['env']:<24} skipped: {r['skipped']}")
            continue
        rs, ss = r["resets_per_s"], r["steps_per_s"]
        print(f"{r['env']:<24} {rs[0]:>7.0f} | {rs[1]:<6.0f} {ss[0]:>7.0f} | {ss[1]:<6.0f} {r['inproc_step_ms']:>8.3f} "
              f"{r['inproc_step_prompts_ms']:>9.3f} {r['server_step_ms']:>9.3f} {r['overhead_step_ms']:>9.3f} "
              f"{r['steps']:>6}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench envs", description=__doc__.splitlines()[0].strip('`"'))
    ap.add_argument("--envs", default=None, help="comma-separated env ids (default: all registered)")
    ap.add_argument("--episodes", type=int, default=10, help="expert episodes per env (seeds 0..N-1)")
    ap.add_argument("--alfworld-engines", default="native,textworld",
                    help="ALFWorld engines benched side by side (default native,textworld; '' = the env's default)")
    ap.add_argument("--fleet", type=int, default=0,
                    help="also time creating + resetting this many envs, warm (default 0: off)")
    ap.add_argument("--server", action="store_true",
                    help="compare each env in-process with the same env behind agentrl-envs serve (OpenEnv)")
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
    if args.server:
        rows = bench_server(ids, args.episodes)
        if args.json:
            print(json.dumps({"episodes": args.episodes, "server": True, "results": rows}, indent=1))
        else:
            _print_server(rows)
        return 0
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
