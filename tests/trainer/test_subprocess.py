"""`python -m agentrl.train` as a user runs it: kill + resume, error exits, DeepSpeed ZeRO-3.

Runtime: resume ~60 s, errors ~25 s, ZeRO-3 ~60 s (+~2 min once on a cold machine for
DeepSpeed's shm op JIT build).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from test_trainer import BASE

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _env():
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline", HF_HUB_DISABLE_TELEMETRY="1",
               TRL_EXPERIMENTAL_SILENCE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _recipe(tmp_path, name, **kw):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(dict(BASE, **kw)))
    return p


def _complete_checkpoints(out: Path):
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")
                   if (p / "trainer_state.json").is_file() and (p / "rng_state.pth").is_file())


def test_kill_and_resume_continues_exactly(tmp_path, tiny_model_dir):
    steps = 6
    common = dict(model_name_or_path=tiny_model_dir, num_tasks=8, num_generations=2, per_device_train_batch_size=4,
                  max_steps=steps, save_strategy="steps", save_steps=1, learning_rate=5e-3)
    # uninterrupted reference (same process as the tests: same numerics as a fresh process on CPU)
    from agentrl.config import load_recipe
    from agentrl.train import build_trainer

    ref_out = tmp_path / "ref"
    ref_cfg = load_recipe(str(_recipe(tmp_path, "ref.yaml", output_dir=str(ref_out), save_strategy="no",
                                      **{k: v for k, v in common.items() if k != "save_strategy"})), [])
    ref = build_trainer(ref_cfg)
    ref.train()
    ref_params = {n: p.detach().clone() for n, p in ref.model.named_parameters()}

    out = tmp_path / "run"
    rec = _recipe(tmp_path, "run.yaml", output_dir=str(out), **common)
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.train", str(rec)], cwd=REPO, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not _complete_checkpoints(out):
        time.sleep(0.05)
    assert proc.poll() is None, "run finished before it could be killed: " + proc.stderr.read().decode()[-500:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = _complete_checkpoints(out)
    assert done and done[-1] < steps
    k = done[-1]
    ckpt = out / f"checkpoint-{k}"
    r = subprocess.run([sys.executable, "-m", "agentrl.train", str(rec), "--resume_from_checkpoint", str(ckpt)],
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    state = json.loads((out / f"checkpoint-{steps}" / "trainer_state.json").read_text())
    assert state["global_step"] == steps
    logged = [h["step"] for h in state["log_history"] if "loss" in h]
    assert logged == list(range(1, steps + 1))  # steps 1..k from the checkpoint, k+1.. from the resumed run
    # optimizer, scheduler, RNG and data order restored: the resumed weights equal the reference's
    from safetensors.torch import load_file

    final = load_file(str(out / "model.safetensors"))
    assert set(ref_params) <= set(final)
    changed = 0
    for n, p in ref_params.items():
        assert torch.allclose(final[n], p, atol=1e-6), n
    init = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    changed = sum(not torch.equal(init[n], final[n]) for n in ref_params)
    assert changed > 0  # training moved the weights, so the equality above is informative


def test_cli_errors_one_line_exit_2(tmp_path, tiny_model_dir):
    cases = [
        (_recipe(tmp_path, "a.yaml", model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "o"),
                 learnin_rate=0.1), [], "unknown config key 'learnin_rate'"),
        (_recipe(tmp_path, "b.yaml", model_name_or_path="/nonexistent/model", output_dir=str(tmp_path / "o")), [],
         "model folder not found"),
        (_recipe(tmp_path, "c.yaml", model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "o")),
         ["--credit", "nope"], "nope"),
    ]
    procs = [(subprocess.Popen([sys.executable, "-m", "agentrl.train", str(p), *extra], cwd=REPO, env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), needle)
             for p, extra, needle in cases]
    for proc, needle in procs:
        _, err = proc.communicate(timeout=300)
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        assert proc.returncode == 2, err[-1000:]
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err[-1000:]


@pytest.mark.slow
def test_deepspeed_zero3_two_ranks_lockstep(tmp_path, tiny_model_dir):
    pytest.importorskip("deepspeed")
    out = tmp_path / "ds"
    # 2 tasks with episode lengths 1 and 4 (lengths[seed % 2]); 1 group of 2 per rank, so one
    # rank's episodes always end 3 turns before the other's: it must keep joining generate calls.
    rec = _recipe(tmp_path, "ds.yaml", model_name_or_path=tiny_model_dir, output_dir=str(out), num_tasks=2,
                  task_options={"lengths": [1, 4], "parity": True}, num_generations=2,
                  per_device_train_batch_size=2, max_steps=2, save_rollouts=True,
                  env_modules=["count_env", "rank_rows"], algorithm="rank_rows",  # each rank dumps its rows
                  use_cpu=False)  # use_cpu would make accelerate pick MULTI_CPU DDP, not DeepSpeed
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "accelerate_configs" / "cpu_zero3.yaml"), "-m", "agentrl.train", str(rec)]
    r = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for it in (0, 1):
        recs = [json.loads(x) for x in (out / "rollouts" / f"iter_{it:05d}.jsonl").read_text().splitlines()]
        lengths = {}
        for d in recs:
            lengths[d["traj_id"]] = lengths.get(d["traj_id"], 0) + 1
        ranks = {tid.split(":")[1] for tid in lengths}
        assert ranks == {"r0", "r1"}  # both ranks' records reached the global credit batch
        assert sorted(lengths.values()) == [1, 1, 4, 4]
        # each rank's rows carry its own records' advantages (the rank's slice of the gathered
        # batch): one rank has the 1-step episodes, the other the 4-step ones, so a wrong slice
        # gives the wrong count or the other rank's values
        by_traj = {}
        for d in recs:
            by_traj.setdefault(d["traj_id"], []).append(d["info"]["advantage"])
        for rank in (0, 1):
            dump = json.loads((out / "rank_rows" / f"r{rank}_{it}.json").read_text())
            want = [a for t in dict.fromkeys(dump["record_trajs"]) for a in by_traj[t]]
            assert {t.split(":")[1] for t in dump["record_trajs"]} == {f"r{rank}"}
            assert dump["row_advantages"] == pytest.approx(want, abs=1e-6), (it, rank)
