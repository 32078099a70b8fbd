"""Console script dispatch, `agentrl launch`, and `agentrl report` on hand-written logs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.cli import main as cli_main
from agentrl.launch import build_command
from agentrl.report import make_report, smooth, steps_to_threshold

REPO = Path(__file__).resolve().parent.parent


def test_cli_help_and_unknown(capsys):
    assert cli_main(["--help"]) == 0
    assert "check-recipe" in capsys.readouterr().out
    assert cli_main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'frobnicate'" in err and "train" in err and "\n" == err[-1] and err.count("\n") == 1
    assert cli_main(["credit", "nope"]) == 2


def test_console_script_exit_code():
    # `python -m agentrl` is the same entry point as the console script
    p = subprocess.run([sys.executable, "-m", "agentrl", "nope"], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_launch_uses_recipe_accelerate_config(tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text("accelerate_config: accelerate_configs/cpu_zero3.yaml\nenv_id: agentrl/TextCraft-v0\n")
    cmd = build_command(str(r), ["--max_steps", "3"])
    assert cmd[1:3] == ["launch", "--config_file"]
    assert Path(cmd[3]).resolve() == REPO / "accelerate_configs" / "cpu_zero3.yaml"
    assert cmd[4:] == ["-m", "agentrl.train", str(r), "--max_steps", "3"]


def test_launch_cli_accelerate_config_wins(tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text("accelerate_config: accelerate_configs/cpu.yaml\nenv_id: agentrl/TextCraft-v0\n")
    for flags in (["--accelerate_config", "accelerate_configs/cpu_zero3.yaml"],
                  ["--accelerate-config=accelerate_configs/cpu_zero3.yaml"]):
        cmd = build_command(str(r), ["--max_steps", "3", *flags])
        assert Path(cmd[3]).resolve() == REPO / "accelerate_configs" / "cpu_zero3.yaml"
        assert cmd[4:] == ["-m", "agentrl.train", str(r), "--max_steps", "3"]  # not passed on


def test_launch_finds_accelerate_without_activated_venv(tmp_path, monkeypatch):
    # `.venv/bin/agentrl launch` is run without the venv on PATH
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    r = tmp_path / "r.yaml"
    r.write_text("env_id: agentrl/TextCraft-v0\n")
    exe = build_command(str(r), [])[0]
    assert Path(exe).is_file() and os.access(exe, os.X_OK)
    assert Path(exe).parent == Path(sys.executable).parent


@pytest.mark.parametrize("content, msg", [
    ("a: [1,\n", "not valid YAML"),
    ("- 1\n- 2\n", "must be a YAML mapping"),
    ("accelerate_config: nowhere.yaml\n", "accelerate config not found"),
])
def test_launch_bad_recipes(tmp_path, capsys, content, msg):
    from agentrl.launch import main

    r = tmp_path / "r.yaml"
    r.write_text(content)
    assert main([str(r), "--dry-run"]) == 2
    assert msg in capsys.readouterr().err


def test_smooth_and_threshold_by_hand():
    # window 2 trailing mean of [0, 1, 0, 1] = [0, .5, .5, .5]
    assert smooth([0, 1, 0, 1], 2) == [0.0, 0.5, 0.5, 0.5]
    xs, ys = [10, 20, 30, 40], [0.1, 0.55, 0.4, 0.8]
    assert steps_to_threshold(xs, ys, 0.5) == 20
    assert steps_to_threshold(xs, ys, 0.7) == 40
    assert steps_to_threshold(xs, ys, 0.9) is None


def test_report_from_trainer_state(tmp_path):
    run = tmp_path / "run_a"
    ck = run / "checkpoint-4"
    ck.mkdir(parents=True)
    history = [{"step": s, "env/success": v, "credit/singleton_frac": 1 - v} for s, v in
               [(1, 0.0), (2, 0.25), (3, 0.6), (4, 0.75)]]
    (ck / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    out = tmp_path / "rep"
    summary = make_report([str(run)], out, thresholds=[0.5, 0.7, 0.9])
    r = summary["runs"]["run_a"]
    assert r["steps_to_threshold"] == {"0.5": 3, "0.7": 4, "0.9": None}
    assert r["final_success"] == 0.75 and r["peak_success"] == 0.75 and r["points"] == 4
    for name in ("learning_curves.png", "steps_to_threshold.png", "singleton_fraction.png"):
        assert (out / name).stat().st_size > 1000


def test_report_missing_run(tmp_path, capsys):
    from agentrl.report import main

    assert main([str(tmp_path / "nope")]) == 2
    assert "run folder not found" in capsys.readouterr().err
