"""APPO's cost figures: ``agentrl bench appo [--model smollm2] [--steps 2] [--json]``.

Prints, for the CPU recipe (``recipes/appo/cpu/appo_toolreason_tiny_appo.yaml``):

* seconds per optimizer step with branching (the recipe: B = 1 per rollout) and without
  (``budget: 0``: the same trainer, no branch rollout, token advantages = A_init), and where the
  difference goes: the entropy/Omega forward (``time/branch_stats_s``) and the branch rollout
  (``time/branch_rollout_s``) per rollout batch;
* ToolReason's reset / step latency and the python sandbox's per-call cost
  (``agentrl_envs.toolreason.latency``).

Wall-clock figures on a shared machine move with its load: run it alone, or read the figures
as upper bounds. ``--model``: a model folder (default: the recipe's ``runs/appo/tiny_warm``, built
here first when missing) or an embedded name (``smollm2``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

RECIPE = str(Path(__file__).resolve().parents[2] / "recipes/appo/cpu/appo_toolreason_tiny_appo.yaml")


def train_figures(model: str, steps: int, budget: int, out: Path) -> dict[str, float]:
    """Run the CPU recipe for ``steps`` optimizer steps with ``budget`` branch points per rollout."""
    from agentrl.config import load_recipe
    from agentrl.train import build_trainer

    cfg = load_recipe(RECIPE, ["--model_name_or_path", model, "--output_dir", str(out), "--max_steps", str(steps),
                               "--save_strategy", "no", "--disable_tqdm", "true",
                               "--algorithm_kwargs", json.dumps({"budget": budget, "b": 1.0})])
    tr = build_trainer(cfg)
    t0 = time.perf_counter()
    tr.train()
    total = time.perf_counter() - t0
    logs = [h for h in tr.state.log_history if "loss" in h]
    iters = [h for h in logs if "time/rollout_s" in h]

    def mean(key: str) -> float:
        vals = [h[key] for h in iters if key in h]
        return round(sum(vals) / len(vals), 2) if vals else 0.0

    return {"s_per_step": round(total / max(len(logs), 1), 2), "rollout_s_per_batch": mean("time/rollout_s"),
            "branch_stats_s_per_batch": mean("time/branch_stats_s"),
            "branch_rollout_s_per_batch": mean("time/branch_rollout_s"),
            "branches_per_batch": mean("appo/branches"), "update_s_per_step":
                round(sum(h.get("time/update_s", 0.0) for h in logs) / max(len(logs), 1), 2)}


def measure(model: str, steps: int, calls: int) -> dict[str, dict[str, float]]:
    from agentrl_envs.toolreason.latency import measure as env_latency

    with tempfile.TemporaryDirectory() as tmp:
        out = {"branching_b1": train_figures(model, steps, 1, Path(tmp) / "b1"),
               "no_branching_b0": train_figures(model, steps, 0, Path(tmp) / "b0")}
    b1, b0 = out["branching_b1"], out["no_branching_b0"]
    out["overhead"] = {"s_per_step": round(b1["s_per_step"] - b0["s_per_step"], 2),
                       "ratio": round(b1["s_per_step"] / max(b0["s_per_step"], 1e-9), 2)}
    out["toolreason_ms"] = env_latency(calls)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench appo", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="runs/appo/tiny_warm", help="model folder or embedded name (default: the "
                    "recipe's tiny warm-started model, built when missing)")
    ap.add_argument("--steps", type=int, default=2, help="optimizer steps per configuration (2 = one rollout batch)")
    ap.add_argument("--calls", type=int, default=20, help="python tool calls per sandbox figure")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.calls < 1:
        ap.error("--steps and --calls must be >= 1")
    if args.model == "runs/appo/tiny_warm" and not Path(args.model, "config.json").is_file():
        from agentrl.benchmarks.appo_warm import warm_tiny_model

        warm_tiny_model(args.model)
    res = measure(args.model, args.steps, args.calls)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        for section, vals in res.items():
            print(section)
            for k, v in vals.items():
                print(f"  {k:<32} {v:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
