"""Seconds per training step and fingerprint overhead on a short-prompt TextCraft setup.

    agentrl bench step --model tiny --steps 3
    agentrl bench step --model smollm2 --steps 2 --credit bipace_q

Prints one JSON line: mean step time (after the first step), rollout/credit/update/fingerprint
seconds, and the fingerprint share of the step time.
"""

from __future__ import annotations

import argparse
import json
import sys


def _fingerprint_pass_costs(tr, chunk: int, layer: int) -> tuple[float, float]:
    """Seconds of the truncated forward (used under vLLM) and of a dedicated full forward with
    hidden states (BiPACE's approach) over the last iteration's prompts, in chunks of ``chunk``."""
    import time

    import torch

    from agentrl.rollout.generation import left_pad, truncated_forward_fingerprints

    prompts = [p for ep in tr.last_rollout["episodes"] for p in ep.tokens.prompt_ids]
    m = tr.accelerator.unwrap_model(tr.model)
    pad_id = tr.processing_class.pad_token_id
    chunks = [prompts[i:i + chunk] for i in range(0, len(prompts), chunk)]
    t0 = time.perf_counter()
    for c in chunks:
        truncated_forward_fingerprints(m, c, layer, pad_id)
    trunc_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.no_grad():
        for c in chunks:
            ids, att = left_pad(c, pad_id, tr.accelerator.device)
            m(input_ids=ids, attention_mask=att, output_hidden_states=True)
    return trunc_s, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench step", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="'tiny' (built on the fly), 'smollm2' or a model folder")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--credit", default="grpo")
    ap.add_argument("--rollouts", type=int, default=8, help="rollouts per step (per_device_train_batch_size)")
    ap.add_argument("--group", type=int, default=4, help="num_generations")
    ap.add_argument("--max_turns", type=int, default=4)
    ap.add_argument("--max_new_tokens", type=int, default=12)
    ap.add_argument("--fingerprint_layer", type=int, default=-1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="cuda runs bf16 with gradient checkpointing (auto: cuda when there is one)")
    a = ap.parse_args(argv)
    from agentrl.benchmarks.setup import offline_model

    model, tmp = offline_model(a.model, a.threads, "agentrl_bench_")
    import torch

    cuda = torch.cuda.is_available() if a.device == "auto" else a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device here", file=sys.stderr)
        return 2

    from agentrl.config import AgentRLConfig, validate_config
    from agentrl.train import build_trainer

    cfg = AgentRLConfig(
        output_dir=str(tmp / "out"), model_name_or_path=model, env_id="agentrl/TextCraft-v0",
        env_kwargs={"prompt_style": "compact"}, task_families=["depth2"], num_tasks=64,
        max_turns=a.max_turns, max_prompt_tokens=256, history_length=1, credit=a.credit,
        fingerprint_layer=a.fingerprint_layer, valid_action_reward=0.1, num_generations=a.group,
        per_device_train_batch_size=a.rollouts, max_completion_length=a.max_new_tokens,
        max_steps=a.steps, logging_steps=1, save_strategy="no", bf16=cuda,
        gradient_checkpointing=cuda, report_to="none", use_cpu=not cuda,
        disable_tqdm=True, learning_rate=1e-5)
    validate_config(cfg)
    tr = build_trainer(cfg)
    tr.train()
    logs = [h for h in tr.state.log_history if "step_time" in h]
    later = logs[1:] or logs

    def mean(k):
        v = [float(h[k]) for h in later if k in h]
        return sum(v) / len(v) if v else None

    trunc_s, full_s = _fingerprint_pass_costs(tr, a.rollouts, a.fingerprint_layer)
    step = mean("step_time")
    fp = mean("time/fingerprint_s") or 0.0
    print(json.dumps({
        "model": a.model, "credit": a.credit, "steps": a.steps, "rollouts_per_step": a.rollouts,
        "device": str(tr.accelerator.device), "threads": torch.get_num_threads(),
        "step_s": step, "rollout_s": mean("time/rollout_s"), "credit_s": mean("time/credit_s"),
        "update_s": mean("time/update_s"), "fingerprint_s": fp,
        "fingerprint_share": fp / step if step else None,
        "dedicated_full_forward_s": full_s, "dedicated_full_forward_share": full_s / step if step else None,
        "truncated_forward_s": trunc_s, "truncated_forward_share": trunc_s / step if step else None, "episode_len": mean("env/episode_len"),
        "rows": mean("rows/real"), "gen_tokens_per_s": mean("gen/tokens_per_s"),
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
