"""Seconds per training step of a Think-Solve collaboration under each credit module, and the
cost of CCPO's counterfactuals and SEPO's ratings.

    agentrl bench collab                       # tiny model, shared / ccpo / sepo
    agentrl bench collab --model smollm2 --steps 3 --max_new_tokens 64

Every module trains the same collaboration (same model, LoRA policies, rollouts, lengths) on
``agentrl/MathAnswer-v0`` with the math-verify verifier for ``--steps`` steps; the first step
(warm-up: TRL's first call, the env's problem generation) is left out of the means. Prints one
table and one JSON line per module: wall seconds per step, and inside it the joint rollouts,
the counterfactual solo rollouts, the ratings and the update; ``cf_overhead`` is counterfactual
seconds / joint-rollout seconds. Wall time: on a shared machine, compare modules measured in one
invocation (they run back to back), not across invocations.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

KEYS = {"step_s": "step_time", "joint_s": "collab/joint_s", "counterfactual_s": "collab/counterfactual_s",
        "rating_s": "collab/rating_s", "update_s": "time/update_s", "credit_s": "time/credit_s",
        "step_cpu_s": "step_cpu_s", "joint_cpu_s": "collab/joint_cpu_s",
        "counterfactual_cpu_s": "collab/counterfactual_cpu_s", "rating_cpu_s": "collab/rating_cpu_s"}


class _CpuClock:
    """Process CPU seconds of each optimizer step (generation included: TRL generates inside the
    step), logged as ``step_cpu_s``."""

    def __init__(self):
        from transformers import TrainerCallback

        clock = self

        class Cb(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                clock.t = time.process_time()

            def on_step_end(self, args, state, control, **kw):
                clock.steps.append(time.process_time() - clock.t)

        self.t, self.steps, self.callback = 0.0, [], Cb()


def run_one(model: str, credit: str, a: argparse.Namespace, out: Path) -> dict:
    """Train ``a.steps`` steps with ``credit``; the means of the timings after the first step."""
    import torch

    from agentrl.config import AgentRLConfig, validate_config
    from agentrl.train import build_trainer

    cfg = AgentRLConfig(
        output_dir=str(out / credit), model_name_or_path=model, env_id="agentrl/MathAnswer-v0",
        env_kwargs={"tasks": ["basic_arithmetic"], "size": 64, "scale": "pm1" if credit == "sepo" else "01"},
        task_split="train", num_tasks=64, algorithm="collab",
        algorithm_kwargs={"collab": "think_solve", "policies": a.policies, "role_block_steps": a.block},
        use_peft=a.policies == "lora", lora_r=8, lora_alpha=16, lora_dropout=0.0,
        credit=credit, max_prompt_tokens=1024, num_generations=a.group, per_device_train_batch_size=a.rollouts,
        max_completion_length=a.max_new_tokens, max_steps=a.steps, logging_steps=1, save_strategy="no",
        bf16=False, gradient_checkpointing=False, report_to="none", use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True, learning_rate=1e-5, seed=0)
    validate_config(cfg)
    tr = build_trainer(cfg)
    clock = _CpuClock()
    tr.add_callback(clock.callback)
    tr.train()
    logs = [h for h in tr.state.log_history if "step_time" in h]
    for h, c in zip(logs, clock.steps, strict=False):
        h["step_cpu_s"] = c
    later = logs[1:] or logs
    row = {"credit": credit, "steps_timed": len(later)}
    for k, m in KEYS.items():
        v = [float(h.get(m, 0.0)) for h in later]
        row[k] = sum(v) / len(v) if v else None
    row["cf_overhead"] = row["counterfactual_s"] / row["joint_s"] if row["joint_s"] else None
    row["cf_overhead_cpu"] = row["counterfactual_cpu_s"] / row["joint_cpu_s"] if row["joint_cpu_s"] else None
    row["gen_tokens_per_s"] = sum(float(h["gen/tokens_per_s"]) for h in later) / len(later)
    return row


def _two(r: dict, k: str) -> str:
    return f"{r[k + '_s']:.2f} ({r[k + '_cpu_s']:.2f})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench collab", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="'tiny' (built on the fly), 'smollm2' or a model folder")
    ap.add_argument("--credits", default="shared,ccpo,sepo")
    ap.add_argument("--policies", default="lora", choices=("shared", "lora", "full"))
    ap.add_argument("--steps", type=int, default=5, help="steps per module (the first is not timed)")
    ap.add_argument("--block", type=int, default=2, help="role_block_steps")
    ap.add_argument("--rollouts", type=int, default=8, help="collaborations per step")
    ap.add_argument("--group", type=int, default=4, help="num_generations")
    ap.add_argument("--max_new_tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args(argv)
    from agentrl.benchmarks.setup import offline_model

    model, tmp = offline_model(a.model, a.threads, "agentrl_collab_bench_", hidden_size=64, num_layers=2)
    import torch

    rows = [run_one(model, c.strip(), a, tmp) for c in a.credits.split(",") if c.strip()]
    print(f"\nThink-Solve, model {a.model}, {a.policies} policies, {a.rollouts} collaborations x "
          f"{a.max_new_tokens} new tokens per role, {torch.get_num_threads()} threads; wall s (CPU s)")
    print(f"{'credit':<8} {'s/step':>13} {'joint':>13} {'solo cf':>13} {'ratings':>13} {'update':>6} "
          f"{'cf/joint':>11}")
    for r in rows:
        cf = f"{r['cf_overhead']:.2f} ({r['cf_overhead_cpu']:.2f})" if r["cf_overhead_cpu"] is not None else "-"
        print(f"{r['credit']:<8} {_two(r, 'step'):>13} {_two(r, 'joint'):>13} {_two(r, 'counterfactual'):>13} "
              f"{_two(r, 'rating'):>13} {r['update_s']:>6.2f} {cf:>11}")
    for r in rows:
        print(json.dumps({"model": a.model, "policies": a.policies, "rollouts": a.rollouts,
                          "max_new_tokens": a.max_new_tokens, **r}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
