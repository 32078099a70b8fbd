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
    from agentrl.runinfo import metrics_line

    p = tmp_path / "metrics.jsonl"  # written as agentrl train writes it: a NaN becomes null
    p.write_text("".join(metrics_line(r) + "\n" for r in rows))
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


def test_gpu_summary_takes_each_phases_highest_step(tmp_path):
    from agentrl.benchmarks.gpu import memory_table, summarize

    rows = [{"step": 1, "loss": 0.1, "grad_norm": 0.5, "step_time": 2.0, "mem/forward_gib": 1.25, "mem/step_gib": 1.5},
            {"step": 2, "loss": 0.1, "grad_norm": 0.5, "step_time": 2.0, "mem/forward_gib": 1.75, "mem/step_gib": 1.5,
             "mem/checkpoint_gib": 0.5}]
    r = summarize(_metrics(tmp_path, rows), 2)
    assert r["memory"] == {"forward": 1.75, "step": 1.5, "checkpoint": 0.5}
    table = memory_table({"cuda": True, "runs": [dict(r, body="1.5b", mode="plain")]})
    assert table[-1] == "| 1.5b | plain | - | - | - | - | - | 1.75 | - | - | 0.50 | 1.50 |"


def test_gpu_plan_is_checked(capsys):
    from agentrl.benchmarks.gpu import parse_plan

    assert parse_plan("1.5b:plain:10,7b:lora:3") == [("1.5b", "plain", 10), ("7b", "lora", 3)]
    assert main(["gpu", "--plan", "1.5b:fsdp:3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bad --plan entry '1.5b:fsdp:3'" in err


def test_gpu_check_adds_trls_colocated_vllm_where_it_imports():
    from agentrl.benchmarks.gpu import (
        DEFAULT_PLAN,
        default_plan,
        markdown,
        overrides,
        parse_plan,
    )
    from agentrl.sampling.vllm_engine import vllm_in_process

    assert default_plan(False) == DEFAULT_PLAN
    assert parse_plan(default_plan(True))[-1] == ("1.5b", "vllm", 3)
    assert not vllm_in_process()  # vLLM's CPU build lives in .venv-vllm, never in agentrl's venv

    def keys(mode, cuda):
        ov = overrides("1.5b", mode, 3, Path("model"), Path("out"), False, cuda)
        return dict(zip(ov[::2], ov[1::2], strict=True))

    assert keys("vllm", True)["--use_vllm"] == "true" and keys("vllm", True)["--vllm_mode"] == "colocate"
    assert keys("vllm", False)["--use_vllm"] == "true" and "--vllm_mode" not in keys("vllm", False)
    assert "--use_vllm" not in keys("plain", True)
    facts = {"device": "cpu", "torch": "2.13.0", "cuda": None, "transformers": "5.23.0", "trl": "1.16.0",
             "deepspeed": None, "peft": None, "vllm": None}
    md = markdown({"facts": facts, "full_shape": False, "runs": [], "cuda": False, "date": "2026-12-06"}, "agentrl bench gpu")
    assert "vLLM: not installed here (`--plan 1.5b:vllm:3`" in md
    md = markdown({"facts": dict(facts, vllm="0.31.0"), "full_shape": False, "runs": [], "cuda": False, "date": "2026-12-06"}, "x")
    assert "vLLM: 0.31.0 installed, not in this plan" in md


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
    # log_memory: every run's peak per phase (resident memory on this CPU), the step's the largest
    assert all(0 < x["memory"]["forward"] <= x["memory"]["step"] and x["memory"]["generation"] > 0 for x in rep["runs"])
    md = (tmp_path / "gpu.md").read_text()
    assert md.count("| tiny |") == 6 and "agentrl / plain TRL" in md and "ZeRO-3 / plain step" in md  # runs, memory
    assert "Peak memory per phase" in md and all(f"| tiny | {m} |" in md for m in ("plain", "zero3", "lora"))
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


def test_scale_fits_by_hand():
    from agentrl.benchmarks.scale import crossover, fit_quadratic, fit_tokens, plan

    # tokens per episode = 50 T + 3 T^2 exactly at T = 5, 10, 20: a = 50, b = 3
    a, b = fit_tokens([5, 10, 20], [50 * t + 3 * t * t for t in (5, 10, 20)])
    assert (round(a, 6), round(b, 6)) == (50.0, 3.0)
    c = fit_quadratic([5, 10, 20, 50], [1 + 0.5 * t + 0.01 * t * t for t in (5, 10, 20, 50)])
    assert [round(x, 6) for x in c] == [1.0, 0.5, 0.01]
    # window 2 + 0.4 T, trajectory 1 + 0.1 T + 0.02 T^2: equal where 0.02 T^2 - 0.3 T - 1 = 0,
    # T = (0.3 + sqrt(0.09 + 0.08)) / 0.04 = 17.81;
    # the 0.1-turn grid's first point past it is 17.9
    assert crossover((2.0, 0.4, 0.0), (1.0, 0.1, 0.02), 50) == 17.9
    assert crossover((2.0, 0.4, 0.0), (1.0, 0.1, 0.02), 15) is None
    cells = plan(["tiny", "smollm2"], [5, 10, 50], [4, 8], 4, 10, 20)
    assert ("tiny", "trajectory", 50, 4) in cells and ("smollm2", "window", 50, 4) not in cells
    # per mode: tiny T = 5, 10, 50 at G 4 and G 8 at T 10 (G 4 at T 10 is already there) = 4; SmolLM2
    # without T = 50 = 3; two modes: 2 x (4 + 3) = 14 cells, none twice
    assert ("smollm2", "trajectory", 10, 8) in cells and len(cells) == len(set(cells)) == 14


@pytest.mark.slow
def test_scale_bench_measures_both_modes_on_the_tiny_model(tmp_path):
    # three turn counts in both modes (one task, G = 2): every episode runs its full turns (a random
    # model writes no valid action), trajectory prompts grow with the turns and window ones do not
    r = subprocess.run([sys.executable, "-m", "agentrl.benchmarks", "scale", "--models", "tiny", "--turns", "2,4,8",
                        "--groups", "2", "--base-group", "2", "--base-turns", "4", "--out", str(tmp_path / "s.md"),
                        "--plot", str(tmp_path / "s.png"), "--json", str(tmp_path / "s.json")],
                       cwd=REPO, capture_output=True, text=True, timeout=1200, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    cells = json.loads((tmp_path / "s.json").read_text())
    assert sorted((c["mode"], c["turns"]) for c in cells) == [("trajectory", 2), ("trajectory", 4), ("trajectory", 8),
                                                              ("window", 2), ("window", 4), ("window", 8)]
    assert all(c["episode_turns"] == c["turns"] and c["step_cpu_s"] > 0 and c["peak_gib"] > 0 for c in cells)
    per_turn = {(c["mode"], c["turns"]): c["prompt_tokens_per_episode"] / c["turns"] for c in cells}
    assert per_turn[("trajectory", 8)] > 2 * per_turn[("trajectory", 2)]
    assert per_turn[("window", 8)] < 1.2 * per_turn[("window", 2)]
    md = (tmp_path / "s.md").read_text()
    assert md.count("| tiny |") == 6 + 2 and "crosses" not in md and "tiny: iteration CPU time" in md
    assert (tmp_path / "s.png").stat().st_size > 1000
