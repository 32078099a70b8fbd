"""``agentrl bench async``'s pure parts: the paired-by-seed summary and the run list's checks."""

import subprocess
import sys

import pytest

from agentrl.benchmarks.asynchronous import async_runs, engine_list, paired_summary, run_name


def _row(run, step_s, success):
    return {"run": run, "step_s": step_s, "steps_per_hour": 3600.0 / step_s, "success": success}


def test_the_summary_pairs_ratios_and_success_by_seed():
    by_seed = {
        0: [_row("sync_t1", 6.0, 0.5), _row("async_k1", 4.0, 0.6), _row("cont_k1", 3.0, 0.7)],
        1: [_row("sync_t1", 8.0, 0.4), _row("async_k1", 4.0, 0.5), _row("cont_k1", 5.0, 0.2)],
    }
    rows = {r["run"]: r for r in paired_summary(by_seed, "async_k1")}
    cont = rows["cont_k1"]
    # ratios within a seed, then averaged: (4/3 + 4/5) / 2, not (4+4)/(3+5)
    assert cont["x_reference"][0] == pytest.approx((4 / 3 + 4 / 5) / 2)
    assert cont["x_reference"][1] == pytest.approx(abs(4 / 3 - 4 / 5) / 2)  # s.e. of two values: |a - b| / 2
    assert cont["x_best_sync"][0] == pytest.approx((6 / 3 + 8 / 5) / 2)
    assert cont["success_diff"][0] == pytest.approx(((0.7 - 0.6) + (0.2 - 0.5)) / 2)
    assert cont["success"][0] == pytest.approx(0.45)
    assert cont["steps_per_hour"][0] == pytest.approx((1200 + 720) / 2)
    assert rows["async_k1"]["x_reference"] == pytest.approx((1.0, 0.0))
    assert rows["sync_t1"]["x_best_sync"] == pytest.approx((1.0, 0.0))
    assert cont["seeds"] == 2


def test_a_run_missing_from_a_seed_is_left_out_of_that_seed():
    by_seed = {0: [_row("sync_t1", 6.0, 0.5), _row("async_k1", 4.0, 0.6)],
               1: [_row("sync_t1", 8.0, 0.4), _row("async_k1", 2.0, 0.5), _row("cont_k0", 4.0, 0.3)]}
    rows = {r["run"]: r for r in paired_summary(by_seed, "async_k1")}
    assert rows["cont_k0"]["seeds"] == 1
    assert rows["cont_k0"]["x_reference"] == pytest.approx((0.5, 0.0))
    assert "x_reference" not in paired_summary(by_seed, None)[1]


def test_the_run_list():
    assert async_runs("lockstep:1,continuous:0,continuous:1", "lockstep", "1,2") == [
        ("lockstep", "1", "hf"), ("continuous", "0", "hf"), ("continuous", "1", "hf")]
    assert async_runs(None, "lockstep,continuous", "0,1") == [
        ("lockstep", "0", "hf"), ("lockstep", "1", "hf"), ("continuous", "0", "hf"), ("continuous", "1", "hf")]
    assert [run_name(m, k) for m, k, _ in async_runs(None, "lockstep,continuous", "1")] == ["async_k1", "cont_k1"]
    with pytest.raises(ValueError, match="'greedy'"):
        async_runs("greedy:1", "lockstep", "1")
    with pytest.raises(ValueError, match="whole number"):
        async_runs("continuous", "lockstep", "1")
    # engines side by side: a run without @ENGINE on each engine, one with it on that one only
    both = ("hf", "vllm")
    assert async_runs("lockstep:1@vllm,continuous:1", "lockstep", "1", both) == [
        ("lockstep", "1", "vllm"), ("continuous", "1", "hf"), ("continuous", "1", "vllm")]
    assert [run_name(*r) for r in async_runs("lockstep:1@vllm", "lockstep", "1", both)] == ["async_k1_vllm"]
    with pytest.raises(ValueError, match="lockstep:1@vllm: the engine must be one of --engine's \\(hf\\)"):
        async_runs("lockstep:1@vllm", "lockstep", "1")
    assert engine_list("hf,vllm") == ["hf", "vllm"] and engine_list("vllm") == ["vllm"]
    for bad in ("sglang", "hf,hf"):
        with pytest.raises(ValueError, match=f"--engine {bad}"):
            engine_list(bad)


@pytest.mark.parametrize("args,said", [(["--runs", "lockstep:x"], "lockstep:x: the staleness k"),
                                       (["--seeds", "0,a"], "--seeds 0,a"),
                                       (["--modes", "fast"], "'fast'"),
                                       (["--engine", "hf,sglang"], "each engine must be hf or vllm"),
                                       (["--runs", "lockstep:1@vllm"], "the engine must be one of --engine's"),
                                       (["--recipe", "recipes/nope.yaml"], "--recipe recipes/nope.yaml: no such file"),
                                       (["--recipe", "recipes/demo_smollm2.yaml"], "give its warm start (--warm")])
def test_bad_bench_arguments_are_one_line_and_exit_2(args, said):
    r = subprocess.run([sys.executable, "-m", "agentrl", "bench", "async", *args], capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], r.stderr


def test_mixed_goals_take_every_family_in_turn():
    from agentrl_envs.textcraft import goal_pool

    from agentrl.benchmarks.asynchronous import mixed_goals

    fams = ["depth2", "depth3", "depth4"]
    pool = goal_pool("train", fams)
    seeds = mixed_goals(fams)
    assert [pool[s % len(pool)][0] for s in seeds] == ["depth2", "depth3", "depth4", "depth2"]
    assert len(set(seeds)) == 4
    # one family: its first goals, as the seeds 0..n-1 of its own pool
    assert mixed_goals(["depth3"], 3) == [0, 1, 2]


def test_practised_file_passes_a_game_sets_env_kwargs(tmp_path):
    from agentrl.benchmarks.asynchronous import practised_file

    plain = tmp_path / "textcraft.json"
    plain.write_text('{"goals": [3, 1, 4], "eval_split": "train"}')
    assert practised_file(plain) == ([3, 1, 4], [])
    games = tmp_path / "alfworld.json"
    games.write_text('{"goals": [0, 13], "env_kwargs": {"prompt_style": "brief", "data_dir": "/g"}}')
    assert practised_file(games) == ([0, 13], ["--env_kwargs", '{"prompt_style": "brief", "data_dir": "/g"}'])


def test_the_bench_drops_emulated_bf16_as_the_demos_do(monkeypatch):
    """The SmolLM2 and ALFWorld recipes ask for bf16; where this CPU emulates it (~25x slower) the
    bench times the RL phase in fp32, as the demos run it; where native it keeps the recipe's."""
    from pathlib import Path

    from agentrl import precision
    from agentrl.benchmarks.asynchronous import precision_args

    recipes = Path(__file__).resolve().parents[1] / "recipes"
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: False)
    assert precision_args(recipes / "demo_smollm2.yaml") == ["--bf16", "false"]
    assert precision_args(recipes / "demo_alfworld.yaml") == ["--bf16", "false"]
    assert precision_args(recipes / "demo_tiny.yaml") == []  # fp32 already
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: True)
    assert precision_args(recipes / "demo_smollm2.yaml") == []
