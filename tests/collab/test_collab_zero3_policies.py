"""Separate policies under DeepSpeed ZeRO-3 on 2 CPU processes (``agentrl.policies.swap_zero3``).

* Trainer runs (``zero3_policies_run.py``: ``agentrl.train`` plus every policy's gathered weights
  after every optimizer step): role blocks of one step (Thinker, Solver, Thinker), so every step
  switches the trained policy (weights and AdamW state swapped on each rank's partitions) and
  every rollout generates with both; full weights and LoRA; ``role_schedule: both``. Each
  policy's weights change only in its own steps (the parked one bit for bit), and a run resumed
  from the checkpoint after step 2 (the Thinker parked on each rank, restored from
  ``collab_policies_rank{r}.pt``) ends with both policies equal to the uninterrupted run's.
* Exactness (``zero3_swaps_run.py``): the swaps on a small model against two independent copies,
  each with its own AdamW (a single-process run of a recipe is no reference: each rank samples
  its own rollouts).

Runtime: ~4 min on 2 shared cores (six 2-process launches, ~25-60 s each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from test_collab_trainer import BASE

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _launch(rec: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline",
               TRL_EXPERIMENTAL_SILENCE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "accelerate_configs" / "cpu_zero3.yaml"), str(HERE / "zero3_policies_run.py"), str(rec)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]


def _changed(a: dict, b: dict) -> bool:
    return any(not torch.equal(a[n], b[n]) for n in a)


def _blocks_run(tmp_path, model_dir, policies: str, max_steps: int, **extra):
    """A 2-process ZeRO-3 run with role blocks of one step; checks that each policy's weights
    change only in its own blocks; returns the run's recipe keys and its snapshots."""
    # 1 group of 4 collaborations per rank, 1 optimizer step per rollout; use_cpu would make
    # accelerate pick MULTI_CPU DDP
    kw = dict(BASE, model_name_or_path=model_dir, per_device_train_batch_size=4, max_steps=max_steps,
              role_schedule="blocks", role_block_steps=1, collab_policies=policies, use_cpu=False,
              use_peft=policies == "lora", lora_r=4, lora_alpha=8, lora_dropout=0.0)
    out = tmp_path / "ds"
    rec = tmp_path / "ds.yaml"
    kw.update(extra)
    rec.write_text(yaml.safe_dump(dict(kw, output_dir=str(out))))
    _launch(rec)
    snaps = torch.load(out / "policy_snapshots.pt", weights_only=True)
    assert [s["step"] for s in snaps] == list(range(max_steps + 1))
    order = ["thinker", "solver", "thinker", "solver"][:max_steps]
    assert [s["trained"] for s in snaps[1:]] == order
    for k, trained in enumerate(order, start=1):
        other = "solver" if trained == "thinker" else "thinker"
        before, after = snaps[k - 1]["weights"], snaps[k]["weights"]
        assert _changed(before[trained], after[trained]), (k, trained)
        assert not _changed(before[other], after[other]), (k, other)  # parked: bit for bit
    for name in ("thinker", "solver"):
        assert (out / "policies" / name).is_dir()
    return kw, snaps


@pytest.mark.slow
def test_zero3_separate_policies_blocks_and_resume(tmp_path, collab_model_dir):
    pytest.importorskip("deepspeed")
    kw, snaps = _blocks_run(tmp_path, collab_model_dir, "full", 3, save_strategy="steps", save_steps=2)
    out = tmp_path / "ds"
    ckpt = out / "checkpoint-2"
    assert (ckpt / "collab_policies_rank0.pt").is_file() and (ckpt / "collab_policies_rank1.pt").is_file()

    # resume after step 2 (the Solver's block; the Thinker parked) and finish step 3
    res = tmp_path / "res"
    rec2 = tmp_path / "res.yaml"
    rec2.write_text(yaml.safe_dump(dict(kw, output_dir=str(res), resume_from_checkpoint=str(ckpt))))
    _launch(rec2)
    want = snaps[-1]["weights"]
    got = torch.load(res / "policy_snapshots.pt", weights_only=True)[-1]
    assert got["step"] == 3
    for name in ("thinker", "solver"):
        for n, w in want[name].items():
            # same ranks, same partitions, same reduction order: exact up to float noise
            assert torch.allclose(got["weights"][name][n], w, rtol=0, atol=1e-6), (name, n)


@pytest.mark.slow
def test_zero3_separate_lora_policies_blocks(tmp_path, collab_model_dir):
    """The same with one LoRA adapter per policy (the frozen base partitioned, not swapped)."""
    pytest.importorskip("deepspeed")
    _blocks_run(tmp_path, collab_model_dir, "lora", 2)


@pytest.mark.slow
def test_zero3_separate_policies_both_roles_every_rollout(tmp_path, collab_model_dir):
    """``role_schedule: both``: role-ordered optimizer steps (Thinker, Solver) in every rollout,
    each role's old log-probs from its own policy (``use`` inside the loss computation)."""
    pytest.importorskip("deepspeed")
    _blocks_run(tmp_path, collab_model_dir, "full", 4, role_schedule="both", steps_per_generation=2)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_zero3_policy_swaps_equal_independent_copies(tmp_path, dtype):
    """``Zero3SwappedPolicies`` on a small model under 2-process ZeRO-3 (``zero3_swaps_run.py``):
    7 optimizer steps switching policies both ways (and a generation with the other policy before
    each), each policy ending equal to its own copy with its own AdamW. Same inputs on both ranks,
    so the averaged gradient is each rank's own gradient and, in fp32, the result is bit for bit
    (tolerance 1e-6 only against float noise). In bf16 (bf16 partitions plus fp32 master
    partitions, the GPU recipes' layout) the fp32 copies are no reference: there the checks are
    that a parked policy and the fp32 masters come back bit for bit."""
    pytest.importorskip("deepspeed")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "accelerate_configs" / "cpu_zero3.yaml"), str(HERE / "zero3_swaps_run.py"), str(tmp_path), dtype]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    res = torch.load(tmp_path / "result.pt", weights_only=True)
    assert not res["parked_changed"] and res["masters_back"] and res["masters_apart"]
    assert res["a_vs_b"] > 1e-2  # the two policies really differ
    if dtype == "fp32":
        for name, d in res["diff"].items():
            assert d < 1e-6, (name, d)


def _accelerator(zero: dict):
    from types import SimpleNamespace

    return SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(
        deepspeed_config={"zero_optimization": zero})))


def test_separate_policies_need_zero3_without_offload():
    from agentrl.policies.swap_zero3 import check_zero3
    from agentrl.recipe_file import RecipeError

    check_zero3(_accelerator({"stage": 3, "offload_optimizer": {"device": "none"}}))
    with pytest.raises(RecipeError, match="ZeRO stage 3"):
        check_zero3(_accelerator({"stage": 2}))
    for key in ("offload_optimizer", "offload_param"):
        with pytest.raises(RecipeError, match=key):
            check_zero3(_accelerator({"stage": 3, key: {"device": "cpu"}}))


def test_zero3_slots_swap_only_once_training_started():
    from agentrl.policies.swap_zero3 import Zero3SwappedPolicies, zero3_optimizer

    swaps = Zero3SwappedPolicies(("thinker", "solver"))
    with swaps.use("thinker"):  # the loaded policy: nothing to swap
        pass
    assert not swaps.activate("thinker")
    with pytest.raises(RuntimeError, match="once training started"), swaps.use("solver"):
        pass
    with pytest.raises(ValueError, match="unknown policy"):
        swaps.activate("critic")
    assert zero3_optimizer(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1)) is None
