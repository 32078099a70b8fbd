"""Tiny Qwen2 causal LMs with a byte-level BPE trained on local text.

Used by the tests (random init, plumbing only) and by the from-scratch demo design (a small
model that speaks only the env's language, warm-started by SFT). Builds in about a second.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# ChatML, as Qwen2.5 uses: the trainer and SFT both go through apply_chat_template, so a tiny
# model and Qwen2.5 see prompts of the same shape.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_DEFAULT_CORPUS = [
    "You are an agent. Your task: craft the goal item.",
    "Reply with your next command inside <action>...</action>.",
    "<action>look</action> <action>inventory</action> <action>go north</action>",
    "Current observation: You see a table, a drawer and a fridge. Nothing happens.",
    "get 2 oak logs craft 4 oak planks using 1 oak log Got 1 item. Crafted 4 items.",
]


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024):
    """Train a byte-level BPE tokenizer on ``texts``; returns a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS + ["<action>", "</action>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(
    out_dir: str | Path,
    texts: Iterable[str] | None = None,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 4096,
    seed: int = 0,
) -> Path:
    """Build a random-init Qwen2ForCausalLM + tokenizer into ``out_dir`` and return the path.

    ``texts`` is the tokenizer's training corpus (env text for the from-scratch design); the
    default is a few generic agent lines, enough for plumbing tests.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(list(texts) if texts is not None else _DEFAULT_CORPUS * 20, vocab_size)
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, do_sample=True
    )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def model_or_tiny(name: str, folder: Path | str, **tiny_kwargs) -> str:
    """A benchmark's ``--model``: ``"tiny"`` builds a fresh tiny model in ``folder`` (with
    ``tiny_kwargs``); anything else (an embedded name, a folder) is returned as given."""
    return str(build_tiny_model(Path(folder), **tiny_kwargs)) if name == "tiny" else name
