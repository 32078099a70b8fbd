"""Fault injection: a run killed (SIGKILL) at any moment, inside a checkpoint save included, resumes
with ``--resume_from_checkpoint true`` and ends with the metrics and weights of an uninterrupted run.
Also the half-written folders an older version (or a copy) leaves, and ``auto``.

Runtime: ~2 min for the default kill points (runs in parallel), ~2 min more for the slow ones.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from test_trainer import BASE

from agentrl.checkpoints import STAGING, incomplete_reason, newest_complete

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STEPS = 4
# timings and throughput differ between runs; everything else a step logs must be equal
VOLATILE = ("time/", "step_time", "gen/tokens_per_s", "train_runtime", "train_samples_per_second",
            "train_steps_per_second")


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline",
               HF_HUB_DISABLE_TELEMETRY="1", TRL_EXPERIMENTAL_SILENCE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _recipe(tmp_path, name, model, out):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(dict(BASE, model_name_or_path=model, output_dir=str(out), num_tasks=8,
                                     num_generations=2, per_device_train_batch_size=4, max_steps=STEPS,
                                     save_strategy="steps", save_steps=1, learning_rate=5e-3)))
    return p


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "loss" in r]  # per-step rows (the final summary averages over this process)
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def _weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "model.safetensors"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir):
    """An uninterrupted run (same process as the tests: same numerics as a fresh one on CPU)."""
    from agentrl.config import load_recipe
    from agentrl.train import build_trainer

    tmp = tmp_path_factory.mktemp("ref")
    out = tmp / "out"
    tr = build_trainer(load_recipe(str(_recipe(tmp, "ref.yaml", tiny_model_dir, out)), []))
    tr.train()
    tr.save_model(str(out))
    assert len(_metrics(out)) == STEPS
    return out


def _kill_then_resume(tmp_path, tiny_model_dir, reference, points):
    """Start one run per (point, step) under faulty_train.py, check each died by SIGKILL, resume
    each with --resume_from_checkpoint true; returns {point: (resume's stderr, out)}."""
    runs = {}
    for point, step in points:
        out = tmp_path / point
        rec = _recipe(tmp_path, f"{point}.yaml", tiny_model_dir, out)
        runs[point] = (rec, out, subprocess.Popen([sys.executable, str(HERE / "faulty_train.py"), point, str(step),
                                                   str(rec)], cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.PIPE, text=True))
    for point, (_, _, p) in runs.items():
        _, err = p.communicate(timeout=600)
        assert p.returncode == -9, f"{point}: exit {p.returncode}\n{err[-2000:]}"
    resumed = {point: (out, subprocess.Popen([sys.executable, "-m", "agentrl.train", str(rec),
                                              "--resume_from_checkpoint", "true"], cwd=REPO, env=_env(),
                                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
               for point, (rec, out, _) in runs.items()}
    got = {}
    for point, (out, p) in resumed.items():
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"{point}: {err[-3000:]}"
        got[point] = (err, out)
        assert _metrics(out) == _metrics(reference), point
        ref_w, w = _weights(reference), _weights(out)
        assert set(ref_w) == set(w)
        for n in ref_w:
            assert torch.allclose(ref_w[n], w[n], atol=1e-6), (point, n)
        assert not (out / STAGING).exists(), point
        assert [incomplete_reason(out / f"checkpoint-{k}") for k in range(1, STEPS + 1)] == [None] * STEPS, point
    return got


def _resumed_from(err: str) -> str:
    line = next(ln for ln in err.splitlines() if "resuming from" in ln)
    return line.split("resuming from ")[1].split()[0]


def test_kill_inside_and_between_saves_resumes_exactly(tmp_path, tiny_model_dir, reference):
    got = _kill_then_resume(tmp_path, tiny_model_dir, reference,
                            [("after_weights", 2), ("before_publish", 2), ("mid_step", 2)])
    # a save cut short leaves no checkpoint-2 (only .partial, cleared): resume from 1
    for point in ("after_weights", "before_publish"):
        err, out = got[point]
        assert _resumed_from(err) == str(out / "checkpoint-1"), err
        assert "half-written by a killed run" in err
    assert _resumed_from(got["mid_step"][0]) == str(tmp_path / "mid_step" / "checkpoint-2")


@pytest.mark.slow
def test_kill_at_every_other_moment_resumes_exactly(tmp_path, tiny_model_dir, reference):
    got = _kill_then_resume(tmp_path, tiny_model_dir, reference,
                            [("save_start", 3), ("after_optimizer", 3), ("before_state", 3), ("before_rotate", 3)])
    for point in ("save_start", "after_optimizer", "before_state"):
        assert _resumed_from(got[point][0]).endswith("checkpoint-2"), point
    assert _resumed_from(got["before_rotate"][0]).endswith("checkpoint-3")


def _legacy_broken(reference: Path, tmp_path: Path) -> Path:
    """The reference run with checkpoints as a non-atomic save leaves them when killed: checkpoint-4
    an empty folder, checkpoint-3 with weights, a 0-byte optimizer.pt and no trainer_state.json."""
    out = tmp_path / "legacy"
    shutil.copytree(reference, out)
    for f in ("model.safetensors", "metrics.jsonl", "run_info.json"):
        (out / f).unlink(missing_ok=True)
    shutil.rmtree(out / "checkpoint-4")
    (out / "checkpoint-4").mkdir()
    (out / "checkpoint-3" / "optimizer.pt").write_bytes(b"")
    (out / "checkpoint-3" / "trainer_state.json").unlink()
    # the reference's metrics up to step 2, as the killed run had logged them (and more)
    rows = (reference / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    return out


def test_resume_skips_half_written_checkpoints_of_older_runs(tmp_path, tiny_model_dir, reference):
    out = _legacy_broken(reference, tmp_path)
    ck, skipped = newest_complete(out)
    assert ck == out / "checkpoint-2"
    assert [(p.name, why) for p, why in skipped] == [("checkpoint-4", "no trainer_state.json"),
                                                      ("checkpoint-3", "no trainer_state.json")]
    (out / "checkpoint-3" / "trainer_state.json").write_text((reference / "checkpoint-3" / "trainer_state.json").read_text())
    assert incomplete_reason(out / "checkpoint-3") == "optimizer.pt is empty"
    rec = _recipe(tmp_path, "legacy.yaml", tiny_model_dir, out)
    r = subprocess.run([sys.executable, "-m", "agentrl.train", str(rec), "--resume_from_checkpoint", "true"],
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (f"resuming from {out / 'checkpoint-2'} (skipped checkpoint-4: no trainer_state.json; "
            "skipped checkpoint-3: optimizer.pt is empty)") in r.stderr
    assert _metrics(out) == _metrics(reference)
    # naming a half-written checkpoint: one line, exit 2
    shutil.rmtree(out / "checkpoint-4")
    (out / "checkpoint-4").mkdir()
    r = subprocess.run([sys.executable, "-m", "agentrl.train", str(rec), "--resume_from_checkpoint",
                        str(out / "checkpoint-4")], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "is incomplete (no trainer_state.json)" in lines[0], r.stderr


def test_the_newest_checkpoint_is_the_highest_step_not_the_last_name(tmp_path):
    """Checkpoints 1..11 as a save writes them (trainer_state.json for step N, non-empty weights
    and optimizer), checkpoint-11 cut short (a 0-byte optimizer.pt). By step the newest complete
    one is checkpoint-10 (11 skipped); by folder name "checkpoint-9" sorts after "checkpoint-11"
    and "checkpoint-10" ("9" > "1"), so a name order would resume from step 9 and skip nothing."""
    from agentrl.train import resume_target

    out = tmp_path / "out"
    for n in range(1, 12):
        ck = out / f"checkpoint-{n}"
        ck.mkdir(parents=True)
        (ck / "trainer_state.json").write_text(json.dumps({"global_step": n, "max_steps": 20}))
        (ck / "model.safetensors").write_bytes(b"w" * 8)
        (ck / "optimizer.pt").write_bytes(b"o" * 8 if n < 11 else b"")
    ck, skipped = newest_complete(out)
    assert ck == out / "checkpoint-10"
    assert [(p.name, why) for p, why in skipped] == [("checkpoint-11", "optimizer.pt is empty")]
    assert resume_target("true", str(out)) == resume_target("auto", str(out), 20) == str(out / "checkpoint-10")


def test_resume_auto(tmp_path, tiny_model_dir, reference):
    from agentrl.recipe_file import RecipeError
    from agentrl.train import RunFinished, resume_target

    # empty or missing: start; killed before the first checkpoint (only agentrl's own files): start over
    assert resume_target("auto", str(tmp_path / "none"), STEPS) is None
    early = tmp_path / "early"
    (early / STAGING / "checkpoint-1").mkdir(parents=True)
    (early / "metrics.jsonl").write_text("")
    (early / "checkpoint-1").mkdir()
    assert resume_target("auto", str(early), STEPS) is None and not early.exists()
    # foreign files and no checkpoint: refused
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(RecipeError, match="notes.txt"):
        resume_target("auto", str(other), STEPS)
    # a complete checkpoint: resume from it; more steps asked of a finished run: resume too
    assert resume_target("auto", str(reference), STEPS + 2) == str(reference / f"checkpoint-{STEPS}")
    # a finished run (agentrl train marks run_info.json): nothing to do, exit 0
    rec = _recipe(tmp_path, "auto.yaml", tiny_model_dir, tmp_path / "auto")
    r = subprocess.run([sys.executable, "-m", "agentrl.train", str(rec), "--resume_from_checkpoint", "auto",
                        "--max_steps", "1"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((tmp_path / "auto" / "run_info.json").read_text())["finished_step"] == 1
    r = subprocess.run([sys.executable, "-m", "agentrl.train", str(rec), "--resume_from_checkpoint", "auto",
                        "--max_steps", "1"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "already finished (step 1): nothing to do" in r.stderr, r.stderr[-3000:]
    with pytest.raises(RunFinished):
        resume_target("auto", str(tmp_path / "auto"), 1)


def test_each_epochs_task_order_is_recomputed_on_resume():
    # TRL's RepeatSampler draws one permutation per epoch from a generator seeded once; a run resumed
    # in epoch 2 must see epoch 2's order, not epoch 0's again (agentrl.trainer.tasks.EpochTaskOrder)
    from types import SimpleNamespace

    from trl.trainer.utils import RepeatSampler

    from agentrl.trainer.tasks import EpochTaskOrder

    def sampler():
        return RepeatSampler(list(range(12)), mini_repeat_count=2, batch_size=3, shuffle=True, seed=7)

    def loader(s):
        return SimpleNamespace(batch_sampler=SimpleNamespace(sampler=s))

    first = sampler()
    orders = [list(first) for _ in range(3)]  # the uninterrupted run: epochs 0, 1, 2
    assert orders[0] != orders[1] != orders[2]
    cb = EpochTaskOrder()
    for epoch, state_epoch in ((0, 0.0), (1, 1.0), (2, 2.25)):  # at an epoch's start, or mid-epoch
        fresh = sampler()  # a resumed run builds it anew
        cb.on_epoch_begin(None, SimpleNamespace(epoch=state_epoch), None, train_dataloader=loader(fresh))
        assert list(fresh) == orders[epoch], epoch
    # the uninterrupted run's own sampler at the start of epoch 2 (already two draws in) is unchanged
    again = sampler()
    list(again), list(again)
    cb.on_epoch_begin(None, SimpleNamespace(epoch=2.0), None, train_dataloader=loader(again))
    assert list(again) == orders[2]


@pytest.mark.parametrize("change, said", [
    ({"credit": "gigpo"}, "is a checkpoint of a run with credit 'grpo', this recipe has 'gigpo'"),
    ({"context_mode": "trajectory"}, "is a checkpoint of a run with context_mode 'window', this recipe has 'trajectory'"),
    ({"use_peft": True, "lora_r": 4, "lora_alpha": 8}, "is a checkpoint of a run with use_peft False, this recipe has True"),
    ({"algorithm": "faulty", "env_modules": ["count_env", "faults"]}, "is a checkpoint of a run with algorithm 'grpo', this recipe has 'faulty'"),
])
def test_resume_refuses_another_recipes_checkpoint(tmp_path, tiny_model_dir, reference, change, said):
    # a checkpoint of the reference run (grpo, window, full weights), resumed under another recipe:
    # one line naming what differs, before anything trains
    import faults  # noqa: F401  (the algorithm "faulty")

    from agentrl.config import load_recipe
    from agentrl.recipe_file import RecipeError
    from agentrl.train import build_trainer

    out = tmp_path / "other"
    rec = _recipe(tmp_path, "other.yaml", tiny_model_dir, out)
    d = yaml.safe_load(rec.read_text())
    d.update(change)
    rec.write_text(yaml.safe_dump(d))
    tr = build_trainer(load_recipe(str(rec), []))
    with pytest.raises(RecipeError) as e:
        tr.train(resume_from_checkpoint=str(reference / "checkpoint-2"))
    assert str(e.value) == f"resume: checkpoint-2 {said}: resume with the checkpoint's recipe, or start a new output_dir"
    assert tr.state.global_step == 0


def test_resume_refuses_other_process_counts_and_older_layouts(tmp_path, tiny_model_dir, reference):
    out = tmp_path / "copy"
    shutil.copytree(reference, out)
    ident = out / "checkpoint-2" / "agentrl_checkpoint.json"
    d = json.loads(ident.read_text())
    assert (d["layout"], d["processes"], d["keys"]["credit"]) == (2, 1, "grpo")
    ident.write_text(json.dumps(dict(d, processes=2)))
    rec = _recipe(tmp_path, "copy.yaml", tiny_model_dir, out)
    r = subprocess.run([sys.executable, "-m", "agentrl.train", str(rec), "--resume_from_checkpoint",
                        str(out / "checkpoint-2")], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("agentrl train: error")]
    assert r.returncode == 2 and lines == ["agentrl train: error: resume: checkpoint-2 was written by 2 process(es), "
                                           "this run has 1: resume with the same number of processes"], r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    from agentrl.checkpoints import identity_mismatch

    ident.unlink()
    assert identity_mismatch(out / "checkpoint-2", {"processes": 1, "keys": {}}).startswith(
        "checkpoint-2 was written by an older agentrl (checkpoint layout 1")
