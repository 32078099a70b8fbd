"""``agentrl eval``: roll a checkpoint out on an env split and print a paper-style table.

    agentrl eval --checkpoint runs/x/checkpoint-50 --env agentrl/ALFWorld-v0 --split valid \
        --episodes 60 [--families pick,clean] [--temperature 0.4 | --greedy] [--out eval.json]

The results JSON goes to ``--out``, by default ``eval_<env>_<split>.json`` in the (first)
checkpoint folder.

Task seeds are ``seed_start .. seed_start+episodes-1`` (or ``--seeds 3,5,8``): the same seeds give
the same tasks, so two checkpoints evaluated with the same flags saw the same episodes.
Success is the env's ``won`` flag; score is the mean final-step reward x 100 (WebShop's score).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.recipe_file import first_line


class EvalError(Exception):
    """Bad eval input: reported as one line, exit code 2."""


@dataclass
class CellStats:
    episodes: int = 0
    wins: int = 0
    score_sum: float = 0.0
    length_sum: int = 0
    invalid_sum: int = 0
    steps_sum: int = 0
    errors: int = 0

    def add(self, won: bool, final_reward: float, length: int, n_invalid: int, error: bool = False) -> None:
        self.episodes += 1
        self.errors += int(error)
        self.wins += int(won)
        self.score_sum += final_reward
        self.length_sum += length
        self.invalid_sum += n_invalid
        self.steps_sum += max(length, 1)

    def as_dict(self) -> dict[str, float]:
        n = max(self.episodes, 1)
        p = self.wins / n
        return {
            "episodes": self.episodes,
            "success": 100.0 * p,
            # binomial standard error of the success rate, in points
            "success_se": 100.0 * math.sqrt(p * (1 - p) / n),
            "score": 100.0 * self.score_sum / n,
            "mean_length": self.length_sum / n,
            "invalid_rate": self.invalid_sum / max(self.steps_sum, 1),
            "error_episodes": self.errors,  # env or prompt failures, counted as failed episodes
        }


@dataclass
class EvalResult:
    checkpoint: str
    env_id: str
    split: str
    per_family: dict[str, dict[str, float]] = field(default_factory=dict)
    all: dict[str, float] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "env_id": self.env_id, "split": self.split,
                "per_family": self.per_family, "all": self.all, "settings": self.settings}


def summarize(episodes, checkpoint: str, env_id: str, split: str, settings: dict) -> EvalResult:
    """Aggregate rollout Episodes into per-family and overall cells."""
    cells: dict[str, CellStats] = defaultdict(CellStats)
    total = CellStats()
    for ep in episodes:
        final_reward = float(ep.steps[-1].reward) if ep.steps else 0.0
        fam = ep.task_family or "all"
        for c in (cells[fam], total):
            c.add(bool(ep.won), final_reward, int(ep.length), int(ep.n_invalid), error=bool(getattr(ep, "error", None)))
    return EvalResult(
        checkpoint=checkpoint, env_id=env_id, split=split,
        per_family={k: cells[k].as_dict() for k in sorted(cells)}, all=total.as_dict(), settings=settings,
    )


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


def evaluate(
    checkpoint: str,
    env_id: str,
    split: str = "valid",
    episodes: int = 20,
    seeds: list[int] | None = None,
    seed_start: int = 0,
    families: list[str] | None = None,
    temperature: float = 0.0,
    max_new_tokens: int = 48,
    env_kwargs: dict | None = None,
    context_mode: str = "window",
    history_length: int = 2,
    batch_size: int = 16,
    model_and_tokenizer=None,
    progress: bool = False,
) -> EvalResult:
    """Evaluate a checkpoint; ``temperature=0`` is greedy decoding."""
    import gymnasium as gym

    import agentrl.envs  # noqa: F401  (registers agentrl/* ids)
    from agentrl.envs.probe import probe_task
    from agentrl.rollout import RolloutSettings, hf_generate_fn, run_episodes

    if env_id not in gym.registry:
        valid = ", ".join(sorted(k for k in gym.registry if k.startswith("agentrl/")))
        raise EvalError(f"unknown env id {env_id!r}; valid: {valid}")
    seeds = list(seeds) if seeds else list(range(seed_start, seed_start + episodes))
    options: dict[str, Any] = {"split": split}
    if families:
        options["families"] = list(families)
    try:  # one reset first: a bad split or family fails in one line, not as 0% over failed resets
        probe_task(env_id, env_kwargs, seeds[0], options)
    except ValueError as e:
        raise EvalError(str(e)) from None
    model, tok = model_and_tokenizer or load_policy(checkpoint)
    generate = hf_generate_fn(model, tok, max_new_tokens=max_new_tokens,
                              temperature=temperature if temperature > 0 else 1.0,
                              do_sample=temperature > 0)
    rollout = RolloutSettings(env_id, env_kwargs=dict(env_kwargs or {}), context_mode=context_mode,
                              history_length=history_length, progress=progress)
    eps = []
    for i in range(0, len(seeds), batch_size):
        tasks = [{"seed": s, "options": options, "group_id": f"eval-{s}"} for s in seeds[i:i + batch_size]]
        eps += run_episodes(tasks, generate, tok, rollout)
    settings = {"episodes": len(seeds), "seeds": seeds, "families": families, "temperature": temperature,
                "max_new_tokens": max_new_tokens, "env_kwargs": env_kwargs or {}, "context_mode": context_mode,
                "history_length": history_length}
    return summarize(eps, checkpoint, env_id, split, settings)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="agentrl eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, action="append",
                   help="model or adapter folder; repeat to compare several checkpoints in one table")
    p.add_argument("--env", required=True, help="gymnasium id, e.g. agentrl/TextCraft-v0")
    p.add_argument("--split", default="valid", help="env split (train / valid / valid_seen / valid_unseen)")
    p.add_argument("--episodes", type=int, default=20, help="number of episodes (task seeds)")
    p.add_argument("--seeds", default=None, help="comma-separated task seeds (overrides --episodes)")
    p.add_argument("--seed-start", type=int, default=0, help="first task seed")
    p.add_argument("--families", default=None, help="comma-separated task families to keep")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (SALT uses 0.4)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (same as --temperature 0)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens per action")
    p.add_argument("--env-kwargs", default="{}", help='JSON dict for gymnasium.make, e.g. \'{"prompt_style": "compact"}\'')
    p.add_argument("--context-mode", default="window", choices=["window", "trajectory"])
    p.add_argument("--history-length", type=int, default=2, help="steps of history in window prompts")
    p.add_argument("--out", default=None, help="write the results JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        env_kwargs = json.loads(args.env_kwargs)
        if not isinstance(env_kwargs, dict):
            raise EvalError("--env-kwargs must be a JSON object")
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
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
                                    progress=True))
    except (EvalError, ValueError) as e:
        print(f"agentrl eval: {e}", file=sys.stderr)
        return 2
    print(markdown_table(results, "success"))
    errors = sum(r.all.get("error_episodes", 0) for r in results)
    if errors:
        print(f"\nwarning: {errors} episode(s) ended on an env error (counted as failures; see the JSON)")
    if "WebShop" in args.env:
        print("\nScore:\n" + markdown_table(results, "score"))
    out = Path(args.out) if args.out else Path(args.checkpoint[0]) / (
        f"eval_{args.env.split('/')[-1]}_{args.split}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([r.to_dict() for r in results], indent=2))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
