"""``agentrl bench async``: synchronous vs asynchronous rollouts on the demo's task, same cores.

    agentrl bench async --steps 12 --staleness 1,2
    agentrl bench async --steps 12 --staleness 0,1 --modes lockstep,continuous
    agentrl bench async --warm runs/demo/sft --goals runs/arena/warm/practised.json
    agentrl bench async --engine vllm --families depth2,depth3,depth4 --modes lockstep,continuous
    agentrl bench async --engine vllm --families depth2,depth3,depth4 --runs lockstep:1,continuous:0,continuous:1 \
        --seeds 0,1,2 --sync-threads 1

The demo's RL phase (``recipes/demo_tiny.yaml``: TextCraft depth-2 goals, the tiny model
warm-started on expert trajectories, 4 goals x 8 rollouts per step, GiGPO) runs ``--steps``
optimizer steps, each in a fresh process:

* ``sync`` with ``OMP_NUM_THREADS`` = 1 and = 2 (both cores for the one loop; the better of the
  two is the baseline: on this machine tiny models often run faster on one thread);
* ``async`` at each ``--staleness`` k and each ``--modes`` producer mode (``producer_mode``:
  ``lockstep``, ``continuous``; at k >= 1 a continuous producer loads each new version between
  ticks: partial rollouts), the trainer on one thread and its producer process on the other
  (``async_producer_threads: 1``).

``--engine vllm`` generates on agentrl's vLLM engine (``--use_vllm true``: vLLM's CPU build in its
venv; the synchronous runs' engine beside the learner, the asynchronous runs' in the producer, where
a continuous producer submits each turn as a request of its own: continuous batching, env steps
while the other turns generate). ``--families`` mixes TextCraft's crafting depths
(``task_families``; without ``--goals`` the 4 goals are taken in turn from each family,
:func:`mixed_goals`): episodes of mixed lengths, where a lock-step turn waits for its slowest episode.

Per run it prints the median seconds per step after the first (TRL's ``step_time``; for async the
learner's wait for its batch is inside it), steps per hour, the learner's idle share (its wait
over the step), the producer's idle share (waiting for weights over its time), the staleness of
the trained episodes (the largest per step, and each turn's: the mean share of spans at each
staleness), and the rollout-correction figures when the run logged any. The warm start
is built once (``agentrl.demo --warm-only --quick``) unless ``--warm`` names one.

``--runs MODE:K,...`` names the asynchronous runs one by one instead of every ``--modes`` x
``--staleness`` pair (``continuous:0``: episodes that run on their own, one version each;
``continuous:1``: the same with versions loaded mid-episode, partial rollouts).

``--engine hf,vllm`` puts both engines side by side in one run: every synchronous run on each, every
asynchronous run on each unless its ``--runs`` entry names one (``lockstep:1@vllm``); the run names
then end in ``_hf`` / ``_vllm``. ``--recipe`` trains another demo recipe's RL phase (with its
``--warm`` start and ``--goals``), e.g. the SmolLM2 demo's, HF sync vs vLLM sync vs vLLM async:

    agentrl bench async --recipe recipes/demo_smollm2.yaml --warm runs/demo_smollm2_seed0/sft \
        --goals runs/demo_smollm2_seed0/practised.json --engine hf,vllm --sync-threads 2 \
        --runs lockstep:1@vllm --steps 6

A ``--goals`` file that names ``env_kwargs`` (the ALFWorld design's practised.json: its generated
games' folder) passes them to every run. ``--seeds`` repeats
every run per recipe seed and adds a summary paired by seed (:func:`paired_summary`): steps per hour,
the ratio to the best synchronous run and to the lock-step producer, and the mean training success
over the run's steps with its difference to the lock-step producer's (the learning check).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from agentrl.arena_stats import mean_se

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "demo_tiny.yaml"


def _warm(out: Path) -> tuple[Path, list[int]]:
    """The demo's quick warm start and practised goals, built once into ``out``."""
    if not (out / "practised.json").is_file():
        subprocess.run([sys.executable, "-m", "agentrl.demo", "--warm-only", "--quick", "--out", str(out)], check=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL)
    return out / "sft", json.loads((out / "practised.json").read_text())["goals"]


def mixed_goals(families: list[str], n: int = 4) -> list[int]:
    """``n`` TextCraft training goals taken in turn from each family (task seeds into the pool the
    env draws from: ``pool[seed % len(pool)]``, families in the env's order), so a run with
    ``--families`` plays every depth and its episodes' lengths differ (the first ``n`` seeds of
    the pool would all be of its first family)."""
    from agentrl_envs.textcraft import goal_pool

    pool = goal_pool("train", families)
    start: dict[str, int] = {}
    for i, (family, _) in enumerate(pool):
        start.setdefault(family, i)
    ends = {f: start[f] + sum(1 for g in pool if g[0] == f) for f in start}
    if n > len(pool):
        raise ValueError(f"{n} goals asked of families {','.join(families)}, which have {len(pool)}")
    seeds, j = [], 0
    while len(seeds) < n:
        seeds += [start[f] + j for f in start if start[f] + j < ends[f]][: n - len(seeds)]
        j += 1
    return seeds


def _mean_se(xs: list[float]) -> tuple[float, float]:
    """The arena's mean and standard error, the s.e. 0 for a single value."""
    m, se = mean_se(xs)
    return m, (0.0 if se is None else se)


def practised_file(path: Path) -> tuple[list[int], list[str]]:
    """A practised.json's goals, and the recipe overrides it carries: ``--env_kwargs`` where it
    names them (the ALFWorld design's: its generated games' folder, without which the runs would
    play other games)."""
    chosen = json.loads(path.read_text())
    kwargs = chosen.get("env_kwargs")
    return chosen["goals"], (["--env_kwargs", json.dumps(kwargs)] if kwargs else [])


def paired_summary(by_seed: dict[int, list[dict]], reference: str | None) -> list[dict]:
    """Per run name, over seeds: steps/hour, the ratio to the seed's best synchronous run and to the
    seed's ``reference`` run (each ratio taken within a seed, then averaged: paired by seed), and the
    mean training success with its paired difference to the reference's. A ratio of step times
    (``ref_s / run_s``) reads as a speedup; a run missing from a seed is left out of that seed."""
    names = list(dict.fromkeys(r["run"] for rows in by_seed.values() for r in rows))
    per = {s: {r["run"]: r for r in rows} for s, rows in by_seed.items()}
    out = []
    for name in names:
        seeds = [s for s in per if name in per[s]]
        row = {"run": name, "seeds": len(seeds),
               "steps_per_hour": _mean_se([per[s][name]["steps_per_hour"] for s in seeds]),
               "success": _mean_se([per[s][name]["success"] for s in seeds])}
        best = [min((r for r in per[s].values() if r["run"].startswith("sync")), key=lambda r: r["step_s"], default=None)
                for s in seeds]
        if all(best):
            row["x_best_sync"] = _mean_se([b["step_s"] / per[s][name]["step_s"] for b, s in zip(best, seeds, strict=True)])
        paired = [s for s in seeds if reference in per[s]]
        if reference and paired:
            row["x_reference"] = _mean_se([per[s][reference]["step_s"] / per[s][name]["step_s"] for s in paired])
            row["success_diff"] = _mean_se([per[s][name]["success"] - per[s][reference]["success"] for s in paired])
        out.append(row)
    return out


ENGINES = ("hf", "vllm")


def precision_args(recipe: Path) -> list[str]:
    """``--bf16 false`` where ``recipe`` asks for bf16 on a CPU that only emulates it (about 25x
    slower, ``agentrl.precision``): the bench times the RL phase as the demos run it, and they
    drop emulated bf16 (``agentrl.demo``); else nothing."""
    from agentrl.precision import fp32_args
    from agentrl.recipe_file import read_recipe_file

    data = read_recipe_file(recipe)
    return fp32_args(bool(data.get("bf16")), bool(data.get("use_cpu")))


def engine_list(engines: str) -> list[str]:
    """``--engine``'s engines in order (``hf``, ``vllm`` or both); a ValueError names a bad one."""
    names = engines.split(",")
    for e in names:
        if e not in ENGINES:
            raise ValueError(f"--engine {engines}: each engine must be hf or vllm")
    if len(set(names)) < len(names):
        raise ValueError(f"--engine {engines}: an engine named twice")
    return names


def async_runs(runs: str | None, modes: str, staleness: str, engines: tuple[str, ...] = ("hf",)) -> list[tuple[str, ...]]:
    """The asynchronous runs as (producer mode, k, engine): ``runs`` (``MODE:K[@ENGINE],...``; no
    engine: one run on each of ``engines``) or every ``modes`` x ``staleness`` pair on each engine;
    a ValueError names the first malformed one."""
    out = []
    for x in runs.split(",") if runs else [f"{m}:{k}" for m in modes.split(",") for k in staleness.split(",")]:
        run, _, engine = x.partition("@")
        mode, _, k = run.partition(":")
        if mode not in ("lockstep", "continuous"):
            raise ValueError(f"producer mode {mode!r}: each must be lockstep or continuous")
        if not k.isdigit():
            raise ValueError(f"{run}: the staleness k must be a whole number >= 0")
        if engine and engine not in engines:
            raise ValueError(f"{x}: the engine must be one of --engine's ({','.join(engines)})")
        out += [(mode, k, e) for e in ([engine] if engine else engines)]
    return out


def run_name(mode: str, k: str, engine: str | None = None) -> str:
    """``async_kK`` for the lock-step producer, ``cont_kK`` for the continuous one; ``_ENGINE``
    after it when a bench compares engines."""
    return f"{'async' if mode == 'lockstep' else 'cont'}_k{k}" + (f"_{engine}" if engine else "")


def run_one(name: str, sft: Path, goals: list[int], steps: int, threads: int, extra: list[str],
            work: Path, common: list[str] = (), recipe: Path = RECIPE) -> dict:
    """One training run of ``recipe``'s RL phase, ``steps`` steps; its per-step figures from metrics.jsonl."""
    out = work / name
    argv = [sys.executable, "-m", "agentrl.train", str(recipe), "--model_name_or_path", str(sft),
            "--output_dir", str(out), "--max_steps", str(steps), "--save_strategy", "no", "--save_rollouts", "false",
            "--overwrite_output_dir", "true", "--task_seeds", *map(str, goals), *common, *extra]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), WANDB_MODE="offline", HF_HUB_OFFLINE="1")
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    if r.returncode:
        lines = r.stderr.strip().splitlines()
        said = [x for x in lines if "error" in x.lower()] or lines  # a late warning may follow the error line
        raise RuntimeError(f"{name}: agentrl.train exited {r.returncode}: {said[-1] if said else ''}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [x for x in rows if "step_time" in x]
    timed = rows[1:] or rows  # the first step pays the imports and the producer's start
    step = statistics.median(x["step_time"] for x in timed)
    res = {"run": name, "threads": threads, "step_s": step, "steps_per_hour": 3600.0 / step,
           "success": statistics.mean(x.get("env/success", 0.0) for x in rows)}
    if any("time/learner_wait_s" in x for x in timed):
        res["learner_idle"] = statistics.mean(x["time/learner_wait_s"] / x["step_time"] for x in timed)
        res["producer_idle"] = statistics.mean(x["time/producer_idle_frac"] for x in timed)
        res["staleness"] = dict(sorted(Counter(int(x["async/staleness_max"]) for x in rows).items()))
        spans = {k.rsplit("/", 1)[1]: statistics.mean(x.get(k, 0.0) for x in rows)
                 for k in sorted({k for x in rows for k in x if k.startswith("async/span_staleness_frac/")})}
        if spans:
            res["span_staleness"] = {d: round(v, 3) for d, v in spans.items() if v > 0}
    if any("async/turn_requests" in x for x in rows):
        res["turn_requests_per_step"] = statistics.mean(x.get("async/turn_requests", 0.0) for x in rows)
    for k in ("correction/mismatch_k3", "correction/ess", "correction/masked_frac", "correction/truncated_frac"):
        vals = [x[k] for x in rows if k in x]
        if vals:
            res[k] = statistics.mean(vals)
    return res


def _print_table(results: list[dict], seed: int) -> None:
    print(f"seed {seed}")
    print(f"{'run':<14} {'thr':>3} {'s/step':>7} {'steps/h':>8} {'x best sync':>11} {'learner idle':>12} "
          f"{'producer idle':>13}  staleness")
    for r in results:
        idle = (f"{r['learner_idle']:>12.2f} {r['producer_idle']:>13.2f}  {r['staleness']}" if "learner_idle" in r
                else f"{'-':>12} {'-':>13}  -")
        print(f"{r['run']:<14} {r['threads']:>3} {r['step_s']:>7.2f} {r['steps_per_hour']:>8.0f} "
              f"{r['speedup_vs_best_sync']:>11.2f} {idle}")
    for r in results:
        if "span_staleness" in r:
            print(f"{r['run']}: share of turns at each staleness {r['span_staleness']}")
    for r in results:
        corr = {k.split("/")[1]: round(v, 4) for k, v in r.items() if k.startswith("correction/")}
        if corr:
            print(f"{r['run']}: rollout correction {corr}")
    for r in results:
        if "turn_requests_per_step" in r:
            print(f"{r['run']}: {r['turn_requests_per_step']:.0f} turn requests per step (each turn its own request)")


def _print_summary(summary: list[dict], reference: str | None) -> None:
    def f(v, spec):
        return f"{v[0]:{spec}} ± {v[1]:{spec.lstrip('+')}}" if v else "-"  # a signed mean, an unsigned s.e.

    print(f"paired by seed (mean ± s.e. over {summary[0]['seeds']} seeds; the reference is {reference or 'none'})")
    print(f"{'run':<14} {'steps/h':>14} {'x best sync':>13} {'x reference':>13} {'success':>15} {'- reference':>15}")
    for r in summary:
        print(f"{r['run']:<14} {f(r['steps_per_hour'], '.0f'):>14} {f(r.get('x_best_sync'), '.2f'):>13} "
              f"{f(r.get('x_reference'), '.2f'):>13} {f(r['success'], '.3f'):>15} {f(r.get('success_diff'), '+.3f'):>15}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench async", description=__doc__.splitlines()[0].strip('`"'))
    ap.add_argument("--steps", type=int, default=12, help="optimizer steps per run (default 12; the first is not timed)")
    ap.add_argument("--staleness", default="1,2", help="the max_staleness values of the async runs (default 1,2)")
    ap.add_argument("--modes", default="lockstep", help="producer modes of the async runs (producer_mode; "
                                                       "default lockstep; e.g. lockstep,continuous)")
    ap.add_argument("--sync-threads", default="1,2", help="OMP_NUM_THREADS of the sync runs (default 1,2)")
    ap.add_argument("--warm", default=None, help="a warm start folder (default: built once with agentrl.demo "
                                                 "--warm-only --quick into --work)")
    ap.add_argument("--goals", default=None, help="a practised.json whose goals the runs practise (with --warm)")
    ap.add_argument("--work", default=None, help="where runs go (default: a temporary folder)")
    ap.add_argument("--engine", default="hf",
                    help="hf: transformers' generate (default); vllm: agentrl's vLLM engine (make vllm-venv); "
                         "hf,vllm: every run on both, side by side")
    ap.add_argument("--recipe", default=None, help="the RL phase's recipe (default recipes/demo_tiny.yaml; "
                                                   "another needs --warm)")
    ap.add_argument("--families", default=None, help="TextCraft families of the tasks, comma-separated (default: the "
                                                     "recipe's depth2; e.g. depth2,depth3,depth4: mixed lengths)")
    ap.add_argument("--runs", default=None, help="the async runs as MODE:K[@ENGINE], comma-separated (instead of "
                                                 "--modes x --staleness; e.g. lockstep:1,continuous:0,continuous:1)")
    ap.add_argument("--seeds", default="0", help="recipe seeds, comma-separated (default 0); with several, a "
                                                 "summary paired by seed follows the per-seed tables")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args(argv)
    try:
        engines = engine_list(a.engine)
        runs = async_runs(a.runs, a.modes, a.staleness, tuple(engines))
        if not all(x.isdigit() for x in a.seeds.split(",")):
            raise ValueError(f"--seeds {a.seeds}: whole numbers >= 0, comma-separated")
        seeds = [int(x) for x in a.seeds.split(",")]
        recipe = Path(a.recipe) if a.recipe else RECIPE
        if not recipe.is_file():
            raise ValueError(f"--recipe {a.recipe}: no such file")
        if a.recipe and not a.warm:
            raise ValueError(f"--recipe {a.recipe}: give its warm start (--warm; the built one is the tiny demo's)")
    except ValueError as e:
        print(f"agentrl bench async: {e}", file=sys.stderr)
        return 2
    use = {e: ["--use_vllm", "true" if e == "vllm" else "false"] for e in engines}
    tag = len(engines) > 1  # names say the engine only when a bench compares them
    common: list[str] = []
    if "vllm" in engines:
        from agentrl.sampling.vllm_engine import vllm_python, vllm_venv

        if vllm_python() is None:
            print(f"agentrl bench async: --engine vllm: no vLLM venv at {vllm_venv()} (make vllm-venv)", file=sys.stderr)
            return 2
    if a.families:
        common += ["--task_families", *a.families.split(",")]
    work = Path(a.work or tempfile.mkdtemp(prefix="agentrl_bench_async_"))
    work.mkdir(parents=True, exist_ok=True)
    if a.warm:
        sft = Path(a.warm)
        goals, env_args = practised_file(Path(a.goals)) if a.goals else (list(range(4)), [])
        common += env_args
    else:
        sft, goals = _warm(work / "warm")
    if a.families and not a.goals:
        goals = mixed_goals(a.families.split(","))
    fp32 = precision_args(recipe)
    common += fp32
    by_seed = {}
    for seed in seeds:
        seeded = [*common, "--seed", str(seed)]
        results = [run_one(f"sync_t{t}" + (f"_{e}" if tag else ""), sft, goals, a.steps, int(t), use[e],
                           work / f"seed{seed}", seeded, recipe)
                   for e in engines for t in a.sync_threads.split(",")]
        for mode, k, e in runs:
            results.append(run_one(run_name(mode, k, e if tag else None), sft, goals, a.steps, 1,
                                   ["--rollout_mode", "async", "--max_staleness", k, "--async_producer_threads", "1",
                                    "--producer_mode", mode, *use[e]], work / f"seed{seed}", seeded, recipe))
        base = min((r for r in results if r["run"].startswith("sync")), key=lambda r: r["step_s"])
        for r in results:
            r["speedup_vs_best_sync"] = base["step_s"] / r["step_s"]
            r["seed"] = seed
        by_seed[seed] = results
        if not a.json:
            _print_table(results, seed)
    reference = next((run_name(m, k, e if tag else None) for m, k, e in runs if m == "lockstep"), None)
    summary = paired_summary(by_seed, reference) if len(seeds) > 1 else []
    if a.json:
        print(json.dumps({"runs": [r for rows in by_seed.values() for r in rows], "summary": summary,
                          "bf16_dropped": bool(fp32)}, indent=1))
        return 0
    if summary:
        _print_summary(summary, reference)
    print(f"({a.steps} steps per run, medians after the first; {len(goals)} practised goals; engine {a.engine}"
          f"{'; families ' + a.families if a.families else ''}; seeds {a.seeds}"
          f"{'; fp32: the recipe bf16 is emulated on this CPU' if fp32 else ''}; runs in {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
