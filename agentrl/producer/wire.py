"""What crosses the process boundary between the learner and a producer.

Episodes: a context object holds the tokenizer and the rollout's settings (callables among them),
so an episode travels with its context's registered name instead and gets a context of that
name on arrival. Weights: one contiguous tensor per dtype (one shared-memory segment each, not
one per parameter: a model's hundreds of tensors would each hold a file descriptor)."""

from __future__ import annotations

from typing import Any

import torch

from agentrl.rollout.contexts import make_context
from agentrl.rollout.episode import Episode


def pack_episodes(episodes: list[Episode]) -> list[tuple[str, Episode]]:
    """(context name, the episode without its context) for each episode."""
    out = []
    for ep in episodes:
        name = ep.context.name
        ep.context = None
        out.append((name, ep))
    return out


def unpack_episodes(packed: list[tuple[str, Episode]], tokenizer, settings) -> list[Episode]:
    """The episodes, each with a context of its name (one object per name, as one rollout has)."""
    contexts = {}
    out = []
    for name, ep in packed:
        if name not in contexts:
            contexts[name] = make_context(name, tokenizer, settings)
        ep.context = contexts[name]
        out.append(ep)
    return out


def flat_weights(named: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """Named tensors as one contiguous tensor per dtype (one shared-memory segment each, instead of
    one per parameter) plus the names and shapes to rebuild them."""
    groups: dict[torch.dtype, list[tuple[str, torch.Tensor]]] = {}
    for n, t in named:
        groups.setdefault(t.dtype, []).append((n, t))
    return {str(dt): ([n for n, _ in g], [tuple(t.shape) for _, t in g],
                      torch.cat([t.detach().reshape(-1).cpu() for _, t in g]) if g else torch.zeros(0))
            for dt, g in groups.items()}


def unflat_weights(flat: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The named tensors of ``flat_weights`` (views into its tensors)."""
    out = {}
    for names, shapes, data in flat.values():
        i = 0
        for n, shape in zip(names, shapes, strict=True):
            size = int(torch.Size(shape).numel())
            out[n] = data[i:i + size].view(shape)
            i += size
    return out
