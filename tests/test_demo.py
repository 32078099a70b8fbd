"""`make demo`'s pipeline in --quick mode: SFT warm start, RL through agentrl.train, held-out eval.

A smoke test of the wiring (a few steps cannot show learning); the learning claim is the full
demo's, reported with its figures in README.md.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.demo import DESIGNS, choose_goals, practised_seeds
from agentrl.evaluation import paired_difference

REPO = Path(__file__).resolve().parent.parent


def test_paired_gain_by_hand():
    # the demo's gain and its paired s.e. (episode as unit)
    before = [True, False, False, True, False]
    after = [True, True, False, False, True]
    # d = [0, 1, 0, -1, 1]: mean 0.2 -> +20 points; sample var = (0.04+0.64+0.04+1.44+0.64)/4 = 0.7
    gain, se = paired_difference(before, after)
    assert abs(gain - 20.0) < 1e-9
    assert abs(se - 100 * (0.7 / 5) ** 0.5) < 1e-9


def test_paired_gain_of_rates_by_hand():
    # sampled success per game (the game as unit): d = [0.5, 0, -0.25, 0.75], mean 0.25 -> +25
    # points; sample var = (0.0625 + 0.0625 + 0.25 + 0.25) / 3 = 0.2083..
    gain, se = paired_difference([0.25, 0.5, 0.75, 0.0], [0.75, 0.5, 0.5, 0.75])
    assert abs(gain - 25.0) < 1e-9
    assert abs(se - 100 * (0.625 / 3 / 4) ** 0.5) < 1e-9


def test_choose_goals_by_hand():
    greedy = [True, False, False, True, False, True, True, False]
    sampled = [0.5, 0.25, 0.75, 0.625, 0.0, 1.0, 0.375, 0.5]
    # in the band [0.25, 0.75]: unsolved 2 (0.75), 7 (0.5), 1 (0.25), highest first; solved 0 (0.5
    # exactly), then 3 and 6 (both 0.125 from 50%: the lower index first); half from each side
    assert choose_goals(greedy, sampled, 4) == [0, 2, 3, 7]
    assert choose_goals(greedy, sampled, 2) == [0, 2]
    assert choose_goals(greedy, sampled, 6) == [0, 1, 2, 3, 6, 7]  # the whole band
    # the band holds 6: the rest are the goals nearest 50% sampled success
    assert choose_goals(greedy, sampled, 7) == [0, 1, 2, 3, 4, 6, 7]  # 4 and 5 are both 0.5 off: 4
    assert choose_goals([False] * 3, [0.5, 0.25, 0.0], 2) == [0, 1]  # no solved goal: all unsolved
    assert choose_goals([True, True, True, False], [0.5] * 4, 4) == [0, 1, 2, 3]  # one unsolved: 3 solved
    with pytest.raises(ValueError):
        choose_goals(greedy, sampled[:-1], 2)
    with pytest.raises(ValueError):
        choose_goals(greedy, sampled, 9)


def test_goal_level_se_by_hand():
    from agentrl.demo_goals import goal_level_se

    # goals 3 and 7 (pool 10), two draws each: goal 3 gains on both draws (mean 1), goal 7 on one
    # of two (mean 0.5): means 1, 0.5 -> sd 0.3536, s.e. 0.25 -> 25 points
    seeds = [3, 7, 13, 17]
    assert goal_level_se([False, False, False, True], [True, True, True, True], seeds, 10) == pytest.approx(25.0)
    # draws grouped by goal, not by position: goal 3 (seeds 3, 13) gains on both draws, goal 7 on
    # neither -> means 1, 0: s.e. 0.5 -> 50 points (pairs by position, (3, 7) and (13, 17), give 0)
    assert goal_level_se([False] * 4, [True, False, True, False], [3, 7, 13, 17], 10) == pytest.approx(50.0)


def test_practised_seeds_are_fresh_draws():
    assert practised_seeds([3, 7], 2, 232) == [235, 239, 467, 471]
    with pytest.raises(ValueError, match="train seeds 0..231"):
        practised_seeds([232], 2, 232)


@pytest.mark.parametrize("name", ["tiny", "smollm2", "alfworld"])
def test_designs_warm_start_on_their_recipes_prompts(name, tmp_path):
    """The SFT examples must be the prompts RL and the evaluation see: each design's env_kwargs
    and evaluation turn limit are its recipe's (a mismatch trains the warm start on other text)."""
    from agentrl.config import load_recipe
    from agentrl.demo import DESIGNS, RECIPES
    from agentrl.models import build_tiny_model

    design = DESIGNS[name]
    model = build_tiny_model(tmp_path / "model", hidden_size=32)  # the demo passes its warm start
    cfg = load_recipe(str(RECIPES / design["recipe"]), ["--model_name_or_path", str(model)])
    assert cfg.env_kwargs == design["env_kwargs"]
    assert cfg.max_turns == design["eval_turns"]
    assert cfg.max_steps == design["rl_steps"]  # the recipe run by hand trains as long as the demo


@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_the_warm_starts_record_plays_the_recipes_episodes(name):
    from agentrl.demo import sft_record_settings
    from agentrl.recipe_file import read_recipe_file

    recipe = read_recipe_file(REPO / "recipes" / DESIGNS[name]["recipe"])
    got = sft_record_settings(DESIGNS[name], "/models/base", 12, 3)
    for key in ("env_kwargs", "max_turns", "history_length", "context_mode", "task_split", "task_families"):
        assert got[key] == recipe[key], key
    assert (got["model_name_or_path"], got["max_steps"], got["seed"]) == ("/models/base", 12, 3)


def test_precision_autocasts_only_the_bf16_design():
    import torch

    from agentrl.demo import DESIGNS, precision

    with precision(DESIGNS["smollm2"]):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        x = torch.ones(2, 3) @ torch.ones(3, 2)
    assert x.dtype == torch.bfloat16  # a matmul inside runs in bf16
    with precision(DESIGNS["tiny"]):
        assert not torch.is_autocast_enabled("cpu")
        assert (torch.ones(2, 3) @ torch.ones(3, 2)).dtype == torch.float32


def test_brief_prompts_are_the_sft_examples():
    """The smollm2 design's prompt style, as the SFT warm start (and so RL) sees it: goal, the
    goal's recipes, inventory, the last result; no format line, no echoed command."""
    from agentrl import sft

    data = sft.collect_expert("agentrl/TextCraft-v0", [0], {"split": "train", "families": ["depth2"]},
                              {"prompt_style": "brief"}, history_length=1)
    recipes = "craft 4 acacia planks using 1 acacia logs\ncraft 1 acacia boat using 5 acacia planks"
    # train goal 0 is the acacia boat: 5 planks = 2 crafts of 4 from 1 log each, so 2 logs first
    assert [s.action for s in data.steps] == ["get 2 acacia logs", "craft 4 acacia planks using 1 acacia logs",
                                              "craft 4 acacia planks using 1 acacia logs",
                                              "craft 1 acacia boat using 5 acacia planks"]
    assert data.steps[0].user == f"Goal: craft acacia boat.\n{recipes}\nInventory: nothing."
    assert data.steps[1].user == f"Goal: craft acacia boat.\n{recipes}\nInventory: 2 acacia logs.\nLast: Got 2 acacia logs"
    assert data.steps[3].user.endswith("Inventory: 8 acacia planks.\nLast: Crafted 4 acacia planks")


def test_plain_chat_copy_drops_the_default_system_line(tmp_path):
    from transformers import AutoTokenizer

    from agentrl.demo import plain_chat_copy
    from agentrl.models import build_tiny_model

    src = build_tiny_model(tmp_path / "src", hidden_size=32)
    (src / "chat_template.jinja").write_text("{{ '<|im_start|>system\\nYou are SmolLM<|im_end|>\\n' }}"
                                             "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    dst = plain_chat_copy(src, tmp_path / "base")
    assert (dst / "config.json").is_symlink() and (dst / "config.json").resolve() == (src / "config.json").resolve()
    assert "system" in (src / "chat_template.jinja").read_text()  # the source is left as it was
    tok = AutoTokenizer.from_pretrained(dst)
    text = tok.apply_chat_template([{"role": "user", "content": "Goal: craft bowl."}], tokenize=False,
                                   add_generation_prompt=True)
    assert text == "<|im_start|>user\nGoal: craft bowl.<|im_end|>\n<|im_start|>assistant\n"


def test_practised_goals_need_a_warm_start_and_a_goals_file(tmp_path, capsys):
    from agentrl.demo import main

    bad = tmp_path / "practised.json"
    bad.write_text('{"goals": []}')
    warm = tmp_path / "sft"
    warm.mkdir()
    (warm / "config.json").write_text("{}")
    assert main(["--practised", str(bad)]) == 2
    assert main(["--warm-start", str(warm), "--practised", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("--practised needs --warm-start and a practised.json" in e for e in err)


@pytest.mark.parametrize("flag,value,said", [("--practised-samples", "-1", "0..256"), ("--practised-samples", "257", "0..256"),
                                             ("--selection-samples", "0", "1..64"), ("--selection-samples", "65", "1..64")])
def test_sample_counts_out_of_range_are_one_line(flag, value, said, capsys):
    from agentrl.demo import main

    assert main(["--design", "alfworld", flag, value]) == 2
    assert main(["--design", "alfworld", "--warm-only", flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"agentrl demo: {flag} must be in {said}"] * 2


def test_selection_samples_override_the_designs():
    from agentrl.demo import DESIGNS, with_selection_samples

    design = DESIGNS["alfworld"]
    assert with_selection_samples(design, None) is design
    assert with_selection_samples(design, 8)["selection_samples"] == 8 and design["selection_samples"] == 2


def test_learner_threads_hold_inside_and_restore_after():
    import torch

    from agentrl.demo import learner_threads

    before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    want = 1 if before != 1 else 2
    with learner_threads(want):
        assert (torch.get_num_threads(), os.environ["OMP_NUM_THREADS"]) == (want, str(want))
    assert (torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")) == (before, env)
    with pytest.raises(RuntimeError), learner_threads(want):
        raise RuntimeError("the RL phase failed")
    assert (torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")) == (before, env)


def test_demo_quick(tmp_path):
    out = tmp_path / "demo"
    p = subprocess.run([sys.executable, "-m", "agentrl.demo", "--quick", "--out", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=1500,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"})
    assert p.returncode == 0, p.stderr[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"demo: practised goals before=(\d+\.\d) after=(\d+\.\d) \(paired s\.e\. (\d+\.\d)\); "
                     r"held-out before=(\d+\.\d) after=(\d+\.\d)", last)
    assert m, last
    summary = json.loads((out / "demo_summary.json").read_text())
    pr, ho = summary["practised"], summary["heldout"]
    got_line = [float(g) for g in m.groups()]
    assert got_line == [round(pr["before"]["success"], 1), round(pr["after"]["success"], 1),
                        round(pr["gain_paired_se"], 1), round(ho["before"]["success"], 1),
                        round(ho["after"]["success"], 1)]
    # practised goals at --quick scale: 4 goals chosen by choose_goals from the warm start's scores
    # on the first 16 training goals (selection draw m = 4), RL on them (seeds g), evaluated on 3
    # fresh draws each, seeds g + 232 m (m = 1..3): the same goals, never an RL task
    sel = summary["selection"]
    assert (sel["pool"], sel["draw"], sel["samples"]) == (16, 4, 2)
    assert all(p in (0.0, 0.5, 1.0) for p in sel["sampled"]) and len(sel["greedy"]) == 16
    goals = summary["practised_goals"]
    assert len(set(goals)) == 4 and all(0 <= g < 16 for g in goals)
    assert goals == choose_goals(sel["greedy"], sel["sampled"], 4)  # wiring: the rule ran on these scores
    cmd = summary["rl_command"]
    i = cmd.index("--task_seeds")
    assert cmd[i + 1:i + 5] == [str(g) for g in goals]
    seeds = pr["settings"]["seeds"]
    assert sorted(seeds) == sorted(g + 232 * k for g in goals for k in (1, 2, 3))
    assert pr["before"]["episodes"] == pr["after"]["episodes"] == 12
    assert ho["before"]["episodes"] == ho["after"]["episodes"] == 12
    assert (pr["settings"]["split"], ho["settings"]["split"]) == ("train", "valid")
    assert (out / "learning_curve.png").stat().st_size > 1000
    assert any((out / "rl").glob("checkpoint-*"))
    # memory per phase: the demo's own (SFT, goal selection, evaluations, RL) and, inside RL, each
    # training step's (log_memory in the RL command); the RL phase holds its steps' peaks
    mem = summary["memory"]
    phases = {r["phase"]: r for r in mem["phases"]}
    assert list(phases) == ["sft", "select", "eval", "rl"] and phases["eval"]["calls"] == 2 * 3
    assert all(r["rss_peak_gib"] > 0.1 for r in phases.values())
    assert "--log_memory" in cmd and {"rollout", "forward", "backward", "step"} <= set(mem["rl_steps"])
    assert mem["rl_steps"]["step"] <= phases["rl"]["rss_peak_gib"] + 1e-3 <= mem["overall_gib"] + 2e-3
    # `agentrl eval` of the demo's final checkpoint, with nothing but the tasks given, reads the
    # run's own settings and reproduces the demo's figures on both sets, so the report line's
    # "after" values are the final model's. Success alone can be 0 on both sides at this scale, so
    # the episode length and the invalid-action rate are compared too: both are non-zero here
    # (episodes run until the 15-turn limit or a win, most quick-demo actions are invalid), and an
    # eval that played other seeds, turn limits, prompts or tokens would change them
    final = out / "rl" / f"checkpoint-{pr['curve'][-1][0]}"
    # the warm start is evaluable the same way (its run record holds the recipe's episode keys):
    # `agentrl eval --checkpoint <out>/sft` gives the demo's "after SFT" figures
    for ck, split, tasks, want in ((out / "sft", "valid", ["--episodes", "12"], ho["before"]),
                                   (final, "valid", ["--episodes", "12"], ho["after"]),
                                   (final, "train", ["--seeds", ",".join(map(str, seeds))], pr["after"])):
        assert want["mean_length"] > 1 and want["invalid_rate"] > 0, (ck.name, split, want)
        ev = subprocess.run([sys.executable, "-m", "agentrl", "eval", "--checkpoint", str(ck), "--split", split,
                             *tasks, "--families", "depth2", "--out", str(out / f"eval_{split}.json")],
                            cwd=REPO, capture_output=True, text=True, timeout=900,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"})
        assert ev.returncode == 0, ev.stderr[-2000:]
        (got,) = json.loads((out / f"eval_{split}.json").read_text())
        for key in ("success", "mean_length", "invalid_rate"):
            assert got["all"][key] == pytest.approx(want[key], abs=1e-9), (ck.name, split, key)
