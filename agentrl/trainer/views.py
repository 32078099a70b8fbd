"""Views of the trained model for the producer: what a ``Player`` scores with and what an
asynchronous source ships, each holding the learner's state (``agentrl.trainer.state``) and the
run's accelerator, never the trainer.

``Reference``  a micro-batch's reference log-probs: the reference model, or with PEFT the policy's
               base model with the adapter disabled
``Scorer``     no-grad (log-probs, entropies, reference log-probs) of completions after prompts
               (APPO's branch points: ``Player.score``)
``WeightsView`` the policy's weights as ``flat_weights`` (all, or the adapter's under LoRA), gathered
               once under ZeRO-3 (``AsyncSource.publish``)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentrl.rollout.contexts import Row
from agentrl.rollout.rows import pack_rows
from agentrl.trainer.logprobs import completion_logps
from agentrl.trainer.state import LearnerState


@dataclass
class Reference:
    """The reference's log-probs of a packed micro-batch (``__call__``)."""

    state: LearnerState
    ref_model: Any
    """TRL's reference model (None with PEFT, or when ``beta`` is 0)."""
    accelerator: Any

    def __call__(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        autocast = self.accelerator.autocast
        if self.ref_model is not None:
            return completion_logps(self.ref_model, mb, autocast)[0]
        from trl.trainer.utils import use_adapter

        model = self.accelerator.unwrap_model(self.state.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return completion_logps(self.state.model, mb, autocast)[0]


@dataclass
class Scorer:
    """No-grad scores of completion tokens under the policy (and its reference)."""

    state: LearnerState
    accelerator: Any
    pad_id: int
    chunk: int
    """Rows per forward (``per_device_train_batch_size``)."""
    reference: Reference

    def __call__(self, prompts: list[list[int]], completions: list[list[int]], entropy: bool = False,
                 reference: bool = False) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(log-probs, entropies, reference log-probs) of the completion tokens, (N, T) float32 numpy,
        T the longest completion (0 at padding positions): the update's own forward
        (``agentrl.trainer.logprobs``), in chunks of ``chunk`` rows."""
        rows = [Row(prompt=list(p), completion=list(c), loss_mask=[1] * len(c), adv=[0.0] * len(c))
                for p, c in zip(prompts, completions, strict=True)]
        width = max(len(c) for c in completions)
        size = max(1, self.chunk)
        parts: list[list[np.ndarray]] = [[], [], []]
        with torch.no_grad():
            for i in range(0, len(rows), size):
                mb = {k: v.to(self.accelerator.device) for k, v in pack_rows(rows[i:i + size], self.pad_id).items()}
                lp, ent = completion_logps(self.state.model, mb, self.accelerator.autocast, entropy=entropy)
                ref = self.reference(mb) if reference else None
                for j, t in enumerate((lp, ent, ref)):
                    if t is not None:
                        parts[j].append(np.pad(t.float().cpu().numpy(), ((0, 0), (0, width - t.shape[1]))))
        logp, ent, ref = (np.concatenate(p) if p else None for p in parts)
        return logp, ent, ref


@dataclass
class WeightsView:
    """The policy's weights for a producer process (``__call__``: a collective under ZeRO-3)."""

    state: LearnerState
    accelerator: Any
    adapter_only: bool
    """LoRA: only the trainable (adapter) weights travel."""
    zero3: bool

    def __call__(self) -> dict[str, Any]:
        from agentrl.producer.wire import flat_weights

        model = self.accelerator.unwrap_model(self.state.model)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad or not self.adapter_only]
        if self.zero3:
            import deepspeed

            with deepspeed.zero.GatheredParameters([p for _, p in named], modifier_rank=None):
                return flat_weights(named)
        return flat_weights(named)
