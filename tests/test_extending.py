"""docs/extending.md, run as written: its example env, estimator, loss and algorithm are written
into a fresh folder of their own and its commands run there (sft, check-recipe, train,
`accelerate launch`, eval, show, credit compare) as a user runs them: the console scripts, the
folder as the working folder, and PYTHONPATH holding only what an install of agentrl gives (never
the folder of the plug-ins: they are found because they sit beside the recipe).

Runtime: ~2-3 min (one SFT, two short trainings, TRL imported by each command).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "extending.md"
BLOCK = re.compile(r"```(python|yaml|bash)\n(.*?)```", re.DOTALL)


def doc_files() -> dict[str, str]:
    """The page's files: every python or yaml block whose first line is ``# NAME``."""
    out = {}
    for kind, body in BLOCK.findall(DOC.read_text()):
        first = body.splitlines()[0]
        if kind in ("python", "yaml") and re.fullmatch(r"# [\w.]+\.(py|yaml)", first):
            out[first[2:]] = body
    return out


def doc_commands() -> list[str]:
    """The commands of the page's block that starts ``# in the folder of the files above``."""
    blocks = [b for k, b in BLOCK.findall(DOC.read_text()) if k == "bash" and b.startswith("# in the folder")]
    assert len(blocks) == 1
    return [ln for ln in blocks[0].splitlines() if ln.strip() and not ln.startswith("#")]


def _argv(command: str) -> list[str]:
    """A command of the page as a user runs it: the installed console scripts (no working folder
    on the path), else ``python -P -m`` (the same: -P leaves the working folder out)."""
    words = shlex.split(command)
    bin_dir = Path(sys.executable).parent
    if words[:2] == ["accelerate", "launch"]:
        exe = bin_dir / "accelerate"
        return ([str(exe), "launch"] if exe.is_file() else [sys.executable, "-m", "accelerate.commands.launch"]) + \
            words[2:]
    assert words[0] == "agentrl", command
    exe = bin_dir / "agentrl"
    return ([str(exe)] if exe.is_file() else [sys.executable, "-P", "-m", "agentrl"]) + words[1:]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("my_plugins")
    for name, text in doc_files().items():
        (d / name).write_text(text)
    return d


def _env(folder: Path, tmp: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline",
               HF_HOME=str(tmp / "hf"),  # no default config of `accelerate config`
               AGENTRL_CACHE=str(tmp / "cache"))  # the embedded tiny model builds here
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != folder.resolve()]
    env["PYTHONPATH"] = os.pathsep.join(paths)  # what the install gives, not the plug-ins' folder
    env.pop("AGENTRL_RECIPE_RELAUNCHED", None)
    return env


def test_the_page_holds_a_complete_example():
    assert set(doc_files()) == {"guess_env.py", "rtg_est.py", "reinforce_loss.py", "guess.yaml", "guess_scaled.yaml"}
    cmds = doc_commands()
    for what in ("agentrl sft", "agentrl check-recipe", "agentrl train", "accelerate launch", "agentrl launch",
                 "agentrl eval", "agentrl show", "agentrl credit compare"):
        assert any(c.startswith(what) for c in cmds), what
    assert "docs/extending.md" in (REPO / "README.md").read_text()  # linked from the README


def test_the_estimator_by_hand(folder, tmp_path):
    # group g: a gets rewards [0, 1], b [0, 0]; gamma 0.5: returns-to-go a [0.5, 1], b [0, 0];
    # baselines per step: t=0 (0.5 + 0) / 2 = 0.25, t=1 (1 + 0) / 2 = 0.5 -> a [0.25, 0.5], b
    # [-0.25, -0.5]; scale 0.5 halves them. Run in a process of its own (its registration stays there).
    code = ("import json, rtg_est; from agentrl import credit; r = [dict(group_id='g', traj_id=k, t=t, obs='o', "
            "action='x', reward=float(k == 'a' and t == 1), done=t == 1) for k in 'ab' for t in (0, 1)]; "
            "print(json.dumps(list(credit.compute('rtg', r, gamma=0.5, scale=0.5).step_advantages)))")
    p = subprocess.run([sys.executable, "-c", code], cwd=folder, env=_env(folder, tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout) == pytest.approx([0.125, 0.25, -0.125, -0.25])


@pytest.mark.slow
def test_every_command_of_the_page_runs_from_the_plugins_folder(folder, tmp_path):
    env = _env(folder, tmp_path)
    out = {}
    for cmd in doc_commands():
        p = subprocess.run(_argv(cmd), cwd=folder, env=env, capture_output=True, text=True, timeout=400)
        assert p.returncode == 0, f"{cmd}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
        out[cmd] = p.stdout
    runs = folder / "runs"
    # sft: the warm start, a run record naming the env's module (eval replays it)
    assert (runs / "guess_sft" / "config.json").is_file()
    assert "guess_env" in (runs / "guess_sft" / "recipe.yaml").read_text()
    check = next(v for k, v in out.items() if k.endswith("check-recipe guess.yaml"))
    assert check.startswith("recipe OK: env mine/Guess-v0, credit rtg")
    listed = next(v for k, v in out.items() if k.endswith("--list"))
    assert "mine/Guess-v0 (guess_env)" in listed and "rtg (rtg_est)" in listed
    assert "reinforce (reinforce_loss)" in listed and "scaled_reinforce (reinforce_loss)" in listed
    # train (in an env worker: env_workers 1) and accelerate launch (the algorithm of its own)
    for run in ("guess", "guess_scaled"):
        assert (runs / run / "model.safetensors").is_file(), run
        assert json.loads((runs / run / "run_info.json").read_text())["plugin_dirs"] == [str(folder.resolve())]
    metrics = [json.loads(x) for x in (runs / "guess" / "metrics.jsonl").read_text().splitlines()]
    assert any("reinforce/adv" in m for m in metrics) and any("credit/rtg_mean" in m for m in metrics)
    launch = next(v for k, v in out.items() if k.startswith("agentrl launch"))
    assert "-m agentrl.train guess.yaml" in launch  # validated (the plug-ins found), then the command
    # eval: the run's env from its own record
    ev = json.loads((runs / "guess" / "eval_Guess-v0_valid.json").read_text())
    assert ev[0]["all"]["episodes"] == 8 and ev[0]["settings"]["env_id"] == "mine/Guess-v0"
    # show and compare on the run folder: its estimator, a plug-in's, with its kwargs
    show = next(v for k, v in out.items() if k.startswith("agentrl show"))
    assert "step records" in show
    compare = next(v for k, v in out.items() if k.startswith("agentrl credit compare"))
    assert re.search(r"^rtg\s", compare, re.M) and re.search(r"^grpo\s", compare, re.M)
    # one trajectory turn by turn, with the run's and another estimator's advantage
    traj = json.loads((runs / "guess" / "rollouts" / "iter_00001.jsonl").read_text().splitlines()[0])["traj_id"]
    p = subprocess.run(_argv(f"agentrl show runs/guess --traj {traj} --estimators grpo"), cwd=folder, env=env,
                       capture_output=True, text=True, timeout=200)
    assert p.returncode == 0 and "run's estimator: rtg {'gamma': 0.9, 'scale': 0.5}" in p.stdout, p.stderr[-2000:]
    assert "advantage: run (rtg) " in p.stdout and ", grpo " in p.stdout
