"""``agentrl bench overhead``: agentrl's training step over plain TRL's on equal work.

Both trainers get the same work: 32 rows per step (8 tasks x 4 generations), the same prompts
(TextCraft's first-turn prompts of the same seeds: the chat template of the env's user message
plus the prefill), exactly ``--tokens`` new tokens per row (``min_new_tokens`` = max), one
optimizer step per step, the same tiny model, seed and optimizer. agentrl plays each prompt as a
single-turn TextCraft episode (env reset, prompt, generate, env step, credit, rows); TRL scores
the same completions with a constant reward function.

Timing: a step is the wall time from ``on_step_begin`` to ``on_step_end`` (generation, loss,
backward and the optimizer step). It splits into *generation* (inside TRL's
``_generate_single_turn``, or agentrl's ``PolicyGeneration``, which drives HF generate the same
way), *update* (the step outside the rollout step:
forward, backward, optimizer) and *rest* (everything else inside the rollout step, agentrl's
``make_iteration_batch`` or TRL's ``_generate_and_score_completions``: for agentrl the envs,
credit and rows; for TRL rewards and advantages). Each repeat calls ``train()`` on both trainers, alternately (so that a change in
the machine's load hits both), for ``1 + --steps`` steps; the first step of each call is a
warm-up and is left out. Medians over repeats x steps are printed, and the ratio of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV_ID = "agentrl/TextCraft-v0"
ENV_KWARGS = {"prompt_style": "compact"}


class _StepClock:
    """Trainer callback + wrappers: per-step wall, generation and generate-and-score seconds."""

    def __init__(self):
        self.steps: list[dict[str, float]] = []
        self.cur: dict[str, float] = {}
        self.widths: list[int] = []
        """The widest prompt of each generate call (equal work: the same for both trainers)."""

    def callback(self):
        from transformers import TrainerCallback

        clock = self

        class _CB(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                clock.cur = {"t0": time.perf_counter(), "generation": 0.0, "score": 0.0}

            def on_step_end(self, args, state, control, **kw):
                c = clock.cur
                step = time.perf_counter() - c["t0"]
                clock.steps.append({"step": step, "generation": c["generation"],
                                    "rest": c["score"] - c["generation"], "update": step - c["score"]})

        return _CB()


def _timed(cls):
    """``cls`` with its generation and generate-and-score calls timed into ``self.clock``."""

    class Timed(cls):
        clock: _StepClock

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            if hasattr(self, "source"):  # agentrl generates through its producer's PolicyGeneration
                gen = self.source.player.generation
                gen._completions = self._timed_generation(gen._completions)

        def _timed_generation(self, fn):
            def timed(prompts, *a, **kw):
                self.clock.widths.append(max(len(p) for p in prompts))
                t0 = time.perf_counter()
                try:
                    return fn(prompts, *a, **kw)
                finally:
                    self.clock.cur["generation"] = self.clock.cur.get("generation", 0.0) + time.perf_counter() - t0
            return timed

        def _generate_single_turn(self, *a, **kw):  # TRL's
            return self._timed_generation(super()._generate_single_turn)(*a, **kw)

        def _generate_and_score_completions(self, *a, **kw):  # TRL's rollout step
            t0 = time.perf_counter()
            try:
                return super()._generate_and_score_completions(*a, **kw)
            finally:
                self.clock.cur["score"] = self.clock.cur.get("score", 0.0) + time.perf_counter() - t0

        def make_iteration_batch(self, *a, **kw):  # agentrl's
            t0 = time.perf_counter()
            try:
                return super().make_iteration_batch(*a, **kw)
            finally:
                self.clock.cur["score"] = self.clock.cur.get("score", 0.0) + time.perf_counter() - t0

    Timed.__name__ = "Timed" + cls.__name__
    return Timed


def _first_prompts(cfg, tok) -> list[str]:
    """The text agentrl sends at turn 0 of each task of ``cfg``'s dataset (same seeds, same options)."""
    from agentrl.rollout.env_batch import InProcessEnvs
    from agentrl.rollout.prompts import chat_text
    from agentrl.trainer.agent_trainer import build_task_dataset

    ds = build_task_dataset(cfg)
    envs = InProcessEnvs(cfg.env_id, dict(cfg.env_kwargs or {}), 1)
    out = []
    try:
        for seed in ds["task_seed"]:
            obs, info = envs.reset_many([(0, seed, cfg.reset_options())])[0]
            out.append(chat_text(tok, envs.user_prompt(0, obs, info, [], 0, cfg.history_length)) + cfg.prefill)
    finally:
        envs.close()
    return out


def _constant_reward(prompts=None, completions=None, **kw):
    return [0.0] * len(completions)


def build_pair(model_dir: str, out: Path, tokens: int, rows: int, group: int, env_workers: str = "0",
               device: str = "cpu"):
    """(agentrl trainer, TRL trainer) on equal work (module docstring), each with a ``clock``."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from agentrl.config import AgentRLConfig, validate_config
    from agentrl.trainer import AgentGRPOTrainer

    common: dict[str, Any] = dict(
        per_device_train_batch_size=rows, num_generations=group, max_completion_length=tokens,
        generation_kwargs={"min_new_tokens": tokens}, learning_rate=1e-5, max_steps=2, logging_steps=1,
        save_strategy="no", bf16=device == "cuda", gradient_checkpointing=False, report_to="none",
        use_cpu=device == "cpu", disable_tqdm=True, seed=0)
    cfg = AgentRLConfig(output_dir=str(out / "agentrl"), model_name_or_path=model_dir, env_id=ENV_ID,
                        env_kwargs=dict(ENV_KWARGS), task_families=["depth2"], num_tasks=64, max_turns=1,
                        max_prompt_tokens=4096, history_length=0, credit="grpo", env_workers=env_workers,
                        **common)
    validate_config(cfg)
    tok = AutoTokenizer.from_pretrained(model_dir)
    ours = _timed(AgentGRPOTrainer)(model=model_dir, args=cfg, processing_class=tok)
    ds = Dataset.from_dict({"prompt": _first_prompts(cfg, tok)})
    trl_cfg = GRPOConfig(output_dir=str(out / "trl"), **common)
    theirs = _timed(GRPOTrainer)(model=model_dir, reward_funcs=[_constant_reward], args=trl_cfg,
                                  train_dataset=ds, processing_class=tok)
    from transformers.trainer_callback import PrinterCallback

    for tr in (ours, theirs):
        tr.clock = _StepClock()
        tr.add_callback(tr.clock.callback())
        tr.remove_callback(PrinterCallback)
    return ours, theirs


def bench_overhead(repeats: int = 3, steps: int = 1, tokens: int = 24, rows: int = 32, group: int = 4,
                   env_workers: str = "0", device: str = "cpu", body: str = "tiny") -> dict[str, Any]:
    """Median seconds per step of both trainers and their ratio (module docstring), on ``device``
    with the tiny model or a Qwen2.5 ``body`` (``agentrl.models.qwen``)."""
    import torch

    from agentrl.models import build_tiny_model

    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="agentrl-overhead-"))
    if body == "tiny":
        model_dir = str(build_tiny_model(tmp / "tiny"))
    else:
        from agentrl.models.qwen import cached_body

        model_dir = str(cached_body(body, device == "cuda"))
    ours, theirs = build_pair(model_dir, tmp, tokens, rows, group, env_workers, device)
    for tr in (ours, theirs):
        tr.args.max_steps = 1 + steps
    shares: list[float] = []
    for _ in range(repeats):
        for tr in (theirs, ours):
            n0 = len(tr.clock.steps)
            tr.train()
            del tr.clock.steps[n0]  # the warm-up step of this call
        shares += [h["rows/real_token_share"] for h in ours.state.log_history if "rows/real_token_share" in h]

    def med(tr, key):
        return statistics.median(s[key] for s in tr.clock.steps)

    res: dict[str, Any] = {"rows": rows, "tokens": tokens, "repeats": repeats, "steps_per_repeat": steps,
                           "env_workers": env_workers, "threads": torch.get_num_threads(), "device": device,
                           "body": body}
    for name, tr in (("agentrl", ours), ("trl", theirs)):
        res[name] = {k: round(med(tr, k), 4) for k in ("step", "generation", "update", "rest")}
        res[name]["steps"] = [round(s["step"], 4) for s in tr.clock.steps]
        res[name]["prompt_widths"] = tr.clock.widths
    res["agentrl"]["real_token_share"] = round(statistics.median(shares), 3) if shares else None
    res["ratio"] = round(res["agentrl"]["step"] / res["trl"]["step"], 3)
    res["ratio_generation"] = round(res["agentrl"]["generation"] / res["trl"]["generation"], 3)
    res["ratio_update"] = round(res["agentrl"]["update"] / res["trl"]["update"], 3)
    return res


def print_overhead(res: dict[str, Any]) -> None:
    print(f"{'trainer':<10} {'step_s':>8} {'generation_s':>13} {'update_s':>9} {'rest_s':>8}")
    for name in ("agentrl", "trl"):
        r = res[name]
        print(f"{name:<10} {r['step']:>8.3f} {r['generation']:>13.3f} {r['update']:>9.3f} {r['rest']:>8.3f}")
    print(f"agentrl / trl: step {res['ratio']:.3f}x, generation {res['ratio_generation']:.3f}x, "
          f"update {res['ratio_update']:.3f}x ({res['rows']} rows, {res['tokens']} new tokens, medians of "
          f"{res['repeats']} repeats x {res['steps_per_repeat']} steps); agentrl's update real-token share "
          f"{res['agentrl']['real_token_share']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench overhead", description=__doc__.splitlines()[0].strip('`"'))
    ap.add_argument("--repeats", type=int, default=3, help="train() calls per trainer, alternating (default 3)")
    ap.add_argument("--steps", type=int, default=2, help="timed steps per call, after one warm-up (default 2)")
    ap.add_argument("--tokens", type=int, default=24, help="new tokens per row (default 24)")
    ap.add_argument("--rows", type=int, default=32, help="rows per step, 4 generations per task (default 32)")
    ap.add_argument("--env-workers", default="0", help="agentrl's env_workers (default 0: in-process envs)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where both trainers run (default cpu)")
    ap.add_argument("--body", choices=("tiny", "0.5b", "1.5b", "7b"), default="tiny",
                    help="the tiny test model or a Qwen2.5 body (agentrl.models.qwen; default tiny)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    if min(args.repeats, args.steps, args.tokens, args.rows) < 1 or args.rows % 4:
        print("error: --repeats, --steps, --tokens must be positive and --rows a positive multiple of 4",
              file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: --device cuda: no CUDA device here", file=sys.stderr)
            return 2
    res = bench_overhead(args.repeats, args.steps, args.tokens, args.rows, env_workers=args.env_workers,
                         device=args.device, body=args.body)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print_overhead(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
