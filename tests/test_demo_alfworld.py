"""The ALFWorld design of the demo (``python -m agentrl.demo --design alfworld``): its prompt form,
its game split and its pipeline end to end at toy scale (a tiny model, a few steps, the one-game-
per-family test set that tests/envs/test_alfworld.py builds: 2 min the first time on 2 loaded
cores, then cached; the pipeline test, 95 s there, is marked slow). Its learning figures are
docs/results/alfworld.md's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re

import pytest

pytestmark = pytest.mark.alfworld

if importlib.util.find_spec("alfworld") is None or importlib.util.find_spec("textworld") is None:
    pytest.skip("alfworld extra not installed (pip install alfworld==0.4.2 textworld==1.7.0)",
                allow_module_level=True)

from agentrl_envs.actions import format_action  # noqa: E402
from agentrl_envs.alfworld.env import ALFWorldEnv, compress_places  # noqa: E402
from agentrl_envs.alfworld.generate import GENERATOR_VERSION  # noqa: E402

from agentrl.demo_alfworld import FAMILIES, GameSet, check_split, ensure_games, split_games  # noqa: E402

# the set tests/envs/test_alfworld.py builds (one game per family and split): shared cache
TEST_SET = GameSet(per_family=1, valid_per_family=1, seed=0, name=f"test-v{GENERATOR_VERSION}-seed0")


@pytest.fixture(scope="module")
def game_root():
    return ensure_games(TEST_SET)


def test_compress_places_by_hand():
    targets = ["cabinet 3", "cabinet 1", "cabinet 2", "cabinet 5", "fridge 1", "stoveburner 2", "stoveburner 1",
               "garbagecan 1"]
    # cabinets 1, 2, 3 run, 5 alone; names sorted; one of each other name
    assert compress_places(targets) == "cabinet 1-3, 5, fridge 1, garbagecan 1, stoveburner 1-2"
    assert compress_places(["drawer 2", "drawer 4", "drawer 6"]) == "drawer 2, 4, 6"
    assert compress_places([]) == ""


def test_brief_prompt_is_short_and_holds_what_the_model_needs(game_root):
    from transformers import AutoTokenizer

    from agentrl.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2"))
    env = ALFWorldEnv(data_dir=game_root, prompt_style="brief")
    lengths = []
    for family in FAMILIES:
        options = {"split": "train", "families": [family]}
        obs, info = env.reset(seed=0, options=options)
        p = env.prompt(obs, info, [], 0)
        lines = p.splitlines()
        assert lines[0] == f"Goal: {info['task']}." and lines[1].startswith("Go to: ")
        assert "Now:" not in p and "Done:" not in p  # the room description is the Go to line
        # every go-to target of the admissible commands is in the line, in a range or by name
        names = {a[len("go to "):].rsplit(" ", 1)[0] for a in info["admissible_actions"] if a.startswith("go to ")}
        assert all(n in lines[1] for n in names)
        lengths.append(len(tok(p)["input_ids"]))
        # the expert's play: the Done line lists the state-changing commands so far, in order;
        # "Now:" is the last command's result
        done: list[str] = []
        for _ in range(20):
            a = env.expert_action()
            if a is None:
                break
            obs, r, term, _, info = env.step(format_action(a))
            p = env.prompt(obs, info, [], 1)
            assert f"Now: {obs[:200]}" in p
            if a.startswith(("take ", "move ", "clean ", "heat ", "cool ", "use ")):
                done.append(a)
            assert (f"Done: {'; '.join(done)}\n" in p) if done else "Done:" not in p, (a, p)
            if term:
                break
        assert any(a.startswith("take ") for a in done) and r == 1.0
        # the other commands are listed on the Here line, never navigation or examine
        here = [ln for ln in p.splitlines() if ln.startswith("Here: ")]
        assert not here or ("go to " not in here[0] and "examine " not in here[0])
    env.close()
    # the first prompt of every task type: the default App. J prompt lists every admissible
    # command (~300+ tokens); the brief one stays under 120 tokens
    assert max(lengths) <= 120, lengths


def test_unknown_prompt_style_is_one_line():
    with pytest.raises(ValueError, match=r"unknown prompt_style 'long'; valid: default, brief"):
        ALFWorldEnv(prompt_style="long")


def test_the_split_is_disjoint(game_root, tmp_path):
    sizes = check_split(game_root, FAMILIES)
    assert sizes == {"train": 5, "valid_seen": 5, "valid_unseen": 5}  # one game per task type and split
    games = split_games(game_root, FAMILIES)
    assert not set(games["train"]) & set(games["valid_seen"])
    # a set whose valid_seen repeats a training task, and one whose valid_unseen uses a training
    # floor plan, are refused (manifests written by hand: task folder / trial folder / game file)
    for bad, split, msg in (("pick_and_place_simple-Apple-None-Fridge-12", "valid_seen", "repeat training tasks"),
                            ("pick_and_place_simple-Mug-None-Desk-12", "valid_unseen", "share training floor plans")):
        root = tmp_path / split
        root.mkdir()
        rows = [{"dir": "train/pick_and_place_simple-Apple-None-Fridge-12/trial_1", "split": "train",
                 "family": "pick"}, {"dir": f"{split}/{bad}/trial_2", "split": split, "family": "pick"}]
        (root / "manifest.json").write_text(json.dumps({"games": rows}))
        with pytest.raises(ValueError, match=msg):
            check_split(str(root), FAMILIES)


@pytest.mark.slow  # 95 s on 2 loaded cores (a tiny model, but 5 evaluations and 2 RL steps)
def test_pipeline_end_to_end_at_toy_scale(game_root, tmp_path, monkeypatch):
    """The design's pipeline with a tiny model on the test set: SFT on the expert's episodes of
    the 5 training games, the selection over them, RL (BiPACE_Q) on the chosen games, greedy
    evaluation on the practised games, valid_seen and valid_unseen, memory per phase."""
    from agentrl import demo

    design = {**demo.DESIGNS["alfworld"], "games": TEST_SET, "base": "tiny", "hidden_size": 64, "num_layers": 2,
              "vocab_size": 512, "bf16": False, "threads": 1}
    monkeypatch.setitem(demo.DESIGNS, "alfworld", design)
    out = tmp_path / "demo"
    # the tiny model has 2 blocks (the recipe's fingerprint layer is SmolLM2's -12)
    s = demo.run(out, "alfworld", quick=True, seed=0, practised_goals=4,
                 rl_overrides=("--fingerprint_layer", "-1"), rl_steps=2)
    assert s["selection"]["pool"] == 5 and len(s["practised_goals"]) == 4
    pool = 5
    pr, un, ho = s["practised"], s["unseen"], s["heldout"]
    # one fresh episode per practised game (a game is the same on every reset): seed g + pool
    assert pr["settings"]["seeds"] == [g + pool for g in s["practised_goals"]]
    assert (pr["settings"]["split"], un["settings"]["split"], ho["settings"]["split"]) == \
        ("train", "valid_seen", "valid_unseen")
    assert (pr["before"]["episodes"], un["before"]["episodes"], ho["before"]["episodes"]) == (4, 5, 5)
    assert all(st["settings"]["env_kwargs"]["data_dir"] == game_root for st in (pr, un, ho))
    assert pr["settings"]["families"] == FAMILIES
    cmd = s["rl_command"]
    assert json.loads(cmd[cmd.index("--env_kwargs") + 1])["data_dir"] == game_root
    assert "recipes/demo_alfworld.yaml" in cmd[0].replace(os.sep, "/")
    split = json.loads((out / "split.json").read_text())
    assert split["train"] == split_games(game_root, FAMILIES)["train"]
    assert {r["phase"] for r in s["memory"]["phases"]} == {"sft", "select", "eval", "rl"}
    # each practised game also sampled (2 episodes each in the quick run) after SFT and after RL,
    # 16 episodes generated together at most; SFT's batch as accumulated micro-batches
    sp = s["practised_sampled"]
    assert sp["samples"] == 2 and len(sp["before"]) == len(sp["after"]) == 4
    assert all(r in (0.0, 0.5, 1.0) for r in sp["before"] + sp["after"])
    assert sp["gain"] == pytest.approx(100 * (sum(sp["after"]) - sum(sp["before"])) / 4)
    assert sp["temperature"] == 1.0 and pr["settings"]["temperature"] == 1.0  # recipes/demo_alfworld.yaml's
    assert pr["settings"]["max_batch"] == un["settings"]["max_batch"] == 16
    assert json.loads((out / "sft" / "sft_metrics.json").read_text())["train_steps"] == 4
    line = demo.report_line(s)
    assert re.fullmatch(r"demo: practised goals before=\d+\.\d after=\d+\.\d \(paired s\.e\. \d+\.\d\); "
                        r"sampled before=\d+\.\d after=\d+\.\d \(paired s\.e\. \d+\.\d\); "
                        r"unseen games before=\d+\.\d after=\d+\.\d; held-out before=\d+\.\d after=\d+\.\d", line)
    # the warm start's run record names the game set, so `agentrl eval --checkpoint` finds it
    assert game_root in (out / "sft" / "recipe.yaml").read_text()


def test_arena_races_on_the_warm_starts_games(tmp_path):
    """`agentrl.demo --design alfworld --warm-only` writes the games' folder into practised.json
    (env_kwargs); the arena passes it to every run, so a race plays the warm start's games."""
    from agentrl.arena import ArenaError, _read_practised

    f = tmp_path / "practised.json"
    kw = {"prompt_style": "brief", "invalid_action_penalty": 0.0, "data_dir": "/games"}
    f.write_text(json.dumps({"goals": [3, 7], "eval_seeds": [53, 57], "eval_split": "train", "families": FAMILIES,
                             "env_kwargs": kw}))
    assert _read_practised(str(f))["env_kwargs"] == kw
    f.write_text(json.dumps({"goals": [3], "eval_seeds": [53], "eval_split": "train", "families": FAMILIES,
                             "env_kwargs": "/games"}))
    with pytest.raises(ArenaError, match="env_kwargs must be a mapping, got str"):
        _read_practised(str(f))
