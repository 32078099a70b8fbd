"""`agentrl eval`, `agentrl report` and the evaluation notebook on a real tiny training run.

The run: a tiny random Qwen2 trained for two GRPO steps on TextCraft (compact prompts) with
checkpoints at steps 1 and 2. A random model wins nothing, so the success cells are 0 (with
the number of episodes behind them); what is checked is the plumbing and the table's shape.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.eval import CellStats, markdown_table, summarize
from agentrl.records import StepRecord

REPO = Path(__file__).resolve().parent.parent


class _Ep:
    def __init__(self, fam, won, final_reward, length, n_invalid):
        self.task_family, self.won, self.length, self.n_invalid = fam, won, length, n_invalid
        self.steps = [StepRecord("g", "t", i, "", "", final_reward if i == length - 1 else 0.0, i == length - 1)
                      for i in range(length)]


def test_summary_by_hand():
    eps = [_Ep("a", True, 1.0, 2, 0), _Ep("a", False, 0.5, 4, 2), _Ep("b", True, 1.0, 1, 1), _Ep("b", True, 1.0, 3, 0)]
    r = summarize(eps, "ck", "agentrl/X-v0", "valid", {})
    # family a: 1 of 2 won -> 50%; score = mean final reward (1.0 + 0.5) / 2 = 75; invalid 2 of 6 steps
    assert r.per_family["a"]["success"] == 50.0 and r.per_family["a"]["score"] == 75.0
    assert r.per_family["a"]["invalid_rate"] == pytest.approx(2 / 6)
    # all: 3 of 4 won; se = 100 * sqrt(.75 * .25 / 4) = 21.65
    assert r.all["success"] == 75.0 and r.all["success_se"] == pytest.approx(21.6506, abs=1e-3)
    assert r.all["episodes"] == 4 and r.all["mean_length"] == 2.5
    table = markdown_table([r])
    assert table.splitlines()[0] == "| checkpoint | a | b | All |"
    assert table.splitlines()[2] == "| ck | 50.0 (2) | 100.0 (2) | 75.0 (4) |"
    assert CellStats().as_dict()["success"] == 0.0  # empty cell: no division by zero


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Two real GRPO steps on TextCraft with a tiny model built from TextCraft text."""
    import gymnasium as gym

    import agentrl.envs  # noqa: F401
    from agentrl.models import build_tiny_model

    root = tmp_path_factory.mktemp("run")
    env = gym.make("agentrl/TextCraft-v0", prompt_style="compact")
    texts = []
    for seed in range(20):
        obs, info = env.reset(seed=seed, options={"split": "train", "families": ["depth2"]})
        texts.append(env.unwrapped.prompt(obs, info, [], 0))
        texts.append("<action>" + (env.unwrapped.expert_action() or "inventory") + "</action>")
    model = build_tiny_model(root / "model", texts=texts * 5, vocab_size=600, hidden_size=32, num_layers=2,
                             num_heads=2, num_kv_heads=1)
    out = root / "rl"
    cmd = [sys.executable, "-m", "agentrl.train", "recipes/textcraft_grpo_tiny_cpu.yaml",
           "--model_name_or_path", str(model), "--output_dir", str(out), "--max_steps", "2", "--save_steps", "1"]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert (out / "checkpoint-1").is_dir() and (out / "checkpoint-2").is_dir()
    return out


def test_eval_cli_on_checkpoints(tiny_run, tmp_path):
    js = tmp_path / "eval.json"
    cmd = [sys.executable, "-m", "agentrl", "eval", "--checkpoint", str(tiny_run / "checkpoint-1"),
           "--checkpoint", str(tiny_run / "checkpoint-2"), "--env", "agentrl/TextCraft-v0", "--split", "valid",
           "--episodes", "3", "--families", "depth2", "--max-new-tokens", "8",
           "--env-kwargs", '{"prompt_style": "compact"}', "--out", str(js)]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("|")]
    assert lines[0] == "| checkpoint | depth2 | All |"
    assert lines[2].startswith("| checkpoint-1 |") and lines[3].startswith("| checkpoint-2 |")
    assert lines[2].endswith("(3) |")
    res = json.loads(js.read_text())
    assert [r["all"]["episodes"] for r in res] == [3, 3]
    assert res[0]["settings"]["seeds"] == [0, 1, 2]


def test_eval_bad_input():
    p = subprocess.run([sys.executable, "-m", "agentrl", "eval", "--checkpoint", "/nonexistent",
                        "--env", "agentrl/TextCraft-v0"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "checkpoint folder not found" in p.stderr and "Traceback" not in p.stderr


def test_eval_bad_input_in_process(tmp_path, capsys):
    from agentrl.eval import main

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/nonexistent/base",
                                                             "peft_type": "LORA"}))
    base = ["--checkpoint", str(adapter), "--env", "agentrl/TextCraft-v0", "--episodes", "2"]
    cases = [
        (["--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
        (["--split", "nosuch"], "cannot reset agentrl/TextCraft-v0"),  # not 0% over failed resets
        (["--families", "nope"], "cannot reset agentrl/TextCraft-v0"),
        ([], "cannot load"),  # the adapter's base model is not here
    ]
    for extra, needle in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (extra, err)


def test_table_rows_tell_checkpoints_apart():
    from agentrl.eval import EvalResult, row_labels

    cell = CellStats()
    cell.add(True, 1.0, 1, 0)
    a = EvalResult("runs/X/checkpoint-100", "agentrl/X-v0", "valid", all=cell.as_dict())
    b = EvalResult("runs/Y/checkpoint-100", "agentrl/X-v0", "valid", all=CellStats().as_dict())
    rows = markdown_table([a, b]).splitlines()[2:]
    assert rows[0].startswith("| X/checkpoint-100 |") and rows[1].startswith("| Y/checkpoint-100 |")
    assert row_labels(["runs/a/ck", "runs/b/other"]) == {"runs/a/ck": "ck", "runs/b/other": "other"}


def test_notebook_executes(tiny_run, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "notebooks" / "evaluate_checkpoints.ipynb", as_version=4)
    os.environ.update({
        "AGENTRL_RUN_DIRS": str(tiny_run), "AGENTRL_ENV": "agentrl/TextCraft-v0", "AGENTRL_EPISODES": "2",
        "AGENTRL_ENV_KWARGS": '{"prompt_style": "compact"}', "AGENTRL_MAX_NEW_TOKENS": "8",
        "AGENTRL_REPORT_DIR": str(tmp_path / "report"),
    })
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "checkpoint-1: success" in text and "checkpoint-2: success" in text
    for name in ("learning_curves.png", "steps_to_threshold.png", "singleton_fraction.png"):
        assert (tmp_path / "report" / name).is_file()
