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


def _write_run(run: Path, success: list[float], extra=None):
    run.mkdir(parents=True)
    rows = [{"step": i + 1, "env/success": v, "env/invalid_action_rate": 0.5 - v / 2, "entropy": 1.0 - v,
             "credit/adv_abs_mean": 0.3, "credit/adv_mean": 0.0, "time/rollout_s": 2.0, "time/update_s": 1.0,
             "time/credit_s": 0.1, **(extra or {})} for i, v in enumerate(success)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_groups_seeds_into_mean_and_band(tmp_path, capsys):
    from agentrl.report import group_runs, main, mean_band

    # mean of (0, .2) and (.4, .6) at steps 1, 2 = .2, .4; s.e. = sd / sqrt(2) = (.2828 / 1.4142) = .2
    xs, ys, ses = mean_band([([1, 2], [0.0, 0.2]), ([1, 2, 3], [0.4, 0.6, 0.9])])
    assert xs == [1, 2] and ys == pytest.approx([0.2, 0.4]) and ses == pytest.approx([0.2, 0.2])
    rec = tmp_path / "runs" / "bipace" / "alfworld_grpo_7b"
    _write_run(rec / "seed0", [0.0, 0.2, 0.6, 0.8])
    _write_run(rec / "seed1", [0.4, 0.6, 0.8, 1.0])
    other = tmp_path / "runs" / "single"
    _write_run(other, [0.1, 0.1, 0.1, 0.1])
    assert {k: [p.name for p in v] for k, v in group_runs([str(rec), str(other)]).items()} == {
        "alfworld_grpo_7b": ["seed0", "seed1"], "single": ["single"]}
    assert list(group_runs([str(rec / "seed0"), str(rec / "seed1")])) == ["alfworld_grpo_7b"]
    # held-out eval JSONs in the checkpoints of seed0
    for step, succ in ((2, 25.0), (4, 50.0)):
        ck = rec / "seed0" / f"checkpoint-{step}"
        ck.mkdir()
        (ck / "eval_TextCraft-v0_valid.json").write_text(json.dumps([{"checkpoint": str(ck), "all": {"success": succ}}]))
    out = tmp_path / "rep"
    assert main([str(rec), str(other), "--out", str(out), "--smooth", "2"]) == 0
    text = capsys.readouterr().out
    assert "trailing mean over 2 logged steps" in text and "(mean of 2 seeds)" in text
    summary = json.loads((out / "report.json").read_text())
    r = summary["runs"]["alfworld_grpo_7b"]
    # smoothed per seed (window 2): seed0 [0, .1, .4, .7], seed1 [.4, .5, .7, .9] -> mean [.2, .3, .55, .8]
    assert r["seeds"] == 2 and r["final_success"] == pytest.approx(0.8)
    assert r["steps_to_threshold"] == {"0.5": 3, "0.7": 4, "0.9": None}
    assert r["held_out/TextCraft-v0_valid"] == {"2": 0.25, "4": 0.5}
    for name in summary["figures"]:
        assert (out / name).stat().st_size > 1000, name


def test_show_episode_turn_by_turn(tmp_path, capsys):
    from agentrl.records import StepRecord, write_jsonl
    from agentrl.show import main

    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "recipe.yaml").write_text("credit: grpo\ngamma: 0.9\ncredit_kwargs: {}\n")
    recs = []
    for k, won in ((0, True), (1, False)):
        for t in range(2):
            done = t == 1
            recs.append(StepRecord(group_id="s0:t0", traj_id=f"s0:r0:{k}", t=t, obs=f"obs {k}{t}",
                                   action="craft x" if t == 0 else "inventory", reward=float(won and done),
                                   done=done, won=won, valid=not (k == 1 and t == 1),
                                   info={"response": f"<action>craft x</action> raw {k}{t}",
                                         "advantage": 0.7071 if won else -0.7071}))
    path = run / "rollouts" / "iter_00000.jsonl"
    write_jsonl(recs, path)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "s0:t0" in out and "2 groups" not in out and "1 groups" in out
    assert main([str(path), "--traj", "s0:r0:1", "--estimators", "grpo,nosuch"]) == 0
    out = capsys.readouterr().out
    assert "run's estimator: grpo {'gamma': 0.9}" in out and "nosuch: not computed" in out
    assert "trajectory s0:r0:1  group s0:t0" in out and "not won" in out
    assert "response:    <action>craft x</action> raw 11" in out and "[INVALID]" in out
    # returns 1 and 0 in one group: GRPO (R - mean) / sample std = -.5 / sqrt(.5) = -.7071 on both steps
    assert out.count("run (grpo) -0.7071, grpo -0.7071") == 2
    assert main([str(path), "--group", "nope"]) == 2
    assert "no group_id 'nope'" in capsys.readouterr().err
    # a run folder: its newest iteration, named on stderr
    write_jsonl(recs[:2], run / "rollouts" / "iter_00001.jsonl")
    assert main([str(run), "--traj", "s0:r0:0"]) == 0
    assert "iter_00001.jsonl (the newest of 2 iterations)" in capsys.readouterr().err


def test_show_prints_the_behaviour_logprobs(tmp_path, capsys):
    import json
    import math

    from agentrl.records import StepRecord, write_jsonl
    from agentrl.show import main

    recs = [StepRecord(group_id="g", traj_id="a", t=0, obs="o", action="x", reward=0.0, done=False,
                       action_token_ids=[7, 8, 9], behaviour_logps=[-0.5, float("nan"), -1.5]),
            StepRecord(group_id="g", traj_id="a", t=1, obs="o", action="y", reward=1.0, done=True,
                       action_token_ids=[4])]
    path = tmp_path / "iter_00000.jsonl"
    write_jsonl(recs, path)
    line = path.read_text().splitlines()[0]
    assert json.loads(line)["behaviour_logps"] == [-0.5, None, -1.5] and "NaN" not in line  # strict JSON
    back = StepRecord.from_dict(json.loads(line)).behaviour_logps
    assert back[0] == -0.5 and math.isnan(back[1]) and back[2] == -1.5
    assert main([str(path), "--traj", "a"]) == 0
    out = capsys.readouterr().out
    # mean over the 2 scored tokens (-0.5 - 1.5) / 2 = -1.0, minimum -1.5; the 2nd step saved none
    assert "logprobs:    mean -1.0000  min -1.5000  (3 tokens, 1 not scored)" in out
    assert "logprobs:    (not saved by this run)" in out and "7:" not in out
    assert main([str(path), "--traj", "a", "--logprobs"]) == 0
    assert "7:-0.500  8:n/a (not scored)  9:-1.500" in capsys.readouterr().out
