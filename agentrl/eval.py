"""``agentrl eval``: roll a checkpoint out on an env split and print a paper-style table.

    agentrl eval --checkpoint runs/x/checkpoint-50 --split valid --episodes 60
    agentrl eval --checkpoint A --checkpoint B --families pick,clean --temperature 0.4 --out eval.json

The rollout settings default to the ones the checkpoint was trained with (the run folder's
``recipe.yaml``, else the checkpoint's ``training_args.bin``): env id, env kwargs, context mode,
history length, prefill, tokens per action (``max_completion_length``), max turns and max prompt
tokens. Each can be overridden (``--env``, ``--env-kwargs``, ``--context-mode``,
``--history-length``, ``--prefill``, ``--max-new-tokens``, ``--max-turns``,
``--max-prompt-tokens``); the settings used are printed, with a warning for each override that
departs from training (a checkpoint evaluated with other prompts can score 0% where it scores
35% with its own).

The results JSON goes to ``--out``, by default ``eval_<env>_<split>.json`` in the (first)
checkpoint folder.

Task seeds are ``seed_start .. seed_start+episodes-1`` (or ``--seeds 3,5,8``): the same seeds give
the same tasks, so two checkpoints evaluated with the same flags saw the same episodes.
Success is the env's ``won`` flag; score is the mean final-step reward x 100 (WebShop's score).

Tool-using reasoning (``agentrl/ToolReason-v0``) is reported in APPO's Table 1 shape instead: one
column per task family (benchmark) with accuracy (math, verified) or mean token-F1 (QA) x 100
and an Avg column (the unweighted mean over families, as the paper averages benchmarks), then
tool calls per episode (python / search) and the format-error rate per family. To evaluate on a
local benchmark file, name it with ``--dataset NAME=PATH`` (repeatable; NAME is a math benchmark
of ``agentrl_envs.tasks.benchmarks`` or a QA dataset of ``agentrl_envs.tasks.qa``): every problem of the
file is played once, in file order, and ``--families`` defaults to the datasets named::

    agentrl eval --checkpoint runs/appo/x/checkpoint-200 --env agentrl/ToolReason-v0 \
        --dataset gsm8k=data/gsm8k_test.jsonl --dataset hotpotqa=data/hotpot_dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.cli_args import both_spellings
from agentrl.recipe_file import first_line

DEFAULT_EPISODES = 20
"""Episodes (task seeds 0..n-1) per checkpoint unless asked otherwise; the notebook uses it too."""


class EvalError(Exception):
    """Bad eval input: reported as one line, exit code 2."""


# tool-reasoning numbers of a cell: cell key -> (episode_metrics key, scale)
TOOL_CELL = {
    "task_score": ("env/task_score", 100.0), "task_score_se": ("env/task_score_se", 100.0),
    "accuracy": ("env/accuracy", 100.0), "accuracy_se": ("env/accuracy_se", 100.0),
    "f1": ("env/f1", 100.0), "f1_se": ("env/f1_se", 100.0),
    "python_calls": ("env/tool_calls/python", 1.0), "search_calls": ("env/tool_calls/search", 1.0),
    "tool_calls": ("env/tool_calls", 1.0),
    "format_error_rate": ("env/format_error_rate", 1.0), "format_error_rate_se": ("env/format_error_rate_se", 1.0),
}


def cell(metrics: dict[str, float]) -> dict[str, float]:
    """One table cell from ``agentrl.rollout.metrics.episode_metrics``: rates in points (x 100);
    tool-reasoning episodes add ``TOOL_CELL``'s keys (scores in points, calls per episode,
    format-error rate as a fraction)."""
    tools = {k: scale * metrics[m] for k, (m, scale) in TOOL_CELL.items() if m in metrics}
    return tools | {
        "episodes": int(metrics["env/episodes"]),
        "success": 100.0 * metrics["env/success"],
        "success_se": 100.0 * metrics["env/success_se"],  # binomial standard error, in points
        "score": 100.0 * metrics["env/score"],
        "mean_length": metrics["env/episode_len"],
        "invalid_rate": metrics["env/invalid_action_rate"],
        "error_episodes": int(metrics["env/error_episodes"]),  # env or prompt failures, counted as failed
    }


@dataclass
class EvalResult:
    checkpoint: str
    env_id: str
    split: str
    per_family: dict[str, dict[str, float]] = field(default_factory=dict)
    all: dict[str, float] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    avg: dict[str, float] = field(default_factory=dict)
    """Tool reasoning: the unweighted mean of the families' ``task_score`` (APPO's Avg) and its
    s.e. sqrt(sum se^2) / k; empty for other envs."""

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "env_id": self.env_id, "split": self.split,
                "per_family": self.per_family, "all": self.all, "avg": self.avg, "settings": self.settings}


def summarize(episodes, checkpoint: str, env_id: str, split: str, settings: dict) -> EvalResult:
    """Aggregate rollout Episodes into per-family and overall cells (``episode_metrics``)."""
    from agentrl.rollout.metrics import episode_metrics, episode_summary

    summ = [episode_summary(ep) for ep in episodes]
    fams = sorted({s["family"] or "all" for s in summ})
    per_family = {f: cell(episode_metrics([s for s in summ if (s["family"] or "all") == f])) for f in fams}
    scored = [c for c in per_family.values() if "task_score" in c]
    avg = {}
    if scored:
        k = len(scored)
        avg = {"task_score": sum(c["task_score"] for c in scored) / k,
               "task_score_se": sum(c["task_score_se"] ** 2 for c in scored) ** 0.5 / k,
               "families": k, "episodes": sum(c["episodes"] for c in scored)}
    return EvalResult(checkpoint=checkpoint, env_id=env_id, split=split, per_family=per_family,
                      all=cell(episode_metrics(summ)), settings=settings, avg=avg)


def markdown_table(results: list[EvalResult], metric: str = "success") -> str:
    """Rows = checkpoints, columns = task families + All; cells 'value (n)'."""
    fams = sorted({f for r in results for f in r.per_family})
    labels = row_labels([r.checkpoint for r in results])
    head = "| checkpoint | " + " | ".join(fams + ["All"]) + " |"
    sep = "|" + "---|" * (len(fams) + 2)
    rows = [head, sep]
    for r in results:
        cells = []
        for f in fams:
            c = r.per_family.get(f)
            cells.append(f"{c[metric]:.1f} ({c['episodes']})" if c else "-")
        cells.append(f"{r.all[metric]:.1f} ({r.all['episodes']})")
        rows.append(f"| {labels[r.checkpoint]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def has_tool_scores(results: list[EvalResult]) -> bool:
    """Whether the results are tool-reasoning ones (printed by ``tool_tables``)."""
    return bool(results) and all(r.avg for r in results)


def _metric_label(results: list[EvalResult], fam: str) -> str:
    kinds = {k for r in results for k in ("accuracy", "f1") if k in r.per_family.get(fam, {})}
    return {"accuracy": "acc", "f1": "F1"}.get(next(iter(kinds)), "") if len(kinds) == 1 else "acc/F1"


def tool_tables(results: list[EvalResult]) -> str:
    """APPO's Table 1 shape: rows = checkpoints, columns = task families + Avg, cells
    'accuracy or F1 x 100 (episodes)'; then tool calls per episode 'python / search' and the
    format-error rate per family + All."""
    fams = sorted({f for r in results for f in r.per_family})
    labels = row_labels([r.checkpoint for r in results])
    sep = "|" + "---|" * (len(fams) + 2)

    def table(title, heads, last, fmt, final):
        rows = [title, "", "| checkpoint | " + " | ".join(heads + [last]) + " |", sep]
        for r in results:
            cells = [fmt(r.per_family[f]) if f in r.per_family else "-" for f in fams]
            rows.append(f"| {labels[r.checkpoint]} | " + " | ".join(cells + [final(r)]) + " |")
        return "\n".join(rows)

    score = table("Accuracy (math, verified) / token-F1 (QA), x 100:",
                  [f"{f} ({_metric_label(results, f)})" for f in fams], "Avg",
                  lambda c: f"{c['task_score']:.1f} ({c['episodes']})",
                  lambda r: f"{r.avg['task_score']:.1f} ({r.avg['episodes']})")
    calls = table("Tool calls per episode (python / search):", fams, "All",
                  lambda c: f"{c['python_calls']:.2f} / {c['search_calls']:.2f}",
                  lambda r: f"{r.all['python_calls']:.2f} / {r.all['search_calls']:.2f}")
    fmt_err = table("Format-error rate (episodes ending on a bad format or without an answer):", fams, "All",
                    lambda c: f"{c['format_error_rate']:.2f}", lambda r: f"{r.all['format_error_rate']:.2f}")
    return "\n\n".join([score, calls, fmt_err])


def row_labels(checkpoints: list[str]) -> dict[str, str]:
    """The shortest trailing part of each path that tells the checkpoints apart
    (runs/X/checkpoint-100 and runs/Y/checkpoint-100 become X/checkpoint-100 and Y/checkpoint-100)."""
    parts = {c: Path(c).parts or (c,) for c in checkpoints}
    depth = 1
    while True:
        labels = {c: "/".join(p[-depth:]) for c, p in parts.items()}
        clash = len(set(labels.values())) < len(set(checkpoints))
        if not clash or depth >= max(len(p) for p in parts.values()):
            return labels
        depth += 1


def load_policy(checkpoint: str):
    """Load a full model folder or a PEFT adapter folder, plus its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ck = Path(checkpoint)
    if not ck.is_dir():
        raise EvalError(f"checkpoint folder not found: {checkpoint}")
    if (ck / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        base = json.loads((ck / "adapter_config.json").read_text()).get("base_model_name_or_path")
        tok_src = ck if (ck / "tokenizer_config.json").is_file() else base
        load = lambda: AutoPeftModelForCausalLM.from_pretrained(ck)  # noqa: E731
    elif (ck / "config.json").is_file():
        tok_src = ck
        load = lambda: AutoModelForCausalLM.from_pretrained(ck)  # noqa: E731
    else:
        raise EvalError(f"{checkpoint} holds neither a model (config.json) nor an adapter (adapter_config.json)")
    try:
        model = load()
        tok = AutoTokenizer.from_pretrained(tok_src)
    except (OSError, ValueError) as e:  # e.g. an adapter whose base model is not here
        raise EvalError(f"cannot load {checkpoint}: {first_line(e)}") from None
    model.eval()
    return model, tok


# Rollout settings: eval's name -> (AgentRLConfig key, default when the checkpoint has no record
# of its training, CLI flag). max_new_tokens is training's max_completion_length.
SETTINGS = {
    "env_id": ("env_id", None, "--env"),
    "env_kwargs": ("env_kwargs", {}, "--env-kwargs"),
    "context_mode": ("context_mode", "window", "--context-mode"),
    "history_length": ("history_length", 2, "--history-length"),
    "prefill": ("prefill", "<action>", "--prefill"),
    "max_new_tokens": ("max_completion_length", 64, "--max-new-tokens"),
    "max_turns": ("max_turns", None, "--max-turns"),
    "max_prompt_tokens": ("max_prompt_tokens", 2048, "--max-prompt-tokens"),
    "stop_strings": ("stop_strings", None, "--stop-strings"),
}


@dataclass
class Settings:
    """The rollout settings of one evaluation, where each came from, and the departures from training."""

    values: dict[str, Any]
    source: str | None
    """The file the training settings were read from (None: not an agentrl run)."""
    overridden: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    env_modules: list[str] | None = None

    def describe(self, checkpoint: str) -> str:
        v = self.values
        origin = f"training settings from {self.source}" if self.source else "defaults (no training record found)"
        if self.overridden:
            origin += "; overridden: " + ", ".join(SETTINGS[k][2] for k in self.overridden)
        return (f"{checkpoint}: env {v['env_id']}, env_kwargs {json.dumps(v['env_kwargs'])}, context "
                f"{v['context_mode']}, history {v['history_length']}, prefill {v['prefill']!r}, max_new_tokens "
                f"{v['max_new_tokens']}, max_turns {v['max_turns'] or 'env limit'}, max_prompt_tokens "
                f"{v['max_prompt_tokens']}{', stop ' + json.dumps(v['stop_strings']) if v['stop_strings'] else ''} "
                f"({origin})")


def resolve_settings(checkpoint: str, **given) -> Settings:
    """Each setting from ``given`` (None = not given), else from the checkpoint's training, else
    the default; a warning for each given value that departs from training."""
    from agentrl.runinfo import training_settings

    unknown = set(given) - set(SETTINGS)
    if unknown:
        raise TypeError(f"unknown eval settings {sorted(unknown)}; valid: {', '.join(SETTINGS)}")
    found = training_settings(checkpoint)
    trained, source = found if found else ({}, None)
    values, overridden, warnings = {}, [], []
    for name, (key, default, flag) in SETTINGS.items():
        t = trained.get(key, default) if trained else default
        if name == "env_kwargs" and t is None:
            t = {}
        g = given.get(name)
        if g is None:
            values[name] = t
            continue
        values[name] = g
        overridden.append(name)
        if trained and key in trained and g != t:
            warnings.append(f"warning: {flag} {json.dumps(g) if isinstance(g, dict) else g} departs from "
                            f"training ({json.dumps(t) if isinstance(t, dict) else t}) for {checkpoint}")
    if values["env_id"] is None:
        raise EvalError(f"{checkpoint} has no record of its training env (no recipe.yaml or "
                        "training_args.bin): pass --env")
    return Settings(values, source, overridden, warnings, trained.get("env_modules") if trained else None)


def evaluate(
    checkpoint: str,
    env_id: str | None = None,
    split: str = "valid",
    episodes: int = DEFAULT_EPISODES,
    seeds: list[int] | None = None,
    seed_start: int = 0,
    families: list[str] | None = None,
    temperature: float = 0.0,
    max_new_tokens: int | None = None,
    env_kwargs: dict | None = None,
    context_mode: str | None = None,
    history_length: int | None = None,
    prefill: str | None = None,
    max_turns: int | None = None,
    max_prompt_tokens: int | None = None,
    stop_strings: list[str] | None = None,
    batch_size: int = 16,
    model_and_tokenizer=None,
    progress: bool = False,
    verbose: bool = False,
    datasets: dict[str, str] | None = None,
    policy=None,
) -> EvalResult:
    """Evaluate a checkpoint; ``temperature=0`` is greedy decoding. A rollout setting left None
    is the checkpoint's training value (``resolve_settings``); ``verbose`` prints the settings
    used and the warnings.

    ``datasets`` ({family: local file}) adds dataset families to the env kwargs' ``datasets`` for
    ``split`` and plays every task of each file once (``seeds``/``episodes`` are then unused;
    ``families`` defaults to these names). ``policy`` = (generate, tokenizer) plays instead of a
    model: ``generate`` maps a list of prompt token-id lists to completion token-id lists
    (``run_episodes``' contract), e.g. a scripted or expert policy."""

    import agentrl_envs  # noqa: F401  (registers agentrl/* ids)
    from agentrl_envs.probe import probe_task

    from agentrl.rollout import RolloutSettings, hf_generate_fn, run_episodes

    st = resolve_settings(checkpoint, env_id=env_id, env_kwargs=env_kwargs, context_mode=context_mode,
                          history_length=history_length, prefill=prefill, max_new_tokens=max_new_tokens,
                          max_turns=max_turns, max_prompt_tokens=max_prompt_tokens, stop_strings=stop_strings)
    if verbose:
        print("settings: " + st.describe(checkpoint), flush=True)
        for w in st.warnings:
            print(w, file=sys.stderr, flush=True)
    v = st.values
    env_id = v["env_id"]
    if datasets:
        v["env_kwargs"] = with_datasets(v["env_kwargs"], datasets, split)
        families = list(families or datasets)
    if st.env_modules:
        import importlib

        for m in st.env_modules:
            importlib.import_module(m)
    seeds = list(seeds) if seeds else list(range(seed_start, seed_start + episodes))
    options: dict[str, Any] = {"split": split}
    if families:
        options["families"] = list(families)
    try:  # one reset first: a bad split or family fails in one line, not as 0% over failed resets
        probe_task(env_id, v["env_kwargs"], seeds[0], options)
        all_tasks = dataset_episodes(env_id, v["env_kwargs"], split, families) if datasets else None
    except ValueError as e:
        raise EvalError(str(e)) from None
    if policy is not None:
        generate, tok = policy
    else:
        model, tok = model_and_tokenizer or load_policy(checkpoint)
        generate = hf_generate_fn(model, tok, max_new_tokens=v["max_new_tokens"],
                                  temperature=temperature if temperature > 0 else 1.0,
                                  do_sample=temperature > 0)
    rollout = RolloutSettings(env_id, env_kwargs=dict(v["env_kwargs"] or {}), context_mode=v["context_mode"],
                              history_length=v["history_length"], max_turns=v["max_turns"],
                              max_prompt_tokens=v["max_prompt_tokens"], prefill=v["prefill"],
                              stop_strings=tuple(v["stop_strings"] or ()), progress=progress)
    if all_tasks is None:
        all_tasks = [{"seed": s, "options": options, "group_id": f"eval-{s}"} for s in seeds]
    else:
        seeds = [t["seed"] for t in all_tasks]
    eps = []
    for i in range(0, len(all_tasks), batch_size):
        eps += run_episodes(all_tasks[i:i + batch_size], generate, tok, rollout)
    settings = {"episodes": len(all_tasks), "seeds": seeds, "families": families, "temperature": temperature,
                "datasets": datasets,
                **v, "settings_from": st.source, "overridden": st.overridden, "warnings": st.warnings}
    return summarize(eps, checkpoint, env_id, split, settings)


def with_datasets(env_kwargs: dict | None, datasets: dict[str, str], split: str) -> dict:
    """``env_kwargs`` with each ``{family: path}`` of ``datasets`` added as a dataset family read
    from that file for ``split`` (ToolReason's ``datasets`` kwarg, ``sources`` module)."""
    kw = dict(env_kwargs or {})
    spec = {f: dict(s) for f, s in (kw.get("datasets") or {}).items()}
    for fam, path in datasets.items():
        if not os.path.isfile(path):
            raise EvalError(f"--dataset {fam}: file not found: {path}")
        spec[fam] = {**spec.get(fam, {}), split: {"path": str(path)}}
    kw["datasets"] = spec
    return kw


def dataset_episodes(env_id: str, env_kwargs: dict, split: str, families: list[str]) -> list[dict]:
    """One rollout task per problem of each family, in file order (reset by ``task_id``)."""
    from agentrl_envs.probe import make_env

    env = make_env(env_id, env_kwargs)
    try:
        if not hasattr(env.unwrapped, "tasks"):
            raise ValueError(f"--dataset needs an env with dataset families (agentrl/ToolReason-v0), not {env_id}")
        out = []
        for fam in families:
            for t in env.unwrapped.tasks(split, fam):
                n = len(out)
                out.append({"seed": n, "group_id": f"eval-{fam}-{n}",
                            "options": {"split": split, "families": [fam], "task_id": t.id}})
        return out
    finally:
        env.close()


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="agentrl eval", description=__doc__.replace("``", "`"),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, action="append",
                   help="model or adapter folder; repeat to compare several checkpoints in one table")
    p.add_argument("--split", default="valid", help="env split (train / valid / valid_seen / valid_unseen)")
    p.add_argument("--episodes", type=int, default=DEFAULT_EPISODES,
                   help=f"number of episodes (task seeds; default {DEFAULT_EPISODES})")
    p.add_argument("--seeds", default=None, help="comma-separated task seeds (overrides --episodes)")
    p.add_argument("--seed-start", type=int, default=0, help="first task seed")
    p.add_argument("--families", default=None, help="comma-separated task families to keep")
    p.add_argument("--dataset", action="append", default=None, metavar="NAME=PATH",
                   help="ToolReason: evaluate every problem of a local benchmark file (e.g. gsm8k=test.jsonl, "
                        "hotpotqa=dev.jsonl) as family NAME; repeatable")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (SALT uses 0.4)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (same as --temperature 0)")
    p.add_argument("--out", default=None, help="write the results JSON here")
    g = p.add_argument_group("rollout settings (default: the checkpoint's training settings)")
    g.add_argument("--env", default=None, help="gymnasium id, e.g. agentrl/TextCraft-v0")
    g.add_argument("--env-kwargs", default=None, help='JSON dict for gymnasium.make, e.g. \'{"prompt_style": "compact"}\'')
    g.add_argument("--context-mode", default=None, choices=["window", "trajectory"])
    g.add_argument("--history-length", type=int, default=None, help="steps of history in window prompts")
    g.add_argument("--prefill", default=None, help="text after the assistant header (training's: <action>)")
    g.add_argument("--max-new-tokens", type=int, default=None, help="tokens per action (training's max_completion_length)")
    g.add_argument("--max-turns", type=int, default=None, help="step cap per episode (training's max_turns)")
    g.add_argument("--max-prompt-tokens", type=int, default=None, help="prompt budget per turn")
    g.add_argument("--stop-strings", default=None,
                   help="comma-separated strings that end a turn, e.g. '</python>,</answer>' (training's stop_strings)")
    return both_spellings(p).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs is not None else None
        if env_kwargs is not None and not isinstance(env_kwargs, dict):
            raise EvalError("--env-kwargs must be a JSON object")
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
        for flag in ("max_new_tokens", "max_turns", "max_prompt_tokens"):
            if getattr(args, flag) is not None and getattr(args, flag) < 1:
                raise EvalError(f"--{flag.replace('_', '-')} must be >= 1")
        if args.history_length is not None and args.history_length < 0:
            raise EvalError("--history-length must be >= 0")
        stop_strings = None
        if args.stop_strings is not None:
            stop_strings = [x for x in args.stop_strings.split(",") if x]
            if not stop_strings:
                raise EvalError("--stop-strings needs at least one non-empty string")
        datasets = None
        for d in args.dataset or []:
            name, eq, path = d.partition("=")
            if not eq or not name.strip() or not path.strip():
                raise EvalError(f"--dataset takes NAME=PATH (e.g. gsm8k=data/test.jsonl), got {d!r}")
            datasets = {**(datasets or {}), name.strip(): path.strip()}
    except (json.JSONDecodeError, ValueError, EvalError) as e:
        print(f"agentrl eval: bad argument: {e}", file=sys.stderr)
        return 2
    if args.episodes <= 0 and not seeds:
        print("agentrl eval: --episodes must be positive", file=sys.stderr)
        return 2
    families = args.families.split(",") if args.families else None
    temperature = 0.0 if args.greedy else args.temperature
    results = []
    try:
        for ck in args.checkpoint:
            results.append(evaluate(ck, args.env, split=args.split, episodes=args.episodes, seeds=seeds,
                                    seed_start=args.seed_start, families=families, temperature=temperature,
                                    max_new_tokens=args.max_new_tokens, env_kwargs=env_kwargs,
                                    context_mode=args.context_mode, history_length=args.history_length,
                                    prefill=args.prefill, max_turns=args.max_turns,
                                    max_prompt_tokens=args.max_prompt_tokens, stop_strings=stop_strings,
                                    datasets=datasets,
                                    progress=sys.stderr.isatty(), verbose=True))
    except (EvalError, ValueError) as e:
        print(f"agentrl eval: {e}", file=sys.stderr)
        return 2
    print(tool_tables(results) if has_tool_scores(results) else markdown_table(results, "success"))
    errors = sum(r.all.get("error_episodes", 0) for r in results)
    if errors:
        print(f"\nwarning: {errors} episode(s) ended on an env error (counted as failures; see the JSON)")
    env_id = results[0].env_id
    if "WebShop" in env_id:
        print("\nScore:\n" + markdown_table(results, "score"))
    out = Path(args.out) if args.out else Path(args.checkpoint[0]) / (
        f"eval_{env_id.split('/')[-1]}_{args.split}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([r.to_dict() for r in results], indent=2))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
