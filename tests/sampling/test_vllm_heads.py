"""A model whose attention head size vLLM's CPU build has no kernel for is refused when the recipe
is checked (one line, exit 2), not a minute into the engine's start; a supported one passes.
``CPU_HEAD_SIZES`` is checked against the vLLM venv's own list."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from agentrl.sampling.vllm_engine import vllm_python, vllm_venv
from agentrl.sampling.vllm_heads import CPU_HEAD_SIZES, head_size, head_size_refusal

needs_vllm = pytest.mark.skipif(vllm_python() is None, reason=f"no vLLM venv at {vllm_venv()} (make vllm-venv)")


def test_head_size_is_read_as_vllm_reads_it():
    # hidden 64 over 4 heads: 16 (the default tiny model); SmolLM2-135M: 576 over 9 = 64
    assert head_size({"hidden_size": 64, "num_attention_heads": 4}) == 16
    assert head_size({"hidden_size": 576, "num_attention_heads": 9}) == 64
    assert head_size({"hidden_size": 64, "num_attention_heads": 4, "head_dim": 128}) == 128  # set: it wins
    assert head_size({"hidden_size": 64, "num_attention_heads": 4, "head_dim": None}) == 16  # unset: derived
    assert head_size({"text_config": {"hidden_size": 2048, "num_attention_heads": 16}}) == 128
    assert head_size({"kv_lora_rank": 512, "hidden_size": 7168, "num_attention_heads": 128}) is None
    assert head_size({"model_type": "mamba"}) is None


def test_refusal_names_the_size_and_the_way_out(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4}))
    why = head_size_refusal(tmp_path, "use_vllm: false", "tiny")
    assert why.startswith("tiny: attention head size 16 is not one vLLM's CPU build supports (32, 64,")
    assert "use_vllm: false" in why and "\n" not in why
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 128, "num_attention_heads": 2}))
    assert head_size_refusal(tmp_path, "use_vllm: false") is None
    assert head_size_refusal(tmp_path / "missing", "use_vllm: false") is None  # the model's loading says it


def _recipe(tmp_path, model) -> str:
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(dict(
        model_name_or_path=str(model), env_id="agentrl/TextCraft-v0", env_kwargs={"prompt_style": "compact"},
        task_families=["depth2"], num_tasks=8, num_generations=2, per_device_train_batch_size=4,
        max_completion_length=8, max_steps=1, report_to="none", use_cpu=True, use_vllm=True,
        output_dir=str(tmp_path / "o"))))
    return str(p)


@needs_vllm
def test_check_recipe_refuses_head_size_16_on_vllm_and_passes_64(tmp_path, capsys):
    from agentrl.models import build_tiny_model
    from agentrl.train import check_main

    sixteen = build_tiny_model(tmp_path / "m16")  # hidden 64, 4 heads
    sixty_four = build_tiny_model(tmp_path / "m64", hidden_size=128, num_heads=2, num_kv_heads=1)
    capsys.readouterr()  # the builds' progress bars
    assert check_main([_recipe(tmp_path, sixteen)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "attention head size 16 is not one vLLM's CPU build supports" in err[0], err
    assert err[0].startswith("agentrl check-recipe: ") and str(sixteen) in err[0]
    assert check_main([_recipe(tmp_path, sixty_four)]) == 0, capsys.readouterr().err
    # the same recipe on the HF engine: head size 16 is fine there
    assert check_main([_recipe(tmp_path, sixteen), "--use_vllm", "false"]) == 0, capsys.readouterr().err


@needs_vllm
def test_the_trainer_build_refuses_it_too(tmp_path):
    """A config that reached the build without the recipe check (the folder the build resolves)."""
    from agentrl.config import load_recipe
    from agentrl.models import build_tiny_model
    from agentrl.recipe_file import RecipeError
    from agentrl.train import build_trainer

    sixteen = build_tiny_model(tmp_path / "m16")
    cfg = load_recipe(_recipe(tmp_path, sixteen), ["--use_vllm", "false"])
    cfg.use_vllm = True
    with pytest.raises(RecipeError, match="attention head size 16 is not one vLLM's CPU build supports"):
        build_trainer(cfg)


@pytest.mark.slow
@needs_vllm
def test_cpu_head_sizes_are_the_vllm_venvs():
    out = subprocess.run([str(vllm_python()), "-c", "from vllm.v1.attention.backends.cpu_attn import "
                          "CPUAttentionBackend as B; print(sorted(B.get_supported_head_sizes()))"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == str(sorted(CPU_HEAD_SIZES))
