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
import yaml

from agentrl.arena import ArenaError, parse_contenders, parse_seeds
from agentrl.arena_stats import auc, estimator_row, mean_se, median_steps, normal_p, steps_to, verdicts

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
    # AUC paired by seed: baseline seed 0 (20+25)*5 + (25+30)*5 = 500/20 = 25, seed 1 400/20 = 20;
    # diffs 12.5 and 10: mean 11.25, s.e. stdev/sqrt(2) = 1.7678/1.4142 = 1.25
    assert (row["auc_diff"], row["auc_diff_se"], row["paired_seeds"]) == pytest.approx((11.25, 1.25, 2))


def test_summary_best_auc_and_resolved_verdicts_by_hand():
    # Baseline finals 30 (seed 0) and 20 (seed 1), warm start 20, steps 10 and 20.
    # "up": curves [60, 50] and [45, 44]: best is the peak, not the final (nor the minimum).
    #   best 60, 45: mean 52.5, s.e. stdev/sqrt(2) = 10.607/1.414 = 7.5
    #   AUC seed 0: (20+60)/2*10 + (60+50)/2*10 = 950 / 20 = 47.5; seed 1: 325 + 445 = 770 / 20 = 38.5
    #   -> mean 43, s.e. 6.364/1.414 = 4.5
    #   diffs 50-30 = 20, 44-20 = 24: mean 22, s.e. 2.828/1.414 = 2 (verdicts below)
    # "down": curves [10, 8] and [5, 0]: best 10, 5 -> 7.5, s.e. 2.5; diffs -22, -20: mean -21, s.e. 1
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
    # Holm over 3 comparisons, Student's t with 1 degree of freedom (two-sided p = 1 - (2/pi) atan|t|):
    # down t = 21 -> p 0.03029 x 3 = 0.0909; up t = 11 -> 0.05772 x 2 = 0.1154; near t = 0 -> 1.
    # Two seeds resolve nothing here, although both |diffs| exceed 10 s.e.
    got = {k: (s["estimators"][k]["verdict"], s["estimators"][k]["verdict_p_holm"]) for k in ("up", "down", "near")}
    assert got["down"][0] == got["up"][0] == got["near"][0] == "not resolved"
    assert got["down"][1] == pytest.approx(3 * (1 - 2 / math.pi * math.atan(21)))
    assert got["up"][1] == pytest.approx(2 * (1 - 2 / math.pi * math.atan(11)))
    assert got["near"][1] == 1.0
    assert s["estimators"]["grpo"]["verdict"] == s["estimators"]["grpo"]["auc_verdict"] == "baseline"
    assert near["diff_se_seeds"] == pytest.approx(5.0)


def _row(d, se, n=3, se_tasks=None, auc_d=0.0, auc_se=1.0):
    return {"diff_to_baseline": d, "diff_se_seeds": se, "diff_se_tasks": se_tasks, "auc_diff": auc_d,
            "auc_diff_se": auc_se, "paired_seeds": n}


def test_holm_verdicts_over_estimators_by_hand():
    # t with 2 degrees of freedom (3 seeds): two-sided p = 1 - t / sqrt(t^2 + 2).
    # a: t = 10 -> p 0.009852; b: t = -6 -> 0.026671; c: t = 2 -> 0.183503.
    # Holm, m = 3: a 3 x 0.009852 = 0.02956 (better); b max(0.02956, 2 x 0.026671 = 0.05334): not
    # resolved, although its own p is under 0.05; c 0.1835: not resolved.
    rows = {"grpo": _row(0.0, 0.0), "a": _row(10.0, 1.0, auc_d=-8.0), "b": _row(-6.0, 1.0, auc_d=3.0),
            "c": _row(2.0, 1.0, auc_d=1.0)}
    verdicts(rows, "grpo")
    pa, pb, pc = (1 - t / math.sqrt(t * t + 2) for t in (10.0, 6.0, 2.0))
    assert (rows["a"]["verdict"], rows["a"]["verdict_p_holm"]) == ("better", pytest.approx(3 * pa))
    assert (rows["b"]["verdict"], rows["b"]["verdict_p_holm"]) == ("not resolved", pytest.approx(2 * pb))
    assert (rows["c"]["verdict"], rows["c"]["verdict_p_holm"]) == ("not resolved", pytest.approx(pc))
    # AUC is its own family: a -8 (t 8, p 1 - 8/sqrt(66) = 0.015268, x 3 = 0.0458): worse
    assert (rows["a"]["auc_verdict"], rows["a"]["auc_verdict_p_holm"]) == (
        "worse", pytest.approx(3 * (1 - 8 / math.sqrt(66))))
    assert rows["c"]["auc_verdict"] == "not resolved" and rows["grpo"]["verdict"] == "baseline"


def test_one_seed_verdicts_use_the_task_pairs():
    rows = {"grpo": _row(0.0, None, n=1, se_tasks=0.0, auc_se=None),
            "x": _row(5.0, None, n=1, se_tasks=2.0, auc_se=None)}
    verdicts(rows, "grpo")
    # normal over (seed, task) pairs: p = erfc(2.5 / sqrt 2) = 0.012419; AUC has no s.e.: n/a
    assert (rows["x"]["verdict"], rows["x"]["verdict_p_holm"]) == ("better", pytest.approx(0.0124193, abs=1e-6))
    assert rows["x"]["auc_verdict"] == "n/a"


@pytest.mark.parametrize("d, se, df, want", [
    (0.0, 0.0, 2, 1.0),     # no spread, no difference
    (0.5, 0.0, 2, 0.0),     # no spread, a difference: resolved by its sign
    (1.0, None, 2, None),   # no s.e.
    (1.0, 1.0, 0, None),    # one seed has no t
    (1.96, 1.0, None, 0.05),
])
def test_p_value_edges(d, se, df, want):
    p = normal_p(d, se, df)
    assert math.isnan(p) if want is None else p == pytest.approx(want, abs=1e-3)


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


@pytest.mark.parametrize("flag", ["--eval-samples", "--eval-batch"])
def test_arena_negative_eval_counts_are_one_line(tmp_path, flag):
    p = _arena(["recipes/textcraft_grpo_tiny_cpu.yaml", "--estimators", "grpo", flag, "-1", "--out", str(tmp_path / "a")])
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "must be >= 0" in p.stderr
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("text, needle", [
    ("{not json", "not a practised-goals file (JSONDecodeError"),
    ('{"goals": [1]}', "not a practised-goals file (KeyError"),
    ('{"goals": [], "eval_seeds": [1], "eval_split": "train", "families": null}', "non-empty lists of integers"),
])
def test_arena_bad_practised_file_is_one_line(tmp_path, text, needle):
    f = tmp_path / "practised.json"
    f.write_text(text)
    p = _arena(["recipes/demo_tiny.yaml", "--estimators", "grpo", "--practised", str(f), "--out", str(tmp_path / "a")])
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and needle in p.stderr, p.stderr


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
    # raced on practised goals, as `make arena` does: RL on train seeds 5..8, evaluation on 3 of
    # their fresh draws (seeds g + 232)
    practised = tmp_path / "practised.json"
    practised.write_text(json.dumps({"goals": [5, 6, 7, 8], "eval_seeds": [237, 238, 239], "eval_split": "train",
                                     "families": ["depth2"]}))
    args = ["recipes/textcraft_grpo_tiny_cpu.yaml", "--estimators", "grpo,gigpo", "--seeds", "0",
            "--steps", "2", "--eval-every", "1", "--practised", str(practised), "--workers", "1",
            "--warm-start", str(model), "--out", str(out), "--threshold", "0"]
    p = _arena(args)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads((out / "arena.json").read_text())
    assert (summary["heldout"]["split"], summary["heldout"]["seeds"]) == ("train", [237, 238, 239])
    resolved = yaml.safe_load((out / "runs" / "grpo" / "seed0" / "train" / "recipe.yaml").read_text())
    assert resolved["task_seeds"] == [5, 6, 7, 8]
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
    # re-scored by 2 sampled episodes a task: no training, each task's outcome its share won
    log_size = (out / "runs" / "grpo" / "seed0" / "train.log").stat().st_size
    greedy = (out / "runs" / "grpo" / "seed0" / "eval_step00002.json").read_text()
    p3 = _arena(args + ["--eval-samples", "2", "--eval-batch", "2"])
    assert p3.returncode == 0, p3.stderr[-3000:]
    assert (out / "runs" / "grpo" / "seed0" / "train.log").stat().st_size == log_size
    sampled = json.loads((out / "arena.json").read_text())
    assert sampled["heldout"]["max_batch"] == 2 and "2 episodes sampled a task" in sampled["eval_set"]
    for lab in ("grpo", "gigpo"):
        ev = json.loads((out / "runs" / lab / "seed0" / "eval_step00002_sampled2.json").read_text())
        assert ev["episodes"] == 6 and all(w in (0.0, 0.5, 1.0) for w in ev["wins"])
        assert sampled["estimators"][lab]["final"] == ev["success"] == 100 * sum(ev["wins"]) / 3
    # the greedy evaluation is kept beside the sampled one, untouched: True/False per task
    assert (out / "runs" / "grpo" / "seed0" / "eval_step00002.json").read_text() == greedy
    assert all(isinstance(w, bool) for w in json.loads(greedy)["wins"])


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


def test_the_recipes_own_estimator_keeps_its_kwargs():
    """On the BiPACE_Q ALFWorld recipe: bipace_q runs with the recipe's kwargs (eps 0.05, not the
    default 0.10), the command line winning; grpo and gigpo with their defaults and their own."""
    from agentrl.arena import parse_contenders, with_recipe_kwargs
    from agentrl.config import load_recipe

    cfg = load_recipe("recipes/demo_alfworld.yaml", [])
    recipe_kw = {"action_key": "action_tag", "eps": 0.05, "center": True, "w": 1.0, "episode_stats": "steps",
                 "episode_singleton": "raw", "penalty": "step", "norm": "mean"}
    assert (cfg.credit, cfg.credit_kwargs) == ("bipace_q", recipe_kw)
    got = {c.label: dict(c.kwargs) for c in with_recipe_kwargs(
        parse_contenders("bipace_q,bipace_q:eps=0.2,grpo,gigpo:w=0.5"), cfg.credit, cfg.credit_kwargs)}
    assert got == {"bipace_q": recipe_kw, "bipace_q:eps=0.2": {**recipe_kw, "eps": 0.2}, "grpo": {},
                   "gigpo:w=0.5": {"w": 0.5}}


def test_visit_rates_and_gain_by_hand():
    from agentrl.arena_stats import visit_gain, visit_rates

    rows = [("s0:t1", "a", True), ("s0:t1", "a", True), ("s0:t1", "b", False), ("s0:t0", "c", True),
            ("s0:t0", "d", True), ("s1:t0", "e", False), ("s1:t0", "f", True), ("s1:t1", "g", True),
            ("s1:t1", "h", True), ("s2:t1", "i", False), ("s2:t1", "j", False)]
    # a trajectory's several steps count once; a task's visits are its groups in order
    assert visit_rates(rows) == {"t1": [0.5, 1.0, 0.0], "t0": [1.0, 0.5]}
    v = visit_gain([visit_rates(rows), {"t0": [0.0, 1.0]}])
    # pairs (first, second visit): (1, .5), (.5, 1), (0, 1): differences -.5, .5, 1
    assert (v["visits"], v["pairs"]) == (2, 3)
    assert v["per_visit"] == pytest.approx([50.0, 250 / 3])
    assert v["gain"] == pytest.approx(100 / 3)
    assert v["gain_se"] == pytest.approx(100 * (7 / 12) ** 0.5 / 3 ** 0.5)
    assert visit_gain([{"t0": [1.0]}]) is None and visit_gain([]) is None


def test_the_visit_table_is_in_arena_md():
    from agentrl.arena_stats import markdown, summarize

    def run(label, seed, visits):
        return {"label": label, "seed": seed, "curve": [{"step": 2, "success": 50.0, "wins": [True, False]}],
                "train_log": {}, "visits": visits}

    warm = {"success": 50.0, "wins": [True, False]}
    results = [run("grpo", 0, {"t0": [0.0, 0.5], "t1": [0.5, 1.0]}), run("gigpo", 0, {})]
    md = markdown(summarize(results, warm, ["grpo", "gigpo"], [0], "grpo", 60.0, 2))
    assert "| grpo | 25.0 -> 75.0 | +50.0 (0.0) | 2 |" in md and "| gigpo | 25.0" not in md


def test_the_arena_races_in_fp32_where_bf16_is_emulated(monkeypatch, capsys):
    """The ALFWorld recipe asks for bf16: on a CPU that emulates it every run gets ``--bf16 false``
    and one line says so; ``--set bf16=...`` decides instead; a native CPU keeps the recipe's."""
    from types import SimpleNamespace

    from agentrl import precision
    from agentrl.arena import fp32_where_bf16_emulated
    from agentrl.config import load_recipe

    cfg = load_recipe("recipes/demo_alfworld.yaml", [])
    assert cfg.bf16 and cfg.use_cpu
    capsys.readouterr()  # the recipe loader's own lines
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: False)
    assert fp32_where_bf16_emulated(cfg, []) == ["--bf16", "false"]
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and "fp32" in said[0]
    assert fp32_where_bf16_emulated(cfg, ["bf16=true"]) == []
    assert fp32_where_bf16_emulated(cfg, ["learning_rate=1e-4"]) == ["--bf16", "false"]
    assert fp32_where_bf16_emulated(SimpleNamespace(bf16=False, use_cpu=True), []) == []  # fp32 asked
    assert fp32_where_bf16_emulated(SimpleNamespace(bf16=True, use_cpu=False), []) == []  # on a GPU
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: True)
    assert fp32_where_bf16_emulated(cfg, []) == []


def test_arena_md_gives_every_runs_curve_and_visits():
    from agentrl.arena_stats import markdown, summarize

    def run(label, seed, success, visits):
        return {"label": label, "seed": seed, "curve": [{"step": 2, "success": success, "wins": [True, False]}],
                "train_log": {}, "visits": visits}

    warm = {"success": 50.0, "wins": [True, False]}
    results = [run("grpo", 0, 50.0, {"t0": [0.0, 0.5], "t1": [0.5, 1.0]}),
               run("grpo", 1, 100.0, {"t0": [0.0, 1.0], "t1": [1.0, 0.5]}), run("gigpo", 0, 0.0, {})]
    md = markdown(summarize(results, warm, ["grpo", "gigpo"], [0, 1], "grpo", 60.0, 2))
    assert "| grpo | 0 | 0: 50.0 / 2: 50.0 | 25.0 -> 75.0 | +50.0 (0.0) |" in md
    # seed 1: per-task differences +100 and -50 points: mean +25, s.e. 106.1 / sqrt(2) = 75.0
    assert "| grpo | 1 | 0: 50.0 / 2: 100.0 | 50.0 -> 75.0 | +25.0 (75.0) |" in md
    assert "| gigpo | 0 | 0: 50.0 / 2: 0.0 | - | - |" in md
