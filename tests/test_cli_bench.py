"""``agentrl bench``: one dispatcher over the benchmarks of ``agentrl/benchmarks/``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.benchmarks import BENCHMARKS, main
from agentrl.cli import main as cli_main

REPO = Path(__file__).resolve().parent.parent


def test_help_lists_every_benchmark_on_one_line(capsys):
    assert cli_main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    listed = [ln.split()[0] for ln in out.splitlines() if ln.startswith("  ")]
    assert listed == list(BENCHMARKS)
    assert all((REPO / "agentrl" / "benchmarks" / f"{mod}.py").is_file() for mod, _ in BENCHMARKS.values())


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_each_benchmark_answers_help_under_its_name(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: agentrl bench {name} ")


def test_unknown_benchmark_is_one_line_and_exit_2(capsys):
    assert main(["nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "valid: credit, envs" in err


def test_python_m_runs_a_benchmark_with_its_old_table():
    r = subprocess.run([sys.executable, "-m", "agentrl.benchmarks", "credit", "--records", "300", "--repeats", "1",
                        "--dim", "8", "--estimators", "grpo,rloo"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    head, *rows = r.stdout.splitlines()
    assert head.split() == ["estimator", "seconds", "cpu_s", "records/s", "step_sig"]
    assert [x.split()[0] for x in rows] == ["grpo", "rloo"]


def test_rollout_benchmark_through_the_dispatcher(capsys):
    assert main(["rollout", "--env", "agentrl/TextCraft-v0", "--episodes", "2", "--workers", "0", "--repeats", "1",
                 "--max-turns", "3", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert row["workers"] == 0 and row["episodes"] == 2 and row["turns"] > 0
    assert main(["rollout", "--workers", "x"]) == 2


def test_training_step_benchmark_runs_offline_on_a_tiny_model():
    """``bench step`` builds its tiny model offline (benchmarks.setup) and reports a real step."""
    r = subprocess.run([sys.executable, "-m", "agentrl.benchmarks", "step", "--steps", "1", "--rollouts", "4",
                        "--threads", "1"], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads(r.stdout.strip().splitlines()[-1])
    assert (row["model"], row["credit"], row["rollouts_per_step"], row["threads"]) == ("tiny", "grpo", 4, 1)
    assert row["step_s"] > 0 and row["rollout_s"] > 0 and row["update_s"] > 0
