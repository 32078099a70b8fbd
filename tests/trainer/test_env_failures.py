"""Env failures that speak (agentrl/rollout/failures.py): each iteration says how many episodes
failed and why the first did, an iteration that trained on nothing is a counted warning, and a
broken env ends the run with exit 2 and its exception's text on screen.

Runtime: the unit tests < 1 s; each subprocess run ~10 s (the count env, the tiny model).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_trainer import BASE

from agentrl.records import StepRecord
from agentrl.rollout.episode import Episode
from agentrl.rollout.failures import (
    EnvFailureStop,
    EnvFailureWatch,
    failed_iteration,
    failed_start_records,
    merge,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ENV = "agentrl-test/Count-v0"


def _ep(k: int, steps: int = 0, error: str | None = None, seed: int = 0) -> Episode:
    ep = Episode(group_id=f"g{seed}", traj_id=f"tr{k}", seed=seed, error=error, length=steps)
    ep.steps = [StepRecord(f"g{seed}", f"tr{k}", t, "obs", "1", 0.0, False) for t in range(steps)]
    return ep


def test_failed_iteration_by_hand():
    assert failed_iteration(8, 8, 0, 1.0)          # every episode failed (and no row)
    assert not failed_iteration(7, 8, 5, 1.0)      # 7 of 8 < 100%: a warning-free iteration
    assert failed_iteration(0, 8, 0, 1.0)          # no failure, but no real row either
    assert failed_iteration(4, 8, 3, 0.5)          # 4/8 = 0.5 reaches the rate
    assert not failed_iteration(3, 8, 3, 0.5)      # 3/8 = 0.375 does not
    assert failed_iteration(3, 10, 3, 0.3)         # 0.3 * 10 is 3.0000000000000004 in floats: 3 still counts
    assert not failed_iteration(0, 0, 1, 0.5)      # nothing failed, rows trained


def test_the_watch_says_counts_and_stops():
    said = []
    w = EnvFailureWatch(ENV, max_rate=1.0, max_iterations=2)
    ok = [_ep(0, 3), _ep(1, 2, "step: RuntimeError: boom", seed=7)]   # one failure at turn 2, rows trained
    m = w.observe(ok, real_rows=5, step=1, say=said.append)
    assert m == {"env/failed_iterations": 0.0} and w.in_a_row == 0
    assert said == [f"agentrl train: env failures in the iteration of step 1: 1/2 episodes; first: env {ENV}, "
                    "task seed 7, turn 2: step: RuntimeError: boom"]
    w.check_stop()  # a good iteration: nothing to stop
    broken = [_ep(0, 0, "step: RuntimeError: down", seed=3), _ep(1, 0, "reset: OSError: gone", seed=4)]
    said.clear()
    w.observe(broken, real_rows=0, step=2, say=said.append)
    assert said[0].endswith("2/2 episodes; first: env agentrl-test/Count-v0, task seed 3, turn 0: step: "
                            "RuntimeError: down")
    assert said[1] == ("agentrl train: warning: the iteration of step 2 left no real training row: 2/2 episodes "
                       "ended on an env error (1 in a row; max_env_failure_iterations 2 stop the run)")
    w.check_stop()  # 1 of 2
    assert [r["traj_id"] for r in w.take_records()] == ["tr0", "tr1"] and w.take_records() == []
    w.observe(broken, real_rows=0, step=3, say=None)
    with pytest.raises(EnvFailureStop, match=r"^2 iterations in a row failed \(every episode\(s\) ended on an env "
                       r"error, or no real training row was left\) \(max_env_failure_iterations 2\): stopping; "
                       r"last failure: env agentrl-test/Count-v0, task seed 3, turn 0: step: RuntimeError: down$"):
        w.check_stop()
    w.check_end()  # the first iteration trained: the run as a whole did not train on nothing
    assert (w.iterations, w.failed_iterations) == (3, 2)


def test_a_run_of_failed_iterations_ends_with_exit_2_unless_told_never_to():
    w = EnvFailureWatch(ENV, max_iterations=3)
    w.observe([_ep(0, 0, "step: E: x")], 0, 1, say=None)
    w.check_stop()  # 1 of 3 in a row
    with pytest.raises(EnvFailureStop, match=r"^every iteration of the run \(1\) failed"):
        w.check_end()
    never = EnvFailureWatch(ENV, max_iterations=0)
    for step in range(5):
        never.observe([_ep(0, 0, "step: E: x")], 0, step, say=None)
    never.check_stop()
    never.check_end()


def test_rank_summaries_merge_and_the_first_failure_is_the_lowest_ranks():
    a = {"episodes": 4, "failed": 0, "rows": 6, "first": None, "no_step": []}
    b = {"episodes": 4, "failed": 2, "rows": 1, "first": {"reason": "b"}, "no_step": [{"traj_id": "x"}]}
    c = {"episodes": 4, "failed": 1, "rows": 0, "no_step": [],
         "first": {"env_id": ENV, "seed": 1, "turn": 0, "traj_id": "c0", "reason": "c"}}
    assert merge([a, b, c]) == {"episodes": 12, "failed": 3, "rows": 7, "first": {"reason": "b"},
                                "no_step": [{"traj_id": "x"}]}
    # two ranks, one with every episode failed and no row: the global iteration trained (rows 6)
    w = EnvFailureWatch(ENV)
    w.observe([], 0, 1, gather=lambda own: [a, c], say=None)
    assert w.in_a_row == 0 and w.last == f"env {ENV}, task seed 1, turn 0: c"


def test_an_episode_that_never_stepped_keeps_a_record_saying_why():
    eps = [_ep(0, 0, "reset: ValueError: no such task", seed=5), _ep(1, 2, "step: RuntimeError: late"), _ep(2, 1)]
    recs = failed_start_records(eps)
    assert recs == [{"group_id": "g5", "traj_id": "tr0", "t": 0, "obs": "", "action": "", "reward": 0.0,
                     "done": True, "truncated": True, "task_family": None,
                     "info": {"error": "reset: ValueError: no such task", "no_step": True, "seed": 5}}]
    StepRecord.from_dict(recs[0])  # a record in the schema every reader takes


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _train(tmp_path, model, **kw):
    rec = tmp_path / "recipe.yaml"
    rec.write_text(yaml.safe_dump(dict(BASE, model_name_or_path=model, output_dir=str(tmp_path / "run"),
                                       save_rollouts=True, **kw)))
    return subprocess.run([sys.executable, "-m", "agentrl.train", str(rec)], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=300)


def _agentrl(*args):
    return subprocess.run([sys.executable, "-m", "agentrl", *args], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=120)


def test_an_env_whose_step_always_raises_ends_the_run_with_exit_2(tmp_path, tiny_model_dir):
    r = _train(tmp_path, tiny_model_dir, task_options={"length": 3, "broken_at": 0}, max_steps=4,
               max_env_failure_iterations=2)
    assert r.returncode == 2, r.stderr[-2000:]
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("agentrl train: error:")]
    assert len(err) == 1 and re.fullmatch(  # the task seed is the data order's (tasks 0..7)
        r"agentrl train: error: 2 iterations in a row failed \(every episode\(s\) ended on an env error, or no real "
        r"training row was left\) \(max_env_failure_iterations 2\): stopping; last failure: env "
        r"agentrl-test/Count-v0, task seed [0-7], "
        r"turn 0: step: RuntimeError: the counter is broken at call 0 \(test\)", err[0]), err
    assert "Traceback" not in r.stderr
    # every iteration said it on stdout: 8 of 8 episodes (2 tasks x 4), the first one's reason
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("agentrl train: ")]
    assert len(lines) == 4 and lines[0].startswith("agentrl train: env failures in the iteration of step 1: 8/8")
    assert "RuntimeError: the counter is broken at call 0 (test)" in lines[0]
    assert lines[1].startswith("agentrl train: warning: the iteration of step 1 left no real training row")
    out = tmp_path / "run"
    assert not (out / "model.safetensors").exists()  # stopped: no model saved
    # the saved rollouts keep a record per episode that never stepped, and show says why
    recs = [json.loads(x) for x in (out / "rollouts" / "iter_00001.jsonl").read_text().splitlines()]
    assert len(recs) == 8 and all(x["info"]["no_step"] and "broken at call 0" in x["info"]["error"] for x in recs)
    s = _agentrl("show", str(out))
    assert s.returncode == 0 and "8 episode(s) ended on an env error; first:" in s.stdout, s.stderr
    s = _agentrl("show", str(out), "--traj", recs[0]["traj_id"], "--estimators", "grpo")
    assert s.returncode == 0 and "no step: the episode ended on an env error before its first step: step: " \
        "RuntimeError: the counter is broken at call 0 (test)" in s.stdout, s.stderr
    c = _agentrl("credit", "compare", str(out))
    assert c.returncode == 2 and c.stderr.strip().count("\n") == 0 and "no step records" in c.stderr


def test_a_run_of_only_failed_iterations_ends_with_exit_2_at_its_end(tmp_path, tiny_model_dir):
    r = _train(tmp_path, tiny_model_dir, task_options={"length": 3, "broken_at": 0}, max_steps=1)
    assert r.returncode == 2
    assert re.fullmatch(
        r"agentrl train: error: every iteration of the run \(1\) failed \(every episode\(s\) ended on an env error, "
        r"or no real training row was left\); last failure: env agentrl-test/Count-v0, task seed [0-7], turn 0: step: "
        r"RuntimeError: the counter is broken at call 0 \(test\)", r.stderr.strip().splitlines()[-1])


def test_an_env_that_fails_in_some_episodes_trains_on_and_says_so(tmp_path, tiny_model_dir):
    # parity: every reply is executed (reward for an even length); seed 0 plays 1 step, seed 1 three
    # steps of which the second call raises: 4 of 8 episodes fail at turn 1, all 8 leave rows
    opts = {"lengths": [1, 3], "parity": True, "broken_at": 1}
    r = _train(tmp_path, tiny_model_dir, task_options=opts, task_seeds=[0, 1], max_steps=2)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("agentrl train: ")]
    assert lines == [f"agentrl train: env failures in the iteration of step {s}: 4/8 episodes; first: env "
                     "agentrl-test/Count-v0, task seed 1, turn 1: step: RuntimeError: the counter is broken at call 1 "
                     "(test)" for s in (1, 2)]  # counted and said, no warning: half is under the rate
    out = tmp_path / "run"
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["env/failed_iterations"] for m in metrics if "env/failed_iterations" in m] == [0.0, 0.0]
    recs = [json.loads(x) for x in (out / "rollouts" / "iter_00001.jsonl").read_text().splitlines()]
    failed = [x for x in recs if "error" in x["info"]]
    assert len(recs) == 8 and len(failed) == 4 and all(x["t"] == 0 for x in failed)
    s = _agentrl("show", str(out), "--traj", failed[0]["traj_id"])
    assert s.returncode == 0 and "    error:       step: RuntimeError: the counter is broken at call 1 (test)" \
        in s.stdout, s.stderr
    # at a rate of one half the same run's iterations fail: each a warning, and a run of only those is exit 2
    r = _train(tmp_path, tiny_model_dir, task_options=opts, task_seeds=[0, 1], max_steps=2, max_env_failure_rate=0.5,
               overwrite_output_dir=True)
    assert r.returncode == 2
    warn = [ln for ln in r.stdout.splitlines() if "warning" in ln]
    assert warn == [f"agentrl train: warning: the iteration of step {s} failed (max_env_failure_rate 0.5): 4/8 "
                    f"episodes ended on an env error ({s} in a row; max_env_failure_iterations 3 stop the run)"
                     for s in (1, 2)]
    assert r.stderr.strip().splitlines()[-1].startswith(
        "agentrl train: error: every iteration of the run (2) failed (0.5 of the episode(s) ended on an env error")


def test_a_resumed_run_keeps_counting_failed_iterations_in_a_row(tmp_path, tiny_model_dir):
    # every iteration fails at rate 0.5 (4 of 8 episodes) yet trains; max_env_failure_iterations 3:
    # two steps, killed at their end (the run of only failures ends it: exit 2, checkpoint-2 saved),
    # then resumed to 3: step 3 is the third failed iteration in a row, as in one uninterrupted run
    opts = {"lengths": [1, 3], "parity": True, "broken_at": 1}
    kw = dict(task_options=opts, task_seeds=[0, 1], max_env_failure_rate=0.5, save_strategy="steps", save_steps=2)
    r = _train(tmp_path, tiny_model_dir, max_steps=2, **kw)
    assert r.returncode == 2 and (tmp_path / "run" / "checkpoint-2" / "env_failures.json").is_file()
    assert json.loads((tmp_path / "run" / "checkpoint-2" / "env_failures.json").read_text())["in_a_row"] == 2
    r = _train(tmp_path, tiny_model_dir, max_steps=3, resume_from_checkpoint=True, **kw)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith(
        "agentrl train: error: 3 iterations in a row failed (0.5 of the episode(s) ended on an env error"), \
        r.stderr[-2000:]
