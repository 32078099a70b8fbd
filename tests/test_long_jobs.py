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
    assert "recipes/rtmc/cpu/rtmc_swe_grpo.yaml seed 0 (exit 3)" in r.stdout
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


def test_sft_model_appears_whole_or_not_at_all(tmp_path, monkeypatch):
    """The SFT warm start is skipped by the demo and `make arena` when out/config.json exists: a
    save cut short must leave no config.json."""
    import os

    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from agentrl.models import build_tiny_model
    from agentrl.sft import save_model_atomically

    src = build_tiny_model(tmp_path / "src", vocab_size=300, hidden_size=16, num_layers=1, num_heads=2,
                           num_kv_heads=1)
    tr = Trainer(model=AutoModelForCausalLM.from_pretrained(src),
                 args=TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], use_cpu=True))
    tok = AutoTokenizer.from_pretrained(src)
    out = tmp_path / "sft"
    out.mkdir()
    real = os.replace

    def dies_at_weights(a, b):
        if str(b).endswith("model.safetensors"):
            raise KeyboardInterrupt  # the process ends here
        return real(a, b)

    monkeypatch.setattr(os, "replace", dies_at_weights)
    try:
        save_model_atomically(tr, tok, out)
    except KeyboardInterrupt:
        pass
    assert not (out / "config.json").exists()
    monkeypatch.setattr(os, "replace", real)
    save_model_atomically(tr, tok, out)  # the rerun
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert not (out / ".partial-model").exists()
    AutoModelForCausalLM.from_pretrained(out)
