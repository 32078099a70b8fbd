"""The trainer runs on a generated finite MDP (agentrl/FiniteMDP-v0) like on any text env: its
saved step records carry the MDP's own texts and signatures, and the credit module's
advantages on them are the ones the rows train on."""

from __future__ import annotations

import math

import numpy as np
import yaml
from agentrl_envs.mdp import family_config, generate

from agentrl.config import load_recipe
from agentrl.credit import compute
from agentrl.records import StepRecord, read_jsonl


def test_trainer_runs_on_finite_mdp(tmp_path, tiny_model_dir):
    from agentrl.train import build_trainer

    recipe = dict(
        env_id="agentrl/FiniteMDP-v0", env_kwargs={"family": "recurrent", "mdp_seed": 3}, task_split="",
        num_tasks=4, max_turns=8, max_prompt_tokens=512, num_generations=4, per_device_train_batch_size=8,
        max_completion_length=6, learning_rate=1e-2, max_steps=1, logging_steps=1, save_strategy="no", bf16=False,
        gradient_checkpointing=False, report_to="none", use_cpu=True, seed=0, disable_tqdm=True,
        credit="gigpo", save_rollouts=True, model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "out"),
    )
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    tr = build_trainer(load_recipe(str(tmp_path / "r.yaml"), []))
    tr.train()
    assert all(math.isfinite(h["loss"]) for h in tr.state.log_history if "loss" in h)
    recs = [StepRecord.from_dict(d) for d in read_jsonl(tmp_path / "out" / "rollouts" / "iter_00000.jsonl")]
    mdp = generate(family_config("recurrent"), 3)
    texts = set(mdp.obs_text)
    assert recs and all(r.obs in texts and r.state_sig and r.state_sig.startswith("s") for r in recs)
    # a random tiny model writes no admissible command: every step is penalised and rejected
    assert all(r.penalty == mdp.config.penalty and not r.valid for r in recs)
    # the advantage saved with each record is gigpo's on the saved records (penalties only, so
    # all the signal is the position of a step in its episode: GiGPO's discounted penalty)
    saved = np.array([r.info.pop("advantage") for r in recs])
    np.testing.assert_allclose(saved, compute("gigpo", recs).step_advantages, atol=1e-6)
    assert np.abs(saved).max() > 0
