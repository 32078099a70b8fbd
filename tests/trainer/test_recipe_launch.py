"""`accelerate launch RECIPE.yaml` trains the recipe (agentrl/recipe_hook.py): real launches of the
repo's tiny CPU recipe on one and two processes, and the launch-settings decisions.

Runtime: ~20 s for one process, ~50 s for the re-launch on two.
"""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from agentrl import recipe_hook

REPO = Path(__file__).resolve().parent.parent.parent
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]
TINY = "recipes/textcraft_grpo_tiny_cpu.yaml"


def _env(tmp_path, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline",
               HF_HOME=str(tmp_path / "hf"))  # no default config from `accelerate config`
    env.pop("AGENTRL_RECIPE_RELAUNCHED", None)
    env.update(kw)
    return env


def _episodes(out: Path) -> float:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return next(r["env/episodes"] for r in rows if "env/episodes" in r)


def test_hook_is_installed():
    pth = Path(sysconfig.get_path("purelib")) / recipe_hook.PTH_NAME
    assert pth.is_file(), "run `make setup` (or python -m agentrl.recipe_hook install)"
    assert pth.read_text() == recipe_hook.PTH_LINE


def test_accelerate_launch_recipe_one_process(tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    r = subprocess.run([*ACCELERATE, "--num_processes", "1", TINY, "--model_name_or_path", tiny_model_dir,
                        "--output_dir", str(out), "--max_steps", "1"],
                       cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "model.safetensors").is_file() and (out / "checkpoint-1" / "trainer_state.json").is_file()
    assert _episodes(out) == 8  # 2 tasks x 4 rollouts on one process
    assert "agentrl: " not in r.stderr  # the launch matches the recipe's cpu.yaml: nothing to say
    # the run folder explains itself: the real command, the base model on the card, no wandb
    # message for a run that does not report to wandb, and where the rollouts would be
    assert "WANDB" not in r.stdout + r.stderr
    cmd = json.loads((out / "run_info.json").read_text())["command"]
    assert cmd[0] == sys.executable and cmd[cmd.index("-m") + 1:cmd.index("-m") + 3] == ["agentrl.train", TINY]
    assert f"fine-tuned version of `{tiny_model_dir}` (a local model folder)" in (out / "README.md").read_text()
    s = subprocess.run([sys.executable, "-m", "agentrl", "show", str(out)], capture_output=True, text=True)
    assert s.returncode == 0 and "32 step records, 2 groups" in s.stdout, s.stderr[-2000:]  # 2 tasks x 4 x 4 turns


def test_accelerate_launch_relaunches_under_the_recipes_config(tmp_path, tiny_model_dir):
    # a recipe whose accelerate config asks for 2 processes, launched as the card says (no flags)
    two = tmp_path / "two_cpu.yaml"
    two.write_text(yaml.safe_dump({"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU",
                                   "num_machines": 1, "num_processes": 2, "machine_rank": 0,
                                   "mixed_precision": "no", "use_cpu": False, "main_training_function": "main"}))
    rec = tmp_path / "two.yaml"
    rec.write_text(yaml.safe_dump({"base": str(REPO / TINY), "accelerate_config": str(two),
                                   "model_name_or_path": tiny_model_dir, "max_steps": 1,
                                   "output_dir": str(tmp_path / "run")}))
    r = subprocess.run([*ACCELERATE, str(rec)], cwd=REPO, env=_env(tmp_path), capture_output=True, text=True,
                       timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "re-launching under the recipe's accelerate_config" in r.stderr
    assert _episodes(tmp_path / "run") == 16  # both ranks' episodes in the global batch


def test_python_runs_only_agentrl_recipes(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text("x: 1\n")  # valid YAML, and valid Python (an annotation): not a recipe
    r = subprocess.run([sys.executable, str(other)], env=_env(tmp_path), capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (0, "")
    bad = tmp_path / "bad.yaml"
    bad.write_text("env_id: agentrl/TextCraft-v0\nenv_id: again\n")
    r = subprocess.run([sys.executable, str(bad)], env=_env(tmp_path), capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [f"agentrl: {bad}: key 'env_id' is given twice (line 2)"]


def _plan(monkeypatch, tmp_path, recipe, parent, **env):
    from agentrl.recipe_file import read_recipe_file

    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE",
              "AGENTRL_RECIPE_RELAUNCHED"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(recipe_hook, "missing_gpus", lambda cfg: None)  # as on a 4-GPU node
    return recipe_hook.plan(recipe, read_recipe_file(REPO / recipe), [], parent)


def test_card_command_relaunches_under_zero3(monkeypatch, tmp_path, capsys):
    card = "recipes/alfworld_bipace.yaml"
    launcher = [sys.executable, str(Path(sys.executable).parent / "accelerate"), "launch", card]
    action, cmd = _plan(monkeypatch, tmp_path, card, launcher)
    assert action == "relaunch" and Path(cmd[cmd.index("--config_file") + 1]).resolve() == REPO / "accelerate_configs/zero3.yaml"
    assert "--main_process_port" not in cmd  # one process started: no rendezvous to avoid
    assert "(4 processes, DeepSpeed ZeRO-3)" in capsys.readouterr().err
    # unconfigured multi-GPU default (accelerate picks every GPU, plain DDP): rank 0 re-launches
    action, cmd = _plan(monkeypatch, tmp_path, card, launcher, WORLD_SIZE="4", RANK="0")
    assert action == "relaunch" and "--main_process_port" in cmd
    assert _plan(monkeypatch, tmp_path, card, launcher, WORLD_SIZE="4", RANK="2") == ("exit", None)
    # the recipe's own launch: train
    assert _plan(monkeypatch, tmp_path, card, launcher, WORLD_SIZE="4", ACCELERATE_USE_DEEPSPEED="true",
                 ACCELERATE_DEEPSPEED_ZERO_STAGE="3") == ("train", None)


@pytest.mark.parametrize("flags", [["--num_processes", "1"], ["--config_file", "x.yaml"], ["--multi-gpu"]])
def test_a_launch_the_user_chose_wins_with_one_line(monkeypatch, tmp_path, capsys, flags):
    card = "recipes/alfworld_bipace.yaml"
    launcher = [sys.executable, "/usr/bin/accelerate", "launch", *flags, card]
    assert _plan(monkeypatch, tmp_path, card, launcher) == ("train", None)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "launched as 1 process, no DeepSpeed" in err[0] and "4 processes" in err[0]


def test_default_accelerate_config_counts_as_chosen(monkeypatch, tmp_path, capsys):
    (tmp_path / "hf" / "accelerate").mkdir(parents=True)
    (tmp_path / "hf" / "accelerate" / "default_config.yaml").write_text("num_processes: 1\n")
    card = "recipes/alfworld_bipace.yaml"
    assert _plan(monkeypatch, tmp_path, card, ["python", "accelerate", "launch", card]) == ("train", None)
    assert "training as launched" in capsys.readouterr().err


def test_card_command_without_the_gpus_is_one_line(tmp_path):
    # the card's recipe asks for 4 GPUs under ZeRO-3: on a machine without them, one line and exit 2
    # (under `accelerate launch` the launcher itself refuses: the next test)
    r = subprocess.run([sys.executable, "recipes/alfworld_bipace.yaml"], cwd=REPO,
                       env=_env(tmp_path, CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert "needs 4 GPUs, this machine has 0" in lines[0] and "accelerate_configs/zero3.yaml" in lines[0]


def test_card_command_under_accelerate_is_one_line_without_a_traceback(tmp_path):
    # the card's literal form: the refusal happens in the accelerate process itself, before a
    # worker starts, so accelerate has no failed worker to report with a traceback
    accelerate = str(Path(sys.executable).parent / "accelerate")
    r = subprocess.run([accelerate, "launch", "recipes/alfworld_bipace.yaml"], cwd=REPO,
                       env=_env(tmp_path, CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("agentrl: the recipe's accelerate_config accelerate_configs/zero3.yaml")
    assert "needs 4 GPUs, this machine has 0" in lines[0]
    # a launch the user chose is not second-guessed by the launcher: --help still answers
    h = subprocess.run([accelerate, "launch", "--help"], env=_env(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert h.returncode == 0 and "usage: accelerate <command> [<args>] launch" in h.stdout


@pytest.mark.parametrize("extra, said", [
    (["--learnin_rate", "0.1"], "unknown config key 'learnin_rate' in command line; did you mean learning_rate?"),
    (["--max_steps", "0"], "max_steps must be >= 1 (or -1: num_train_epochs decides), got 0"),
])
def test_a_recipe_error_under_accelerate_launch_is_one_line(tmp_path, tiny_model_dir, extra, said):
    # validated in the launching process, before a worker starts: one line, exit 2, no traceback
    accelerate = str(Path(sys.executable).parent / "accelerate")
    r = subprocess.run([accelerate, "launch", "--num_processes", "1", TINY, "--model_name_or_path", tiny_model_dir,
                        "--output_dir", str(tmp_path / "o"), *extra], cwd=REPO, env=_env(tmp_path),
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and lines == [f"agentrl train: error: {said}"], r.stderr[-2000:]
    assert not (tmp_path / "o").exists()


def test_a_reused_output_folder_under_accelerate_launch_is_one_line(tmp_path, tiny_model_dir):
    out = tmp_path / "used"
    out.mkdir()
    (out / "keep.txt").write_text("another run's file")
    accelerate = str(Path(sys.executable).parent / "accelerate")
    r = subprocess.run([accelerate, "launch", "--num_processes", "1", TINY, "--model_name_or_path", tiny_model_dir,
                        "--output_dir", str(out)], cwd=REPO, env=_env(tmp_path), capture_output=True, text=True,
                       timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and lines == [f"agentrl train: error: output_dir {out} is not empty: resume with "
                                           "--resume_from_checkpoint true, clear it with --overwrite_output_dir "
                                           "true, or pick another --output_dir"], r.stderr[-2000:]
    assert (out / "keep.txt").read_text() == "another run's file"


def test_a_workers_exit_2_ends_the_launch_without_a_traceback(tmp_path, tiny_model_dir):
    # an error only the worker can see (the fingerprint layer against the model's 2 blocks, read when
    # the trainer is built): its one line, then the launch ends with exit 2, not accelerate's
    # CalledProcessError traceback
    accelerate = str(Path(sys.executable).parent / "accelerate")
    quiet = ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]  # no banner of defaults
    r = subprocess.run([accelerate, "launch", "--num_processes", "1", *quiet, TINY, "--model_name_or_path",
                        tiny_model_dir, "--output_dir", str(tmp_path / "o"), "--credit", "bigpo",
                        "--fingerprint_layer", "5"], cwd=REPO, env=_env(tmp_path), capture_output=True, text=True,
                       timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "Warning" not in ln and "warn" not in ln]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert lines[-1] == ("agentrl train: error: fingerprint_layer 5 is out of range for a model with 2 decoder "
                         "layers (valid: -2..1)"), lines
