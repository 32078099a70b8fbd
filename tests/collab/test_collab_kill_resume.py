"""`python -m agentrl.train` on a two-role collaboration, killed with SIGKILL after a role switch
and resumed: both policies, CCPO's statistics and the role schedule continue exactly.

The run: Thinker -> Solver on ``parity_math``, credit ccpo, separate full-weight policies, blocks
of 2 optimizer steps (Thinker: steps 1-2 and 5-6, Solver: 3-4 and 7-8), a checkpoint every step.
It is killed once a checkpoint past the first switch (step >= 3, the Solver loaded and the
Thinker parked) is complete, then resumed from the newest checkpoint; the result is compared with
an uninterrupted run of the same recipe in this process (same numerics on CPU, one thread).

Runtime: ~50 s on 1 thread (two interpreter start-ups and the reference run; ~2 min under load 5).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file
from test_collab_trainer import BASE, build, make_cfg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STEPS = 8
RUN = dict(collab_policies="full", role_block_steps=2, max_steps=STEPS, save_strategy="steps", save_steps=1)


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline",
               TRL_EXPERIMENTAL_SILENCE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _complete_checkpoints(out: Path) -> list[int]:
    """Checkpoints whose last file is written (the Trainer writes trainer_state.json after
    collab_state.pt and rng_state.pth)."""
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")
                  if all((p / f).is_file() for f in ("trainer_state.json", "rng_state.pth", "collab_state.pt")))


def _kill_after_switch(rec: Path, out: Path) -> int:
    """Start the run, SIGKILL it once a checkpoint at step >= 3 is complete; that step."""
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.train", str(rec)], cwd=REPO, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not [k for k in _complete_checkpoints(out) if k >= 3]:
        time.sleep(0.02)
    assert proc.poll() is None, "run ended before it could be killed: " + proc.stderr.read().decode()[-800:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = _complete_checkpoints(out)
    assert done and 3 <= done[-1] < STEPS, done
    return done[-1]


def test_sigkill_after_role_switch_resumes_exactly(tmp_path, collab_model_dir):
    ref = build(make_cfg(tmp_path, collab_model_dir, name="ref", **dict(RUN, save_strategy="no")))
    ref.train()

    out = tmp_path / "run"
    rec = tmp_path / "run.yaml"
    rec.write_text(yaml.safe_dump(dict(BASE, model_name_or_path=collab_model_dir, output_dir=str(out), **RUN)))
    k = _kill_after_switch(rec, out)
    killed_at = torch.load(out / f"checkpoint-{k}" / "collab_state.pt", weights_only=True)
    assert killed_at["global_step"] == k and set(killed_at["policies"]["parked"]) == {"thinker", "solver"} - {
        killed_at["policies"]["loaded"]}
    r = subprocess.run([sys.executable, "-m", "agentrl.train", str(rec), "--resume_from_checkpoint", "true"],
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]

    # schedule position: every step logged once, trained roles in blocks of 2, the Solver loaded at the end
    state = json.loads((out / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    logged = [h for h in state["log_history"] if "loss" in h]
    assert [h["step"] for h in logged] == list(range(1, STEPS + 1))
    assert [h["collab/trained_role"] for h in logged] == [0, 0, 1, 1, 0, 0, 1, 1]
    final = torch.load(out / f"checkpoint-{STEPS}" / "collab_state.pt", weights_only=True)
    assert final["global_step"] == STEPS and final["policies"]["loaded"] == ref.algorithm.policies.loaded == "solver"
    assert dict(final["schedule"], roles=list(final["schedule"]["roles"])) == {
        "roles": ["thinker", "solver"], "kind": "blocks", "block_steps": 2}
    # CCPO's EMA statistics: one update per iteration, equal to the uninterrupted run's
    assert final["ccpo"] == ref.algorithm_state.state_dict() and ref.algorithm_state.delta.updates == STEPS
    # both policies' final weights (save_model writes policies/<name>/)
    init = load_file(str(Path(collab_model_dir) / "model.safetensors"))
    for name in ("thinker", "solver"):
        got = load_file(str(out / "policies" / name / "model.safetensors"))
        with ref.algorithm.policies.use_policy(name):
            want = {n: p.detach().clone() for n, p in ref.algorithm.policies.swaps.params}
        assert set(want) <= set(got)
        for n, p in want.items():
            assert torch.allclose(got[n], p, rtol=0, atol=1e-6), (name, n)
        assert any(not torch.equal(init[n], got[n]) for n in want if n in init), name  # training moved it
