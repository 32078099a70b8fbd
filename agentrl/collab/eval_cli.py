"""``agentrl eval-collab``: accuracy of a collaboration, and of its last role alone, per benchmark.

    agentrl eval-collab --run runs/ccpo/t1_grpo_ccpo_qwen2.5_1.5b/seed0 --benchmarks math500,aime25,amc23
    agentrl eval-collab --model Qwen/Qwen2.5-1.5B-Instruct --benchmarks math500     # untrained row
    agentrl eval-collab --run runs/cpu/ccpo_ccpo/seed0 --generated basic_arithmetic --limit 50

Rows ``full`` (every role: the pipeline accuracy, arXiv 2603.21563 Tables 1-3) and
``without_<first role>`` (the counterfactual: the Solver alone on the problem, the hand-off
ablation of Table 4), one column per benchmark plus the mean, in points. A run folder is what
training's final ``save_model`` wrote: ``collab.json`` and each policy under ``policies/<name>/``
(full weights or a LoRA adapter; one shared policy: the folder itself). ``--model`` evaluates an
untrained model playing every role of ``--collab``. Benchmarks load from the hub or, with
``name:path``, from a local file (``agentrl_envs.tasks.benchmarks``); ``--generated`` uses
reasoning-gym problems offline. Sampling: the paper's temperature 1.0, top-p 0.7 by default.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentrl.recipe_file import first_line

from .recipe import collaboration
from .spec import Collaboration, Role, clean_output, counterfactual, from_dict, role_messages


class CollabEvalError(Exception):
    """Bad input: one line, exit code 2."""


def load_run(run: str | None, model: str | None, collab: str) -> tuple[Collaboration, dict[str, Any], dict[str, Any]]:
    """The collaboration, one model per policy name and one tokenizer per policy name (a policy
    trained on its own base model, ``collab_models``, has its own)."""
    from agentrl.eval import EvalError, load_policy

    try:
        if model is not None:
            from agentrl.models import resolve_model

            c = collaboration(collab, "shared")
            m, tok = load_policy(resolve_model(model)) if Path(resolve_model(model)).is_dir() else _hub(model)
            return c, {p: m for p in c.policies}, {p: tok for p in c.policies}
        path = Path(run)
        if not (path / "collab.json").is_file():
            raise CollabEvalError(f"{run} has no collab.json: not the output folder of a collaboration run")
        c = from_dict(json.loads((path / "collab.json").read_text()))
        models, toks = {}, {}
        for p in c.policies:
            folder = path / "policies" / p if len(c.policies) > 1 else path
            models[p], toks[p] = load_policy(str(folder))
        return c, models, toks
    except EvalError as e:
        raise CollabEvalError(str(e)) from None


def _hub(model: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        return AutoModelForCausalLM.from_pretrained(model).eval(), AutoTokenizer.from_pretrained(model)
    except (OSError, ValueError) as e:
        raise CollabEvalError(f"cannot load {model}: {first_line(e)}") from None


def generator(models: dict[str, Any], toks: dict[str, Any], max_new_tokens: int, temperature: float, top_p: float,
              batch: int):
    """``gen(role, list of messages) -> list of texts`` with the role's policy and its tokenizer, in batches."""
    import torch

    for tok in toks.values():
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token

    def gen(role: Role, msgs: list[list[dict[str, str]]]) -> list[str]:
        m, tok = models[role.policy], toks[role.policy]
        out: list[str] = []
        for i in range(0, len(msgs), batch):
            texts = [tok.apply_chat_template(x, tokenize=False, add_generation_prompt=True) for x in msgs[i:i + batch]]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(m.device)
            kw = dict(do_sample=True, temperature=temperature, top_p=top_p) if temperature > 0 else dict(do_sample=False)
            with torch.no_grad():
                ids = m.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, **kw)
            out += tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out

    return gen


def play(c: Collaboration, questions: list[str], gen) -> list[str]:
    """Every role of ``c`` on every question, role by role in batches; the last role's texts."""
    outputs: list[dict[str, str]] = [{} for _ in questions]
    raws: list[str] = []
    for r in c.roles:
        raws = gen(r, [role_messages(r, q, o) for q, o in zip(questions, outputs, strict=True)])
        for o, raw in zip(outputs, raws, strict=True):
            o[r.name] = clean_output(r, raw)
    return raws


def evaluate(c: Collaboration, problems_by_bench: dict[str, list], gen) -> dict[str, dict[str, float]]:
    """``{row: {benchmark: accuracy in points, ..., "mean": ...}}`` for rows full / without_<first>."""
    from agentrl_envs.tasks.math import verify_response

    cf = counterfactual(c, c.roles[0].name)
    rows: dict[str, dict[str, float]] = {"full": {}, f"without_{c.roles[0].name}": {}}
    for bench, problems in problems_by_bench.items():
        qs = [p.question for p in problems]
        for row, collab in zip(rows, (c, cf), strict=True):
            answers = play(collab, qs, gen)
            hits = [verify_response(a, p.answer) for a, p in zip(answers, problems, strict=True)]
            rows[row][bench] = 100.0 * sum(hits) / max(len(hits), 1)
    for r in rows.values():
        r["mean"] = sum(r.values()) / max(len(r), 1)
    return rows


def table(rows: dict[str, dict[str, float]]) -> str:
    cols = list(next(iter(rows.values())))
    out = ["| pipeline | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    out += [f"| {name} | " + " | ".join(f"{v:.1f}" for v in r.values()) + " |" for name, r in rows.items()]
    return "\n".join(out)


def problems(a: argparse.Namespace) -> dict[str, list]:
    from agentrl_envs.tasks.benchmarks import load_benchmark
    from agentrl_envs.tasks.math import reasoning_gym_problems

    out: dict[str, list] = {}
    try:
        for spec in filter(None, (a.benchmarks or "").split(",")):
            name, _, path = spec.partition(":")
            out[name] = load_benchmark(name, path or None, limit=a.limit)
        for name in filter(None, (a.generated or "").split(",")):
            out[name] = reasoning_gym_problems(name, n=a.limit or 50, seed=a.seed + 100_000)
    except (ValueError, OSError) as e:
        raise CollabEvalError(first_line(e)) from None
    if not out:
        raise CollabEvalError("name --benchmarks (math500,aime25,...) or --generated (basic_arithmetic,...)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="agentrl eval-collab", description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", help="output folder of a collaboration run (collab.json, policies/)")
    src.add_argument("--model", help="an untrained model playing every role of --collab")
    p.add_argument("--collab", default="think_solve", help="with --model: the collaboration")
    p.add_argument("--benchmarks", help="comma-separated benchmark names, each optionally name:local_file")
    p.add_argument("--generated", help="comma-separated reasoning-gym datasets (offline, held-out seeds)")
    p.add_argument("--limit", type=int, default=None, help="problems per benchmark")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=0.7)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="results JSON (default: RUN/eval_collab.json)")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if a.limit is not None and a.limit < 1 or a.max_new_tokens < 1 or a.batch < 1:
            raise CollabEvalError("--limit, --max-new-tokens and --batch must be >= 1")
        import torch

        torch.manual_seed(a.seed)
        data = problems(a)
        c, models, toks = load_run(a.run, a.model, a.collab)
        rows = evaluate(c, data, generator(models, toks, a.max_new_tokens, a.temperature, a.top_p, a.batch))
    except CollabEvalError as e:
        print(f"agentrl eval-collab: {e}", file=sys.stderr)
        return 2
    print(table(rows))
    out = Path(a.out) if a.out else Path(a.run or ".") / "eval_collab.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"run": a.run or a.model, "collab": c.name, "n": {k: len(v) for k, v in data.items()},
                               "accuracy": rows}, indent=2))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

