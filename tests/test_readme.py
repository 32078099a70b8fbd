"""README's commands as written: the cheap ones run here, at tiny scale where a figure sets the
scale (``SCALE``), in a scratch folder with the checkout's recipes; every other command README
shows is classed (a make target, a placeholder path, the demo's run, the papers' GPU runs), so a
new command must be classed here too.

Runtime: ~3 min (two-step CPU training runs, a validation, the card's refusal, the benches), and the first
run's warm start (~3 min) where the model cache does not hold it yet.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

RUNS = {  # command -> (expected exit code, a line its output must hold)
    "accelerate launch --num_processes 1 recipes/textcraft_first_run.yaml": (0, "env/success (sampled, 2 steps)"),
    "accelerate launch --num_processes 1 recipes/textcraft_grpo_tiny_cpu.yaml": (0, '"step": 2'),
    "agentrl show runs/textcraft_grpo_tiny_cpu": (0, "group"),
    "agentrl check-recipe recipes/bipace/cpu/bipace_textcraft_gigpo.yaml": (0, "recipe OK"),
    "accelerate launch recipes/alfworld_bipace.yaml": (2, "needs 4 GPUs, this machine has 0"),
    "agentrl bench credit --records 100000 --json": (0, '"grpo"'),
    "agentrl truth --quick --out runs/truth-quick": (0, "truth: wrote"),
    "agentrl truth --knobs recurrence=0.8,invalid=0 --sweep step_reward=0,0.2 --estimators grpo,gigpo,rtmc":
        (0, "truth: wrote"),
}
SCALE = {"--records 100000": "--records 3000", "--estimators grpo,gigpo,rtmc": "--estimators grpo,gigpo,rtmc --quick",
         "textcraft_first_run.yaml": "textcraft_first_run.yaml --max_steps 2 --save_steps 2"}
"""Figures that set a command's scale, and what this test runs instead."""
NOT_RUN = {
    "make": "a make target (CI runs make test; the others take minutes to hours)",
    "RECIPE.yaml": "a placeholder for the reader's recipe",
    "runs/X/": "a placeholder for the reader's run",
    "runs/demo/": "the demo's run folder: README gives `make demo` first",
    "runs/bipace/": "the papers' GPU runs (make repro-bipace)",
}


def _commands() -> list[str]:
    """The shell lines of README's bash blocks (comments dropped)."""
    text = (REPO / "README.md").read_text()
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for ln in block.splitlines():
            cmd = re.split(r"\s+#", ln)[0].strip()
            if cmd and not cmd.startswith("#"):
                lines.append(cmd)
    return lines


def test_every_readme_command_is_run_or_classed():
    for cmd in _commands():
        assert cmd in RUNS or any(k in cmd for k in NOT_RUN), f"README command not covered here: {cmd}"
    assert set(RUNS) <= set(_commands()), "a command of this test is no longer in README"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A folder like a fresh clone's working folder: the recipes and accelerate configs."""
    d = tmp_path_factory.mktemp("readme")
    for name in ("recipes", "accelerate_configs"):
        (d / name).symlink_to(REPO / name)
    return d


NEEDS = {"agentrl show runs/textcraft_grpo_tiny_cpu": ("runs/textcraft_grpo_tiny_cpu/rollouts",
                                                       "accelerate launch --num_processes 1 recipes/textcraft_grpo_tiny_cpu.yaml")}
"""A command that reads what an earlier one writes -> (that output, the command). Under pytest-xdist
the two may run on different workers (each has its own scratch folder), or the reader first."""


def _run(cmd: str, scratch) -> subprocess.CompletedProcess:
    for a, b in SCALE.items():
        cmd = cmd.replace(a, b)
    argv = shlex.split(cmd)
    argv[0] = str(BIN / argv[0])
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline", CUDA_VISIBLE_DEVICES="",
               HF_HOME=str(scratch / "hf"), PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "envs")]))
    return subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
@pytest.mark.parametrize("cmd", list(RUNS))
def test_readme_command_runs_as_written(cmd, scratch):
    code, needle = RUNS[cmd]
    if cmd in NEEDS and not (scratch / NEEDS[cmd][0]).is_dir():
        first = _run(NEEDS[cmd][1], scratch)
        assert first.returncode == 0, (NEEDS[cmd][1], (first.stdout + first.stderr)[-3000:])
    r = _run(cmd, scratch)
    out = r.stdout + r.stderr
    assert r.returncode == code, (cmd, out[-3000:])
    assert needle in out, (cmd, out[-2000:])
    if code == 2:
        assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1 and "Traceback" not in out
