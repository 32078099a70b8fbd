"""``python -m agentrl.train`` on an env served over OpenEnv (``env_id: openenv:URL``).

The CPU recipe (tiny model, TextCraft) trains two steps twice: on the env in-process, and on the
same env behind ``agentrl-envs serve`` in a subprocess on loopback, played through two env worker
processes. Same seeds, same model: the step records the runs save (observations, actions,
rewards, done flags, signatures, prompts' token counts) and the losses they log must be equal,
which holds only if the server plays the env move for move and renders the same prompts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from openenv_common import Server

RECIPE = "recipes/textcraft_grpo_tiny_cpu.yaml"
# GiGPO keys steps by observation: its advantages depend on the env's text, not only on returns
COMMON = ["--credit", "gigpo", "--save_steps", "0", "--max_steps", "2"]


def _train(out, *args) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-m", "agentrl.train", RECIPE, "--output_dir", str(out), *COMMON, *args],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in open(out / "metrics.jsonl") if '"loss"' in line]


def _records(out) -> list[list[dict]]:
    return [[json.loads(line) for line in open(out / "rollouts" / f"iter_{i:05d}.jsonl")] for i in range(2)]


@pytest.mark.slow
def test_train_on_an_env_served_over_openenv_equals_training_in_process(tmp_path):
    srv = Server("agentrl/TextCraft-v0", "--env-kwargs", json.dumps({"prompt_style": "compact"}))
    try:
        served = _train(tmp_path / "served", "--env_id", "openenv:" + srv.url,
                        "--env_kwargs", json.dumps({"history_length": 1}), "--env_workers", "2")
    finally:
        srv.stop()
    local = _train(tmp_path / "local")
    a, b = _records(tmp_path / "local"), _records(tmp_path / "served")
    assert [len(x) for x in a] == [32, 32]
    assert a == b
    assert {r["obs"] for it in a for r in it} and any(r["penalty"] > 0 for it in a for r in it)
    assert [m["loss"] for m in local] == [m["loss"] for m in served] and len(local) == 2
    assert [m["env/return"] for m in local] == [m["env/return"] for m in served]


def test_an_openenv_id_whose_server_is_down_is_one_line_and_exit_2(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-m", "agentrl.train", RECIPE, "--output_dir", str(tmp_path / "x"),
                        "--env_id", "openenv:http://127.0.0.1:9"], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert "cannot reach the OpenEnv server at http://127.0.0.1:9" in last, r.stderr[-2000:]
