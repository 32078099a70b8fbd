"""Log-probs of a micro-batch's completion tokens: one forward over the packed rows.

The rows come from ``agentrl.rollout.rows.pack_rows`` (prompt + completion from position 0,
padding on the right). The forward is the model's own with TRL's fused LM head
(``trl.trainer.utils.add_fused_lm_head``, patched onto the policy and reference models by
GRPOTrainer): it projects only the positions that carry a label, in tiles, and returns float32
log-probs and entropies without materialising the (B, L, V) logits. The same function serves the
loss, the old log-probs and the reference log-probs, so all three see identical tensors.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch


def completion_positions(mb: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, T) index of each completion token's log-prob in the shifted (B, L - 1) output: the
    token at sequence position p is predicted at p - 1."""
    t = torch.arange(mb["completion_ids"].shape[1], device=mb["input_ids"].device)
    return (mb["completion_start"].unsqueeze(1) - 1 + t).clamp(min=0, max=max(mb["input_ids"].shape[1] - 2, 0))


def completion_labels(mb: dict[str, torch.Tensor]) -> torch.Tensor:
    """(B, L) labels: the completion tokens where they are, -100 elsewhere (prompt, padding)."""
    ids = mb["input_ids"]
    labels = torch.full_like(ids, -100)
    pos = completion_positions(mb) + 1
    valid = mb["completion_mask"].bool()
    rows = torch.arange(ids.shape[0], device=ids.device).unsqueeze(1).expand_as(pos)
    labels[rows[valid], pos[valid]] = ids[rows[valid], pos[valid]]
    return labels


def completion_logps(model, mb: dict[str, torch.Tensor], autocast=nullcontext,
                     entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probs, entropies or None), each (B, T) float32, 0 at padding positions."""
    with autocast():
        out = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"],
                    labels=completion_labels(mb), fused_lm_head=True)
    pos = completion_positions(mb)
    valid = mb["completion_mask"].to(torch.float32)
    logps = out.log_probs.float().gather(1, pos) * valid
    ent = out.entropy.float().gather(1, pos) * valid if entropy and out.entropy is not None else None
    return logps, ent
