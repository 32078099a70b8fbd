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


def _metrics(tmp_path, rows):
    p = tmp_path / "metrics.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_gpu_summary_checks_by_hand(tmp_path):
    from agentrl.benchmarks.gpu import summarize

    good = [{"step": s, "loss": 0.1, "grad_norm": 0.5, "kl": 0.0 if s == 1 else 1e-3, "step_time": t,
             "time/update_s": u, "train/nonfinite_steps": 0} for s, t, u in ((1, 9.0, 3.0), (2, 4.0, 1.0), (3, 6.0, 2.0))]
    r = summarize(_metrics(tmp_path, good), 3)
    # step 1 is the warm-up: means over steps 2-3
    assert r["problems"] == [] and r["step_time"] == 5.0 and r["time/update_s"] == 1.5 and r["kl_step1"] == 0.0
    bad = [dict(good[0], kl=2e-4), dict(good[1], grad_norm=float("nan")), dict(good[2], **{"train/nonfinite_steps": 1})]
    r = summarize(_metrics(tmp_path, bad), 4)
    assert r["problems"] == ["3 of 4 steps logged", "non-finite loss or gradient norm at steps [2]",
                             "the non-finite guard skipped steps", "kl 0.0002 at step 1 (policy = reference)"]


def test_gpu_plan_is_checked(capsys):
    from agentrl.benchmarks.gpu import parse_plan

    assert parse_plan("1.5b:plain:10,7b:lora:3") == [("1.5b", "plain", 10), ("7b", "lora", 3)]
    assert main(["gpu", "--plan", "1.5b:fsdp:3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bad --plan entry '1.5b:fsdp:3'" in err


@pytest.mark.slow
def test_gpu_check_runs_the_card_recipe_at_tiny_size_on_cpu(tmp_path):
    # what `make gpu-check` does on a GPU, at tiny size on this CPU: plain, ZeRO-3 in one process
    # and LoRA runs of the card's recipe, each finite with kl 0 at step 1, and the report
    env = dict(os.environ, AGENTRL_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "agentrl.benchmarks", "gpu", "--tiny", "--out", str(tmp_path / "gpu.md"),
                        "--json", str(tmp_path / "gpu.json"), "--runs", str(tmp_path / "runs")],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rep = json.loads((tmp_path / "gpu.json").read_text())
    assert [(x["mode"], x["steps"], x["ok"]) for x in rep["runs"]] == [("plain", 2, True), ("zero3", 2, True),
                                                                      ("lora", 2, True)]
    assert all(x["kl_step1"] == 0.0 and x["time/update_s"] > 0 for x in rep["runs"])
    md = (tmp_path / "gpu.md").read_text()
    assert md.count("| tiny |") == 3 and "agentrl / plain TRL" in md and "ZeRO-3 / plain step" in md
    # the HF bf16 sampler's line (SmolLM2 on a GPU; the tiny model here): a mismatch, measured
    assert rep["mismatch"]["k3"] > 0 and "HF bf16 sampler vs the fp32 learner" in md


def test_mismatch_benchmark_measures_a_bf16_sampler(tmp_path, capsys):
    out = tmp_path / "mm.json"
    assert main(["mismatch", "--model", "tiny", "--rollouts", "4", "--group", "2", "--max-turns", "2",
                 "--max-new-tokens", "8", "--threads", "1", "--bounds", "3,0.999:1.001", "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())
    assert (r["sampler"], r["learner"], r["episodes"]) == ("bfloat16", "float32", 4)
    # bf16 logits: the sampler's log-probs differ from the fp32 learner's (an fp32 sampler agrees to 1e-5)
    assert r["max_abs_d"] > 1e-4 and r["k3"] > 0
    m = r["modes"]
    for mode, f in m.items():
        assert f["mismatch_k3"] == pytest.approx(r["k3"], rel=1e-5), mode  # one KL, whatever the mode
        assert f["acts"] == f["truncated_frac"] + f["masked_frac"]
    for level in ("token", "sequence", "geometric"):
        # TRL's C_max 3 is far above a bf16 mismatch: nothing cut, every weight its ratio
        assert m[f"{level}_mask [-,3]"]["acts"] == 0 and m[f"{level}_truncate [-,3]"]["acts"] == 0
        # the same units leave a band whether they are truncated or masked
        tight = "[0.999,1.001]"
        assert m[f"{level}_mask {tight}"]["masked_frac"] == m[f"{level}_truncate {tight}"]["truncated_frac"]
    # seed 0 gives max |d| 2.3e-3 > ln(1 / 0.999): some token falls outside the band
    assert m["token_mask [0.999,1.001]"]["masked_frac"] > 0
    assert "token_truncate [-,3]" in capsys.readouterr().out
    assert main(["mismatch", "--bounds", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bad --bounds item '0.5'" in err
