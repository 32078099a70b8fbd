"""Contract tests for the private TRL 1.16 hooks AgentGRPOTrainer relies on.

A TRL upgrade that renames, re-signs or changes the behaviour of one of these fails here loudly.
Runtime: ~1 s (after TRL's import).
"""

import inspect

import pytest
import torch


def _params(fn):
    return list(inspect.signature(fn).parameters)


def test_trl_version_pinned():
    import trl

    assert trl.__version__ == "1.16.0", "AgentGRPOTrainer was written against TRL 1.16.0: re-run these checks"


def test_private_method_signatures():
    from trl import GRPOTrainer

    assert _params(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    assert _params(GRPOTrainer._generate_single_turn)[:5] == [
        "self", "prompt_ids", "images", "multimodal_fields", "num_generations"]
    p = _params(GRPOTrainer._get_per_token_logps_and_entropies)
    assert p[:6] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size"]
    assert _params(GRPOTrainer._compute_loss) == ["self", "model", "inputs"]
    assert _params(GRPOTrainer._prepare_inputs) == ["self", "generation_batch"]
    assert _params(GRPOTrainer.training_step)[:4] == ["self", "model", "inputs", "num_items_in_batch"]
    # the algorithm's checkpoint hooks run after Trainer's own optimizer / scheduler save and load
    assert _params(GRPOTrainer._save_optimizer_and_scheduler) == ["self", "output_dir"]
    assert _params(GRPOTrainer._load_optimizer_and_scheduler) == ["self", "checkpoint"]
    assert _params(GRPOTrainer.save_model) == ["self", "output_dir", "_internal_call"]


def test_overridden_trl_methods_are_the_pinned_ones():
    # every GRPOTrainer method the one TRL subclass overrides; a new override needs its contract here
    # (_compute_loss / _get_per_token_logps_and_entropies: tests/trainer/test_appo_contract.py)
    from trl import GRPOTrainer

    from agentrl.trainer import AgentGRPOTrainer

    overridden = sorted(n for n, v in vars(AgentGRPOTrainer).items() if callable(v) and hasattr(GRPOTrainer, n))
    assert overridden == ["__init__", "_compute_loss", "_generate_and_score_completions",
                          "_get_per_token_logps_and_entropies", "_load_optimizer_and_scheduler", "_prepare_inputs",
                          "_save_optimizer_and_scheduler", "save_model", "train", "training_step"]


def test_prepare_inputs_buffers_and_splits_generation_batch():
    # _prepare_inputs must call _generate_and_score_completions once per generate_every steps
    # and split its output over steps_per_generation: we rely on it to accept any row count
    # divisible by steps_per_generation.
    src = inspect.getsource(__import__("trl").GRPOTrainer._prepare_inputs)
    assert "self._generate_and_score_completions(generation_batch)" in src
    assert "split_tensor_dict(generation_batch, self.args.steps_per_generation)" in src
    # AgentGRPOTrainer._prepare_inputs mirrors this buffering (same _step / _buffered_inputs
    # bookkeeping, resume included) and replaces only the shuffle + split by length grouping
    assert "if self._step % generate_every == 0 or self._buffered_inputs is None:" in src
    assert "shuffle_sequence_dict(generation_batch)" in src
    assert "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]" in src
    from trl.trainer.utils import split_tensor_dict

    d = {"a": torch.arange(6).view(6, 1), "n": torch.tensor(5)}
    chunks = split_tensor_dict(d, 3)
    assert [c["a"].flatten().tolist() for c in chunks] == [[0, 1], [2, 3], [4, 5]]
    assert all(int(c["n"]) == 5 for c in chunks)  # 0-d tensors (num_items_in_batch) are shared


def test_compute_loss_uses_2d_advantages_and_tool_mask():
    # Source-level contract: advantages of shape (B, T) are used as they are, and the loss mask
    # is completion_mask * tool_mask.
    from trl import GRPOTrainer

    src = inspect.getsource(GRPOTrainer._compute_loss)
    assert "if advantages.dim() == 1:" in src
    assert 'completion_mask * inputs["tool_mask"]' in src
    assert 'inputs["num_items_in_batch"]' in src


def test_generate_single_turn_hf_path_contract():
    # the HF path returns (completion_ids as lists cut after the first EOS, logprobs=None)
    from trl import GRPOTrainer

    src = inspect.getsource(GRPOTrainer._generate_single_turn)
    assert "return completion_ids, logprobs" in src
    assert "unwrap_model_for_generation" in src
    assert "gather_deepspeed3_params=self.args.ds3_gather_for_generation" in src


def test_compute_loss_matches_hand_formula(tiny_model_dir, tmp_path):
    """Run TRL's _compute_loss on a hand-built batch with 2-D advantages and a tool mask and
    compare with the DAPO formula worked out here: with old logps = current logps the ratio is 1,
    so loss = -sum(A * mask) / num_items (num_items = masked tokens, 1 process, 1 step)."""
    import yaml

    from agentrl.config import load_recipe
    from agentrl.trainer import AgentGRPOTrainer

    rec = tmp_path / "r.yaml"
    rec.write_text(yaml.safe_dump(dict(
        model_name_or_path=tiny_model_dir, env_id="agentrl-test/Count-v0", task_split="", num_tasks=4,
        num_generations=2, per_device_train_batch_size=2, max_steps=1, bf16=False,
        gradient_checkpointing=False, report_to="none", output_dir=str(tmp_path / "o"), use_cpu=True)))
    cfg = load_recipe(str(rec), [])
    tr = AgentGRPOTrainer(model=tiny_model_dir, args=cfg)
    inputs = {
        "prompt_ids": torch.tensor([[5, 6], [0, 7]]),
        "prompt_mask": torch.tensor([[1, 1], [0, 1]]),
        "completion_ids": torch.tensor([[8, 9, 10], [11, 12, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        "tool_mask": torch.tensor([[1, 0, 1], [1, 1, 0]]),
        "advantages": torch.tensor([[0.5, 100.0, 0.5], [-2.0, -2.0, 0.0]]),
        "num_items_in_batch": torch.tensor(4.0),
    }
    loss = tr._compute_loss(tr.model, inputs)
    # masked tokens: 0.5 + 0.5 - 2 - 2 = -3; loss = -(-3)/4 = 0.75 (the 100 is masked out)
    assert float(loss) == pytest.approx(0.75, abs=1e-5)
