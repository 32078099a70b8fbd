"""APPO's recipes (recipes/appo/) carry the authors' hyperparameters (arXiv:2606.12384 and its
code's scripts, values copied here) and the Table 1 / 3 / 4 sets are complete. ~30 s (one env probe)."""

from pathlib import Path

import pytest

from agentrl.config import load_recipe

REPO = Path(__file__).resolve().parent.parent
WORLD = 4  # the recipes are written for 4 GPUs (accelerate_configs/zero3.yaml)


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # hub model ids validate as on a GPU machine


def _prompts_per_batch(c) -> float:
    return c.per_device_train_batch_size * WORLD * c.steps_per_generation / c.num_generations


def test_appo_recipe_set_is_complete():
    names = {p.stem for p in (REPO / "recipes/appo").glob("[!_]*.yaml")}
    want = {f"table1_{m}_{x}" for m in ("qwen7b", "llama8b") for x in ("grpo", "gigpo", "appo")}
    want |= {"table3_qwen7b_n8_b1", "table3_qwen7b_n4_b3", "table3_qwen7b_n2_b7"}
    want |= {f"table4_{m}_{a}" for m in ("qwen7b", "llama8b") for a in ("entropy_only", "no_future", "no_dual_group")}
    assert names == want
    assert {p.stem for p in (REPO / "recipes/appo/cpu").glob("[!_]*.yaml")} == {"appo_toolreason_tiny_appo",
                                                                                "appo_toolreason_tiny_grpo"}


def test_appo_authors_hyperparameters():
    c = load_recipe("recipes/appo/table1_qwen7b_appo.yaml", [])
    # lr 1e-6, KL 0.001, clip 0.2 / 0.28, temperature 1, 3 tool calls, 2048 + 6144 tokens
    assert (c.learning_rate, c.beta, c.epsilon, c.epsilon_high, c.temperature) == (1e-6, 0.001, 0.2, 0.28, 1.0)
    # the dual clip of the authors' verl runs (clip_ratio_c = 3): TRL clamps the ratio at delta,
    # which binds only where A < 0 (for A > 0 the 1.28 clip already caps the objective)
    assert c.delta == 3.0
    assert c.env_kwargs["tool_call_limit"] == 3 and c.max_prompt_tokens == 8192
    assert (c.context_mode, c.prefill, c.model_name_or_path) == ("trajectory", "", "Qwen/Qwen2.5-7B-Instruct")
    # n = 16 rows per prompt: N = 8 initial + a per-prompt pool of 8 branch points, strict, summed
    assert c.num_generations == 8 and c.credit == "appo"
    assert c.algorithm == "appo" and c.credit_kwargs == {}  # APPO's settings are its algorithm's kwargs
    assert c.algorithm_kwargs == {"budget": 8, "scope": "prompt", "strict": True, "combine": "sum", "decay": 64,
                                  "b": 1.0}
    # 96 prompts per rollout batch, mini-batches of 16 prompts
    assert _prompts_per_batch(c) == 96
    assert c.per_device_train_batch_size * WORLD * c.gradient_accumulation_steps / c.num_generations == 16
    assert load_recipe("recipes/appo/table1_llama8b_appo.yaml", []).model_name_or_path == \
        "meta-llama/Llama-3.1-8B-Instruct"
    for n, b in ((8, 1), (4, 3), (2, 7)):  # Table 3: N x B with N + N B = 16
        c = load_recipe(f"recipes/appo/table3_qwen7b_n{n}_b{b}.yaml", [])
        assert (c.num_generations, c.algorithm_kwargs["budget"], c.algorithm_kwargs["scope"]) == (n, b, "rollout")
        assert n + n * b == 16 and _prompts_per_batch(c) == 96 and c.delta == 3.0
    ab = {a: load_recipe(f"recipes/appo/table4_qwen7b_{a}.yaml", []).algorithm_kwargs
          for a in ("entropy_only", "no_future", "no_dual_group")}
    assert ab["entropy_only"]["score"] == "entropy" and ab["no_future"]["b"] == 0.0
    assert ab["no_dual_group"]["grouping"] == "joint"
    g = load_recipe("recipes/appo/table1_qwen7b_grpo.yaml", [])
    assert g.credit == "grpo" and g.num_generations == 16 and _prompts_per_batch(g) == 96
