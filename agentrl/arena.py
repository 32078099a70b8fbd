"""``agentrl arena``: credit modules raced on the same task from the same warm start.

    agentrl arena RECIPE --estimators grpo,gigpo,bigpo:embedder=hash_ngram --seeds 0,1,2 \
        [--workers N] [--steps 40] [--eval-every 10] --out DIR

Every (estimator, seed) run trains ``RECIPE`` from the same warm start (the recipe's
``model_name_or_path`` or ``--warm-start``) and differs from the others only in ``credit`` /
``credit_kwargs`` and ``seed``. Every checkpoint is evaluated on the same held-out tasks with the
settings the run was trained with (:mod:`agentrl.evaluation.heldout`): greedily, one episode a task,
or with ``--eval-samples N`` by N sampled episodes a task (a task's outcome is then its share won),
so estimators are compared *paired* over tasks and seeds. Runs go to ``N`` worker processes (one thread each), each writes
its own log, and the arena is resumable: a finished run is skipped, a killed one resumes from
its last checkpoint, an evaluated checkpoint is not evaluated again.

Output in ``DIR``: ``arena.md`` (one row per estimator, then one per run), ``arena.json`` (every number),
``curves.png`` (held-out success, mean and a +-1 s.e. band over seeds) and
``steps_to_threshold.png``. The statistics are in :mod:`agentrl.arena_stats`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.cli_args import add_env_modules, both_spellings


class ArenaError(Exception):
    """Bad arena input: one line, exit code 2."""


@dataclass(frozen=True)
class Contender:
    """One estimator of the race: a credit module name and its kwargs."""

    label: str
    """As given on the command line (``bigpo:embedder=hash_ngram``); names the run folder."""
    credit: str
    """Credit module name."""
    kwargs: tuple[tuple[str, Any], ...] = ()
    """Credit kwargs, as sorted (key, value) pairs."""

    @property
    def slug(self) -> str:
        return self.label.replace(":", "__").replace("=", "-").replace(",", "_").replace("/", "_")


def parse_contenders(spec: str) -> list[Contender]:
    """``"grpo,bigpo:embedder=hash_ngram:eps=0.1"`` -> contenders (``agentrl.credit.parse_spec``)."""
    from agentrl.credit import parse_spec

    out: list[Contender] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        try:
            name, kw = parse_spec(item)
        except ValueError as e:
            raise ArenaError(f"estimator {item!r}: {e}") from None
        out.append(Contender(item, name, tuple(sorted(kw.items()))))
    labels = [c.label for c in out]
    if not out:
        raise ArenaError("--estimators names no estimator")
    if len(set(labels)) < len(labels):
        raise ArenaError(f"--estimators lists an estimator twice: {labels}")
    return out


def with_recipe_kwargs(contenders: list[Contender], credit: str, recipe_kwargs: dict[str, Any]) -> list[Contender]:
    """A contender that names the recipe's own estimator (``credit``) runs with the recipe's
    ``credit_kwargs``, its command-line kwargs winning: ``bipace_q`` on a BiPACE_Q recipe is that
    recipe's estimator, not BiPACE_Q's defaults. Other estimators keep their defaults (their
    papers' forms) and what the command line gives them."""
    return [Contender(c.label, c.credit, tuple(sorted((dict(recipe_kwargs) | dict(c.kwargs)).items())))
            if c.credit == credit else c for c in contenders]


def parse_seeds(spec: str) -> list[int]:
    try:
        seeds = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise ArenaError(f"--seeds must be comma-separated integers, got {spec!r}") from None
    if not seeds or len(set(seeds)) < len(seeds):
        raise ArenaError(f"--seeds must list distinct integers, got {spec!r}")
    return seeds


@dataclass(frozen=True)
class RunSpec:
    """Everything one (estimator, seed) run needs; picklable for the worker pool."""

    recipe: str
    warm_start: str
    contender: Contender
    seed: int
    out: str
    steps: int
    eval_every: int
    heldout: dict[str, Any]
    extra: tuple[str, ...] = ()
    eval_samples: int = 0
    """Sampled episodes per held-out task (0: one greedy episode)."""


def train_argv(r: RunSpec) -> list[str]:
    """The ``agentrl.train`` command line of one run (resumes when a checkpoint exists)."""
    run_dir = Path(r.out)
    argv = [sys.executable, "-m", "agentrl.train", r.recipe, "--model_name_or_path", r.warm_start,
            "--output_dir", str(run_dir / "train"), "--seed", str(r.seed), "--max_steps", str(r.steps),
            "--save_steps", str(r.eval_every), "--credit", r.contender.credit,
            "--credit_kwargs", json.dumps(dict(r.contender.kwargs)), "--report_to", "none",
            # the newest complete checkpoint; a run killed before its first one starts over
            "--resume_from_checkpoint", "auto"]
    return argv + list(r.extra)


def _checkpoints(train_dir: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints of a run, by step (a folder a killed older version half-wrote is left out)."""
    from agentrl.checkpoints import incomplete_reason, step_of

    cks = [(step_of(p), p) for p in train_dir.glob("checkpoint-*") if step_of(p) is not None]
    return sorted((k, p) for k, p in cks if incomplete_reason(p) is None)


def run_one(r: RunSpec) -> dict[str, Any]:
    """Train (or resume) one run, then evaluate each of its checkpoints once; returns its result."""
    from agentrl.evaluation.heldout import HeldOutSettings
    from agentrl.plugins import import_for

    run_dir = Path(r.out)
    done = run_dir / f"result{_sampled_suffix(r.eval_samples)}.json"  # a finished arena can be re-scored
    if done.is_file():
        return json.loads(done.read_text())
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if r.steps not in dict(_checkpoints(run_dir / "train")):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        with (run_dir / "train.log").open("a") as log:
            rc = subprocess.call(train_argv(r), stdout=log, stderr=subprocess.STDOUT, env=env,
                                 preexec_fn=die_with_parent)
        if rc:  # reported with the others at the end; a rerun of the arena resumes it
            return {"label": r.contender.label, "seed": r.seed,
                    "failed": f"exit {rc}; see {run_dir / 'train.log'}"}
    train_s = time.time() - t0
    import_for(run_dir / "train", None)  # the held-out episodes play here: the run's env modules
    settings = HeldOutSettings(**r.heldout)
    curve = []
    for step, ck in _checkpoints(run_dir / "train"):
        cache = run_dir / f"eval_step{step:05d}{_sampled_suffix(r.eval_samples)}.json"
        if not cache.is_file():
            cache.write_text(json.dumps(evaluate(str(ck), settings, r.eval_samples)))
        res = json.loads(cache.read_text())
        curve.append({"step": step, "success": res["success"], "wins": res["wins"]})
    state = run_dir / "train" / f"checkpoint-{r.steps}" / "trainer_state.json"
    history = json.loads(state.read_text()).get("log_history", []) if state.is_file() else []
    result = {"label": r.contender.label, "seed": r.seed, "curve": curve, "train_s": train_s,
              "train_log": _train_metrics(history)}
    done.write_text(json.dumps(result))
    return result


def _train_metrics(history: list[dict]) -> dict[str, float]:
    """Means over steps of the credit diagnostics and step times the trainer logged."""
    keys = ("credit/singleton_frac", "credit/step_signal_frac", "credit/pace_branch_frac",
            "time/rollout_s", "time/update_s", "time/credit_s", "env/success")
    out = {}
    for k in keys:
        vals = [h[k] for h in history if isinstance(h.get(k), (int, float))]
        if vals:
            out[k] = sum(vals) / len(vals)
    return out


def _eval_set(practised: dict[str, Any] | None, hs, samples: int) -> str:
    """What the curves measure, in words (arena.md's first line)."""
    tasks = (f"fresh draws of {len(practised['goals'])} practised goals ({len(hs.seeds)} tasks)" if practised
             else f"{hs.episodes} held-out tasks ({hs.split})")
    if not samples:
        return tasks
    return f"{tasks}, {samples} episodes sampled a task at temperature {hs.temperature:g} (a task's share won)"


def _sampled_suffix(samples: int) -> str:
    """Cache-name suffix: a greedy and a sampled evaluation of one checkpoint are kept apart."""
    return f"_sampled{samples}" if samples else ""


def evaluate(model_dir: str, settings, samples: int = 0) -> dict[str, Any]:
    """One checkpoint on the held-out tasks: greedy, one episode a task (``samples`` 0; ``wins``
    per task True/False), or ``samples`` episodes a task at the recipe's temperature, top-k,
    top-p and min-p (``wins`` per task the share won; ``success`` their mean in %). The sampled
    draws use one key for every checkpoint, so two checkpoints meet the same random numbers."""
    from agentrl.evaluation.heldout import evaluate_wins, sampled_success

    if not samples:
        return evaluate_wins(model_dir, settings)
    rates = sampled_success(model_dir, settings, samples)
    return {"success": 100 * sum(rates) / len(rates), "episodes": samples * len(rates), "samples": samples,
            "wins": rates}


def _visits(rollouts: Path) -> dict[str, list[float]]:
    """A run's per-task success at each visit (``arena_stats.visit_rates``) from its saved rollouts
    (``save_rollouts``); empty when it saved none."""
    from agentrl.arena_stats import visit_rates
    from agentrl.records import read_jsonl

    return visit_rates((r["group_id"], r["traj_id"], r["won"])
                       for f in sorted(rollouts.glob("iter_*.jsonl")) for r in read_jsonl(f))


def _warm_eval(out: Path, warm: str, heldout: dict[str, Any], samples: int = 0) -> dict[str, Any]:
    """Step 0 of every curve: the shared warm start, evaluated once."""
    from agentrl.evaluation.heldout import HeldOutSettings

    cache = out / f"warm_start_eval{_sampled_suffix(samples)}.json"
    if not cache.is_file():
        cache.write_text(json.dumps(evaluate(warm, HeldOutSettings(**heldout), samples)))
    return json.loads(cache.read_text())


def _pool_run(specs: list[RunSpec], workers: int) -> list[dict[str, Any]]:
    """Runs in ``workers`` processes (spawned: each imports torch once, one thread each)."""
    import multiprocessing as mp

    results: list[dict[str, Any]] = []
    n = len(specs)
    t0 = time.time()
    if workers <= 1:
        it = map(run_one, specs)
        pool = None
    else:
        pool = mp.get_context("spawn").Pool(workers, initializer=_worker_init)
        it = pool.imap_unordered(run_one, specs)
    try:
        for k, res in enumerate(it, 1):
            results.append(res)
            if "failed" in res:
                print(f"[arena] {k}/{n} FAILED: {res['label']} seed {res['seed']} ({res['failed']})", flush=True)
                continue
            final = res["curve"][-1]["success"] if res["curve"] else float("nan")
            print(f"[arena] {k}/{n} done: {res['label']} seed {res['seed']} final held-out "
                  f"{final:.1f}% ({(time.time() - t0) / 60:.1f} min elapsed)", flush=True)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return results


def die_with_parent() -> None:
    """SIGTERM when the arena dies. Without it a killed arena leaves its training subprocesses
    running, and the rerun that resumes the arena starts a second trainer writing into the same
    run folder."""
    import signal

    from agentrl_envs.child import die_with_parent as _dwp

    _dwp(signal.SIGTERM)


def _worker_init() -> None:
    die_with_parent()
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def _check_contender(cfg) -> None:
    """What ``agentrl.train`` would refuse for this contender, raised before any run starts
    (e.g. bipace_q's fingerprint layer on a model with fewer blocks): a RecipeError."""
    from agentrl.config import credit_kwargs, validate_config
    from agentrl.trainer.credited import credit_requirements
    from agentrl.trainer.tasks import _check_fingerprint_layer

    validate_config(cfg)
    if "fingerprint" in credit_requirements(cfg.credit, credit_kwargs(cfg)) and Path(cfg.model_name_or_path).is_dir():
        _check_fingerprint_layer(cfg.model_name_or_path, cfg.fingerprint_layer)


def fp32_where_bf16_emulated(cfg, sets: list[str]) -> list[str]:
    """``--bf16 false`` for every run, with a line saying so, where the recipe asks for bf16 on a
    CPU that only emulates it (about 25x slower: ``agentrl.precision``), as the demos whose warm
    starts the arena races from do; ``--set bf16=...`` decides instead when given."""
    from agentrl.precision import fp32_args

    if any(s.partition("=")[0] == "bf16" for s in sets):
        return []
    if flags := fp32_args(bool(cfg.bf16), bool(cfg.use_cpu)):
        print("[arena] bf16 is emulated on this CPU (no AVX512-BF16 or AMX): every run trains in fp32 "
              "(--set bf16=true keeps it)", flush=True)
    return flags


def _read_practised(path: str) -> dict[str, Any]:
    """The goals to race on and their evaluation seeds, as ``agentrl.demo --warm-only`` wrote them."""
    try:
        d = json.loads(Path(path).read_text())
        goals, seeds = d["goals"], d["eval_seeds"]
        split, families = d["eval_split"], d["families"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ArenaError(f"--practised {path}: not a practised-goals file ({type(e).__name__}: {e}); "
                         "`python -m agentrl.demo --warm-only --out DIR` writes DIR/practised.json") from None
    if not (goals and seeds and all(isinstance(x, int) for x in goals + seeds)):
        raise ArenaError(f"--practised {path}: goals and eval_seeds must be non-empty lists of integers")
    env_kwargs = d.get("env_kwargs")  # a design with generated games (ALFWorld) names their folder here
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise ArenaError(f"--practised {path}: env_kwargs must be a mapping, got {type(env_kwargs).__name__}")
    return {"goals": goals, "eval_seeds": seeds, "eval_split": split, "families": families, "env_kwargs": env_kwargs}


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="agentrl arena", description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", help="training recipe (YAML); only credit, credit_kwargs and seed vary")
    p.add_argument("--estimators", required=True,
                   help="comma-separated credit modules, each optionally name:key=value[:key=value]")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--out", required=True, help="arena folder (resumable: rerun the same command)")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 1)),
                   help="runs in parallel, one thread each (default: the number of cores)")
    p.add_argument("--warm-start", default=None, help="model folder every run starts from (default: the recipe's)")
    p.add_argument("--steps", type=int, default=None, help="RL steps per run (default: the recipe's max_steps)")
    p.add_argument("--eval-every", type=int, default=10, help="checkpoint and evaluate every this many steps")
    p.add_argument("--eval-split", default="valid", help="held-out split (default valid)")
    p.add_argument("--eval-episodes", type=int, default=59, help="held-out tasks (seeds 0..n-1 of the split)")
    p.add_argument("--eval-samples", type=int, default=0,
                   help="score each task by this many episodes sampled at the recipe's temperature, its share "
                        "won (default 0: one greedy episode a task)")
    p.add_argument("--eval-batch", type=int, default=0,
                   help="episodes generated together at most in an evaluation (default 0: all at once); "
                        "bounds its memory")
    p.add_argument("--threshold", type=float, default=None,
                   help="success (%%) for steps-to-threshold (default: warm start + 10 points)")
    p.add_argument("--baseline", default=None, help="estimator label the others are compared with (default: the first)")
    p.add_argument("--practised", default=None, metavar="PRACTISED_JSON",
                   help="race on a demo's practised goals (`agentrl.demo --warm-only` writes OUT/practised.json): "
                        "RL on its goals, evaluation on its fresh draws instead of --eval-split/--eval-episodes")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra recipe override for every run (e.g. --set learning_rate=1e-4)")
    add_env_modules(p)
    return both_spellings(p).parse_args(argv)


def _import_plugins(recipe: str, flag: list[str]) -> list[str]:
    """The recipe's ``env_modules`` and ``--env-modules``, imported (the recipe's folder and the
    working folder on the path): a plug-in's estimators can race."""
    from agentrl.plugins import import_plugins, module_names, recipe_dirs
    from agentrl.recipe_file import read_recipe_file

    mods = module_names(read_recipe_file(recipe).get("env_modules")) + module_names(flag)
    return import_plugins(mods, recipe_dirs(recipe))


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    from agentrl.arena_stats import summarize, write_outputs
    from agentrl.config import RecipeError, load_recipe

    try:
        modules = _import_plugins(args.recipe, args.env_modules)  # before the estimators are named
        contenders = parse_contenders(args.estimators)
        seeds = parse_seeds(args.seeds)
        baseline = args.baseline or contenders[0].label
        if baseline not in [c.label for c in contenders]:
            raise ArenaError(f"--baseline {baseline!r} is not among --estimators")
        if args.workers < 1 or args.eval_every < 1 or args.eval_episodes < 1:
            raise ArenaError("--workers, --eval-every and --eval-episodes must be >= 1")
        if args.eval_samples < 0 or args.eval_batch < 0:
            raise ArenaError("--eval-samples and --eval-batch must be >= 0")
        extra = []
        for s in args.set:
            k, eq, v = s.partition("=")
            if not eq:
                raise ArenaError(f"--set takes KEY=VALUE, got {s!r}")
            extra += [f"--{k}", v]
        if args.env_modules:  # every run imports them too
            extra += ["--env_modules", *modules]
        practised = _read_practised(args.practised) if args.practised else None
        if practised:
            extra += ["--task_seeds", *map(str, practised["goals"])]
            if practised["env_kwargs"]:  # the warm start's games (its practised.json): every run plays them
                extra += ["--env_kwargs", json.dumps(practised["env_kwargs"])]
        overrides = list(extra) + (["--model_name_or_path", args.warm_start] if args.warm_start else [])
        cfg = load_recipe(args.recipe, overrides)
        extra += fp32_where_bf16_emulated(cfg, args.set)
        contenders = with_recipe_kwargs(contenders, cfg.credit, dict(cfg.credit_kwargs or {}))
        for c in contenders:  # every contender's recipe is checked before any run starts
            _check_contender(load_recipe(args.recipe, overrides + [
                "--credit", c.credit, "--credit_kwargs", json.dumps(dict(c.kwargs))]))
    except (ArenaError, RecipeError) as e:
        print(f"agentrl arena: {e}", file=sys.stderr)
        return 2
    from agentrl.evaluation.heldout import HeldOutSettings

    steps = args.steps or cfg.max_steps
    if steps < 1:
        print("agentrl arena: --steps (or the recipe's max_steps) must be >= 1", file=sys.stderr)
        return 2
    warm = str(Path(cfg.model_name_or_path).resolve()) if Path(cfg.model_name_or_path).is_dir() else cfg.model_name_or_path
    if practised:
        hs = HeldOutSettings.from_config(cfg, practised["eval_split"], families=practised["families"],
                                         seeds=practised["eval_seeds"])
    else:
        hs = HeldOutSettings.from_config(cfg, args.eval_split, args.eval_episodes)
    heldout = {**hs.to_dict(), "max_batch": args.eval_batch}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = [RunSpec(str(Path(args.recipe).resolve()), warm, c, s, str(out / "runs" / c.slug / f"seed{s}"),
                     steps, min(args.eval_every, steps), heldout, tuple(extra), args.eval_samples)
             for s in seeds for c in contenders]  # seed-major: a stopped arena leaves whole pairs
    print(f"[arena] {len(specs)} runs ({len(contenders)} estimators x {len(seeds)} seeds), {steps} steps each, "
          f"{args.workers} workers; logs in {out / 'runs'}/*/seed*/train.log", flush=True)
    for c in contenders:
        print(f"[arena] {c.label}: credit {c.credit}, credit_kwargs {dict(c.kwargs)}", flush=True)
    t0 = time.time()
    warm_res = _warm_eval(out, warm, heldout, args.eval_samples)
    results = _pool_run(specs, args.workers)
    run_dirs = {(r.contender.label, r.seed): Path(r.out) for r in specs}
    for res in results:
        if "failed" not in res:
            res["visits"] = _visits(run_dirs[res["label"], res["seed"]] / "train" / "rollouts")
    wall = time.time() - t0
    failed = [res for res in results if "failed" in res]
    if failed:
        print(f"[arena] {len(failed)} of {len(specs)} runs failed (rerun the same command to retry them; "
              "finished runs are kept):", file=sys.stderr)
        for res in failed:
            print(f"  {res['label']} seed {res['seed']}: {res['failed']}", file=sys.stderr)
        return 1
    threshold = args.threshold if args.threshold is not None else warm_res["success"] + 10.0
    summary = summarize(results, warm_res, [c.label for c in contenders], seeds, baseline, threshold, steps)
    summary.update(recipe=args.recipe, warm_start=warm, heldout=heldout, wall_s=wall, workers=args.workers,
                   credit_kwargs={c.label: dict(c.kwargs) for c in contenders},
                   eval_set=_eval_set(practised, hs, args.eval_samples))
    write_outputs(summary, out)
    print((out / "arena.md").read_text())
    print(f"[arena] wrote {out / 'arena.md'}, arena.json, curves.png, steps_to_threshold.png "
          f"({wall / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
