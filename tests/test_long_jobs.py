"""Long jobs that can be run again: `make repro-*` goes on past a failed launch and names every
failure at the end, each launch resumes (`--resume_from_checkpoint auto`, tested in
tests/trainer/test_checkpoint_faults.py), and the arena reports a failed run instead of dying."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_make_repro_goes_on_after_a_failure_and_lists_failures(tmp_path):
    # the Makefile's control flow is under test: `accelerate` here records its arguments and fails
    # for one recipe (the real launches are tested in tests/trainer)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    fake = bin_dir / "accelerate"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\ncase "$*" in *rtmc_swe_grpo*) exit 3;; esac\nexit 0\n')
    fake.chmod(0o755)
    runs = tmp_path / "runs"
    cmd = ["make", "-s", "-o", ".venv/.setup-done", "repro-rtmc-cpu", f"BIN={bin_dir}", f"RUNS={runs}"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all("--resume_from_checkpoint auto" in c for c in calls)  # the second ran too
    assert "repro-rtmc-cpu: 1 run(s) failed" in r.stdout
    assert "recipes/cpu/rtmc_swe_grpo.yaml seed 0 (exit 3)" in r.stdout
    assert not (runs / ".failed-repro-rtmc-cpu").exists()
    # all launches succeed: the target says so and exits 0
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexit 0\n')
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "repro-rtmc-cpu: every run finished" in r.stdout, r.stdout + r.stderr


def test_arena_reports_a_failed_run_and_goes_on(tmp_path, capsys):
    from agentrl.arena import Contender, RunSpec, _pool_run, run_one

    spec = RunSpec(str(REPO / "recipes/textcraft_grpo_tiny_cpu.yaml"), str(tmp_path / "no_model"),
                   Contender("grpo", "grpo"), 0, str(tmp_path / "runs" / "grpo" / "seed0"), 1, 1, {})
    res = run_one(spec)
    assert res["label"] == "grpo" and res["seed"] == 0 and res["failed"].startswith("exit 2;")
    assert "model folder not found" in (tmp_path / "runs" / "grpo" / "seed0" / "train.log").read_text()
    assert not (tmp_path / "runs" / "grpo" / "seed0" / "result.json").exists()  # retried by a rerun
    capsys.readouterr()
    assert [r["label"] for r in _pool_run([spec], 1)] == ["grpo"]  # no exception: the arena goes on
    assert "1/1 FAILED: grpo seed 0 (exit 2;" in capsys.readouterr().out
