"""agentrl arena: its statistics against hand-worked numbers, bad input, and a quick real race.

The quick race (2 estimators, 1 seed, 2 RL steps of a tiny model on TextCraft) checks that the
files exist and that their numbers agree with each other and with the per-run evaluations; it
cannot show learning (the full arena is a benchmark: `make arena`).
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.arena import ArenaError, parse_contenders, parse_seeds
from agentrl.arena_stats import auc, estimator_row, mean_se, median_steps, steps_to, verdict

REPO = Path(__file__).resolve().parent.parent


def test_mean_se_by_hand():
    # [10, 20, 30]: mean 20, sample std 10, s.e. 10 / sqrt(3)
    m, se = mean_se([10.0, 20.0, 30.0])
    assert m == 20.0 and abs(se - 10 / math.sqrt(3)) < 1e-12
    assert mean_se([5.0]) == (5.0, None)


def test_auc_steps_to_and_median():
    # trapezoids over 0..20: (0->10: (20+40)/2*10 = 300) + (10->20: (40+30)/2*10 = 350) = 650 / 20 = 32.5
    assert auc([(0, 20.0), (10, 40.0), (20, 30.0)], 20) == 32.5
    # a curve that stops at 10 is held flat to 20: 300 + 40*10 = 700 / 20 = 35
    assert auc([(0, 20.0), (10, 40.0)], 20) == 35.0
    assert steps_to([(10, 25.0), (20, 41.0), (30, 50.0)], 40.0) == 20
    assert steps_to([(10, 25.0)], 40.0) is None
    # never-reached counts as infinitely slow: median of [10, 30, inf] is 30; of [10, inf, inf] is inf -> None
    assert median_steps([10, None, 30]) == 30
    assert median_steps([10, None, None]) is None


def _run(label, seed, finals, wins):
    return {"label": label, "seed": seed, "train_log": {"time/rollout_s": 2.0, "time/update_s": 1.0},
            "curve": [{"step": 10 * (i + 1), "success": f, "wins": wins if i == len(finals) - 1 else []}
                      for i, f in enumerate(finals)]}


def test_estimator_row_paired_against_baseline():
    warm = {"success": 20.0}
    base = {0: _run("grpo", 0, [25.0, 30.0], [True, False, False, False]),
            1: _run("grpo", 1, [20.0, 20.0], [False, False, False, True])}
    runs = [_run("gigpo", 0, [40.0, 50.0], [True, True, False, False]),
            _run("gigpo", 1, [30.0, 40.0], [True, False, False, True])]
    row = estimator_row(runs, base, warm, threshold=35.0, last_step=20)
    # finals 50, 40: mean 45, s.e. = stdev(50, 40)/sqrt(2) = 7.071/1.414 = 5
    assert row["final"] == 45.0 and abs(row["final_se"] - 5.0) < 1e-12
    # seed diffs 50-30 = 20 and 40-20 = 20: mean 20, s.e. 0
    assert row["diff_to_baseline"] == 20.0 and row["diff_se_seeds"] == 0.0
    # task pairs (8): d = [0, 1, 0, 0, 1, 0, 0, 0] -> mean 0.25, var = (6*0.0625 + 2*0.5625)/7 = 0.2143
    assert abs(row["diff_se_tasks"] - 100 * math.sqrt((6 * 0.0625 + 2 * 0.5625) / 7 / 8)) < 1e-9
    # threshold 35 reached at step 10 (seed 0, 40%) and step 20 (seed 1, 40%): median 15
    assert row["steps_to_threshold"] == [10, 20] and row["median_steps_to_threshold"] == 15
    # AUC seed 0: (20+40)/2*10 + (40+50)/2*10 = 750 / 20 = 37.5; seed 1: (20+30)*5 + (30+40)*5 = 600/20 = 30
    assert row["auc"] == 33.75
    assert row["s_per_step"] == 3.0
    assert verdict(row, False) == "better"
    assert verdict({**row, "diff_se_seeds": 15.0}, False) == "not resolved"


def test_summary_best_auc_and_resolved_verdicts_by_hand():
    # Baseline finals 30 (seed 0) and 20 (seed 1), warm start 20, steps 10 and 20.
    # "up": curves [60, 50] and [45, 44]: best is the peak, not the final (nor the minimum).
    #   best 60, 45: mean 52.5, s.e. stdev/sqrt(2) = 10.607/1.414 = 7.5
    #   AUC seed 0: (20+60)/2*10 + (60+50)/2*10 = 950 / 20 = 47.5; seed 1: 325 + 445 = 770 / 20 = 38.5
    #   -> mean 43, s.e. 6.364/1.414 = 4.5
    #   diffs 50-30 = 20, 44-20 = 24: mean 22, s.e. 2.828/1.414 = 2; 22 > 2 * 2: better
    # "down": curves [10, 8] and [5, 0]: best 10, 5 -> 7.5, s.e. 2.5; diffs -22, -20: mean -21, s.e. 1: worse
    # "near": curves [40, 35] and [10, 15]: diffs 5, -5: mean 0, s.e. 5: not resolved
    from agentrl.arena_stats import summarize

    wins = [True, False, False, False]
    results = [_run("grpo", 0, [25.0, 30.0], wins), _run("grpo", 1, [20.0, 20.0], wins),
               _run("up", 0, [60.0, 50.0], wins), _run("up", 1, [45.0, 44.0], wins),
               _run("down", 0, [10.0, 8.0], wins), _run("down", 1, [5.0, 0.0], wins),
               _run("near", 0, [40.0, 35.0], wins), _run("near", 1, [10.0, 15.0], wins)]
    s = summarize(results, {"success": 20.0}, ["grpo", "up", "down", "near"], [0, 1], "grpo", 35.0, 20)
    up, down, near = (s["estimators"][k] for k in ("up", "down", "near"))
    assert (up["best"], up["best_se"]) == pytest.approx((52.5, 7.5))
    assert (up["auc"], up["auc_se"]) == pytest.approx((43.0, 4.5))
    assert (up["diff_to_baseline"], up["diff_se_seeds"]) == pytest.approx((22.0, 2.0))
    assert (down["best"], down["best_se"]) == pytest.approx((7.5, 2.5))
    assert (down["diff_to_baseline"], down["diff_se_seeds"]) == pytest.approx((-21.0, 1.0))
    assert [s["estimators"][k]["verdict"] for k in ("grpo", "up", "down", "near")] == [
        "baseline", "better", "worse", "not resolved"]
    assert near["diff_se_seeds"] == pytest.approx(5.0)


@pytest.mark.parametrize("d, se_seeds, se_tasks, want", [
    (5.0, 2.0, None, "better"),        # 5 > 2 * 2, and under 3 * 2: the factor is 2
    (-5.0, 2.0, None, "worse"),
    (4.0, 2.0, None, "not resolved"),  # exactly 2 s.e. is not past it
    (0.5, 0.2, None, "better"),        # a resolved difference under one point is still better
    (5.0, None, 2.0, "better"),        # one seed: the (seed, task) s.e. decides
    (5.0, None, 3.0, "not resolved"),
    (0.0, 0.0, None, "equal"),         # no spread at all: the sign alone
    (0.5, 0.0, None, "better"),
    (-0.5, 0.0, None, "worse"),
    (5.0, None, None, "n/a"),          # no s.e. of either kind
    (float("nan"), 2.0, None, "n/a"),
])
def test_verdict_edges_by_hand(d, se_seeds, se_tasks, want):
    row = {"diff_to_baseline": d, "diff_se_seeds": se_seeds, "diff_se_tasks": se_tasks}
    assert verdict(row, False) == want
    assert verdict(row, True) == "baseline"


def test_empty_inputs_give_nan():
    assert math.isnan(mean_se([])[0]) and mean_se([])[1] is None
    assert math.isnan(auc([], 20)) and math.isnan(auc([(0, 20.0)], 0))


def test_parse_contenders_and_seeds():
    cs = parse_contenders("grpo,bigpo:embedder=hash_ngram:eps=0.1")
    assert [c.credit for c in cs] == ["grpo", "bigpo"]
    assert dict(cs[1].kwargs) == {"embedder": "hash_ngram", "eps": 0.1}
    assert cs[1].slug == "bigpo__embedder-hash_ngram__eps-0.1"
    for bad in ("nosuch", "grpo,grpo", "gigpo:w", "gigpo:nokwarg=1", ""):
        with pytest.raises(ArenaError):
            parse_contenders(bad)
    assert parse_seeds("0,1,2") == [0, 1, 2]
    for bad in ("a", "1,1", ""):
        with pytest.raises(ArenaError):
            parse_seeds(bad)


def _arena(args, timeout=1800):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "agentrl", "arena", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_arena_bad_input_is_one_line():
    p = _arena(["recipes/textcraft_grpo_tiny_cpu.yaml", "--estimators", "grpo,nosuch", "--out", "/tmp/x"])
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "nosuch" in p.stderr


def test_arena_checks_every_contender_before_any_run(tmp_path):
    """bipace_q needs a fingerprint layer the 2-block model has: the arena refuses up front
    (one line, exit 2, no run started) instead of failing that estimator's runs later."""
    from agentrl.models import build_tiny_model

    model = build_tiny_model(tmp_path / "warm", vocab_size=400, hidden_size=32, num_layers=2, num_heads=2,
                             num_kv_heads=1)
    out = tmp_path / "arena"
    p = _arena(["recipes/textcraft_grpo_tiny_cpu.yaml", "--estimators", "grpo,bipace_q", "--warm-start", str(model),
                "--out", str(out)])
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "fingerprint_layer -8" in p.stderr, p.stderr
    assert not (out / "runs").exists()


@pytest.mark.slow
def test_arena_quick_race(tmp_path):
    import torch

    torch.set_num_threads(1)
    from agentrl.models import build_tiny_model

    model = build_tiny_model(tmp_path / "warm", vocab_size=400, hidden_size=32, num_layers=2, num_heads=2,
                             num_kv_heads=1)
    out = tmp_path / "arena"
    args = ["recipes/textcraft_grpo_tiny_cpu.yaml", "--estimators", "grpo,gigpo", "--seeds", "0",
            "--steps", "2", "--eval-every", "1", "--eval-episodes", "3", "--workers", "1",
            "--warm-start", str(model), "--out", str(out), "--threshold", "0"]
    p = _arena(args)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads((out / "arena.json").read_text())
    assert (out / "curves.png").stat().st_size > 1000 and (out / "steps_to_threshold.png").stat().st_size > 1000
    md = (out / "arena.md").read_text()
    for lab in ("grpo", "gigpo"):
        row = summary["estimators"][lab]
        res = json.loads((out / "runs" / lab / "seed0" / "result.json").read_text())
        # the table's final is the last checkpoint's evaluation; the curve is the per-step evaluations
        assert [p["step"] for p in res["curve"]] == [1, 2]
        ev = json.loads((out / "runs" / lab / "seed0" / "eval_step00002.json").read_text())
        assert row["final"] == ev["success"] == 100 * sum(ev["wins"]) / 3
        assert f"| {lab} | {row['final']:.1f} |" in md
        # threshold 0 is reached at the first checkpoint
        assert row["steps_to_threshold"] == [1]
    assert summary["estimators"]["grpo"]["diff_to_baseline"] == 0.0
    # rerunning the same command skips finished runs (no new training) and gives the same table
    p2 = _arena(args)
    assert p2.returncode == 0 and (out / "arena.md").read_text() == md


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_killed_arena_takes_its_training_processes_with_it(tmp_path):
    """A SIGKILLed parent (the arena or a pool worker) must not leave its child (a trainer)
    running: the resumed arena would start a second trainer on the same run folder."""
    pid_file = tmp_path / "child.pid"
    parent_code = (
        "import subprocess, sys, time\n"
        "from agentrl.arena import die_with_parent\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], preexec_fn=die_with_parent)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=str(REPO))
    deadline = time.time() + 60
    while not (pid_file.is_file() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    os.kill(child, 0)  # running
    parent.kill()
    parent.wait()
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its killed parent")
