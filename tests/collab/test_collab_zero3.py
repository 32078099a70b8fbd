"""A collaboration under `accelerate launch` with DeepSpeed ZeRO-3 on 2 CPU processes: the shared
policy plays both roles, ranks stay in lock-step through the Thinker, Solver and counterfactual
rollouts, and CCPO's statistics come from the global batch on every rank.

Runtime: ~2-3 min on 2 shared cores (+ DeepSpeed's one-off op build on a cold machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_collab_trainer import BASE

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


@pytest.mark.slow
def test_zero3_two_ranks_collaboration(tmp_path, collab_model_dir):
    pytest.importorskip("deepspeed")
    out = tmp_path / "ds"
    rec = tmp_path / "ds.yaml"
    # 1 group of 4 collaborations per rank; use_cpu would make accelerate pick MULTI_CPU DDP
    rec.write_text(yaml.safe_dump(dict(BASE, model_name_or_path=collab_model_dir, output_dir=str(out),
                                       per_device_train_batch_size=4, max_steps=2, save_rollouts=True,
                                       role_schedule="both", use_cpu=False, save_strategy="steps",
                                       save_steps=2)))
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline",
               TRL_EXPERIMENTAL_SILENCE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "accelerate_configs" / "cpu_zero3.yaml"), "-m", "agentrl.train", str(rec)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    for it in (0, 1):
        recs = [json.loads(x) for x in (out / "rollouts" / f"iter_{it:05d}.jsonl").read_text().splitlines()]
        ranks = {d["traj_id"].split(":")[1] for d in recs}
        assert ranks == {"r0", "r1"}  # both ranks' turns reached the global credit batch
        parts = [(d["info"]["role"], d["info"]["part"]) for d in recs]
        for p in (("thinker", "joint"), ("solver", "joint"), ("solver", "solo")):
            assert parts.count(p) == 8, (it, p)
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    logged = [h for h in state["log_history"] if "loss" in h]
    assert [h["credit/ccpo_state/delta/count"] for h in logged] == [8.0, 16.0]
    assert (out / "checkpoint-2" / "collab_state.pt").is_file()
