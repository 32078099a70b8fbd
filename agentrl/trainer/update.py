"""The update's pieces the trainer's steps call, each a function of explicit inputs (never the
trainer): loss settings, the old log-probs of a micro-batch, loss metrics over ranks, and the cuDNN
attention switch. The reference's log-probs are ``agentrl.trainer.views.Reference``.

Data flow of one optimizer step (``AgentGRPOTrainer``): packed rows -> the runner's micro-batches
-> ``old_logps`` / ``Reference`` per micro-batch (old / reference log-probs on the micro-batch's own tensors)
-> per micro-step: the policy's log-probs (one forward) -> the registered loss
(``agentrl.losses.compute``) -> finite? (``agentrl.trainer.guard``) -> backward -> optimizer step.
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.losses import CorrectionSettings, LossOutput, LossSettings
from agentrl.trainer.logprobs import completion_logps, last_hidden_state, processed_completion_logps


def loss_settings(args, mb: dict[str, Any], mode: str, options: dict[str, Any], *, processes: int,
                  accumulation: int, epsilon_low: float, epsilon_high: float, beta: float,
                  max_completion_length: int) -> LossSettings:
    """The recipe's loss knobs and this micro-batch's normalisers (TRL 1.16's, so a recipe's
    ``loss_type`` trains as it did under TRL's loss): ``dapo`` divides by the optimizer step's
    loss tokens on this rank, the others by the micro-batches per optimizer step. ``accumulation``:
    the micro-batches of this optimizer step (fewer at an epoch's end); ``processes``: the ranks."""
    train = mode == "train"
    accum = float(accumulation) if train else 1.0
    tokens = float(mb["num_items_in_batch"]) / processes
    if train:
        tokens *= accum / args.steps_per_generation
    return LossSettings(epsilon_low=epsilon_low, epsilon_high=epsilon_high, delta=args.delta,
                        beta=beta, ratio_level=args.importance_sampling_level,
                        kl_bias_correction=bool(args.use_bias_correction_kl), accumulation=accum,
                        tokens=tokens, max_completion_length=int(max_completion_length),
                        correction=correction_settings(args), options=options)


def correction_settings(a) -> CorrectionSettings:
    """The recipe's rollout correction (TRL's ``vllm_importance_sampling_*`` keys and
    ``rollout_correction_veto``); ``vllm_importance_sampling_correction: false`` turns all of it off.
    It acts on micro-batches that carry the sampler's log-probs (``behaviour_logps``)."""
    if not a.vllm_importance_sampling_correction:
        return CorrectionSettings()
    return CorrectionSettings(mode=a.vllm_importance_sampling_mode, clip_max=a.vllm_importance_sampling_clip_max,
                              clip_min=a.vllm_importance_sampling_clip_min, veto=a.rollout_correction_veto)


def needs_old_logps(args, num_iterations: int, mb: dict[str, Any]) -> bool:
    """Whether ``mb`` needs the learner's log-probs before the rollout's first update: its rows train
    in more than one optimizer step (or iteration), so the ratio needs them (else old = the loss's
    own, detached); or it carries the sampler's log-probs (``corrects``), which the rollout
    correction compares with them (TRL computes them whenever its vLLM correction is on)."""
    return args.gradient_accumulation_steps % (args.steps_per_generation * num_iterations) != 0 or (
        "behaviour_logps" in mb)


def corrects(args, batch) -> bool:
    """Whether the rollout correction acts on ``batch`` (a ``RolloutBatch``): its sampler can differ
    from the learner (``RolloutBatch.sampler_differs``: vLLM, ``sampler_dtype``, an asynchronous
    producer's older weights) and the recipe leaves ``vllm_importance_sampling_correction`` on
    (TRL's default). Elsewhere the sampler IS the learner: the behaviour log-probs stay with the
    episodes and rows, and the update is what it was (no weights, no extra forward)."""
    return bool(batch.sampler_differs and args.vllm_importance_sampling_correction)


def sampler_dtype(name: str | None) -> torch.dtype | None:
    """The torch dtype of the recipe key ``sampler_dtype`` (None: the model's own)."""
    return None if name is None else {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


@torch.no_grad()
def old_logps(mb: dict[str, Any], model, spec, autocast) -> dict[str, torch.Tensor]:
    """``old_logps`` of ``mb`` under ``model`` (the policy its rows belong to: the caller enters the
    runner's ``policy(mb)``), and ``correction_logps`` (the same policy under the sampler's top-k /
    top-p / min-p, when ``mb`` carries the sampler's log-probs and ``spec`` truncates: the rollout
    correction's learner side), both from ``mb``'s own tensors: the loss's forward sees the same
    ones, so at step 1 the ratio (and the KL to a reference computed the same way) is exactly 1
    (0) on deterministic kernels."""
    out = {}
    if "behaviour_logps" in mb and spec is not None and spec.truncates:
        # the processed log-probs from the old log-probs' own forward (its last hidden state)
        with last_hidden_state(model) as seen:
            out["old_logps"] = completion_logps(model, mb, autocast)[0]
        out["correction_logps"] = processed_completion_logps(model, mb, spec, autocast, seen.get("hidden"))
    else:
        out["old_logps"] = completion_logps(model, mb, autocast)[0]
    return out


def log_loss_metrics(out: LossOutput, metrics: dict[str, list[float]], accelerator) -> None:
    """The loss's metrics over all ranks into ``metrics`` (a mode's metric buffer): means as summed
    (sum, count) pairs (one all-reduce for all of them), extremes over every rank's rows."""
    m = metrics
    many = accelerator.num_processes > 1
    if out.means:
        names = sorted(out.means)
        local = torch.stack([torch.stack([out.means[k][0].float(), out.means[k][1].float()]) for k in names])
        total = accelerator.reduce(local, reduction="sum") if many else local
        for k, (s, c) in zip(names, total.tolist(), strict=True):
            m[k].append(s / c if c > 0 else float("nan"))
    for k, (kind, values) in sorted(out.extremes.items()):
        allv = accelerator.gather(values) if many else values
        allv = allv[~torch.isnan(allv)]
        if allv.numel():
            m[k].append(float(allv.min() if kind == "min" else allv.max()))


def cudnn_attention(enabled: bool) -> bool:
    """Turn cuDNN's SDPA backend on or off (CUDA only); returns whether it was on before.

    Off by default in training (recipe key ``allow_cudnn_attention``): its backward returns NaN in
    dQ on Hopper GPUs (torch >= 2.11) for query rows whose attention log-sum-exp is below
    -ln(FLT_MAX) at sequence lengths 64 mod 128 with an explicit mask (pytorch/pytorch#196678).
    Packed rows remove the fully masked rows that hit it every time; a pretrained model's
    "massive activation" heads can still produce such rows (huggingface/trl#7181). Flash and
    memory-efficient attention are unaffected."""
    if not torch.cuda.is_available():
        return False
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(enabled)
    return before
