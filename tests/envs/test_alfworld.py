"""ALFWorld env (default engine: native; TextWorld where a test reads its internals) with an offline generated game set.

Needs the ``alfworld`` extra (pip install alfworld==0.4.2 textworld==1.7.0). The module builds
one game per family and split (18 games) on first use and caches them in
``~/.cache/agentrl/alfworld/test-v<version>-seed0`` (base overridable with $AGENTRL_CACHE).
Runtime (2 shared cores, heavily loaded): generation on a cold cache 88 s (2 workers, ~2 s of
CPU per game), tests 27 s; ~2 min in all cold, ~30 s warm.
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

import agentrl_envs  # noqa: E402,F401  (registers agentrl/*)
import gymnasium as gym  # noqa: E402
from agentrl_envs.actions import format_action  # noqa: E402
from agentrl_envs.alfworld import generate as gen  # noqa: E402
from agentrl_envs.alfworld.env import NOTHING_HAPPENS, ALFWorldEnv, normalize_command  # noqa: E402
from agentrl_envs.alfworld.games import cache_base, ensure_generated, resolve_game_root  # noqa: E402
from agentrl_envs.base import MALFORMED_MESSAGE  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

FAMILY_NAMES = ["pick", "look", "clean", "heat", "cool", "pick2"]


@pytest.fixture(scope="module")
def game_root():
    root = os.path.join(cache_base(), f"test-v{gen.GENERATOR_VERSION}-seed0")
    return ensure_generated(root, per_family=1, valid_per_family=1, seed=0, workers=2,
                            progress=False)


@pytest.fixture(scope="module")
def env(game_root):
    e = ALFWorldEnv(data_dir=game_root)
    yield e
    e.close()


def play_expert(env, seed, options, limit=30):
    obs, info = env.reset(seed=seed, options=options)
    trace = [(obs, info)]
    for n in range(1, limit + 1):
        a = env.expert_action()
        assert a is not None and a in info["admissible_actions"], (a, obs)
        obs, r, term, trunc, info = env.step(format_action(a))
        trace.append((obs, info))
        assert info["action_valid"], (a, obs)
        if term:
            return r, n, info, trace
    return 0.0, limit, info, trace


# --- generation (no engine needed) -----------------------------------------------------------
def test_six_families_are_the_alfworld_task_types():
    # ALFWorld's TASK_TYPES 1..6 (alfworld-generate), independently listed here.
    assert gen.FAMILIES == {
        "pick": "pick_and_place_simple", "look": "look_at_obj_in_light",
        "clean": "pick_clean_then_place_in_recep", "heat": "pick_heat_then_place_in_recep",
        "cool": "pick_cool_then_place_in_recep", "pick2": "pick_two_obj_and_place"}


def test_scene_adds_receptacles_missing_from_openable_json():
    # FloorPlan1 (a kitchen): openable.json lists Cabinet/CounterTop/Drawer/Fridge/Microwave/
    # Shelf/Sink only, but objects.json has StoveBurner, Toaster, CoffeeMachine, GarbageCan.
    scene = gen.load_scene(1)
    assert scene.kind == "Kitchen"
    types = scene.receptacle_types
    for t in ("StoveBurner", "Toaster", "CoffeeMachine", "GarbageCan", "SinkBasin", "Fridge"):
        assert t in types, t
    assert len(scene.receptacles_of("StoveBurner")) == 4
    assert gen.load_scene(1).receptacles == scene.receptacles     # scene is a function of the plan


def test_problem_respects_pitfalls_and_is_deterministic():
    cache = {}
    for fam in FAMILY_NAMES:
        spec = gen.sample_spec(7, "train", fam, 0, 0, set(), cache)
        again = gen.sample_spec(7, "train", fam, 0, 0, set(), {})
        assert spec == again
        scene = cache[spec.floor_plan]
        problem, traj = gen.build_problem(spec, scene)
        assert gen.build_problem(spec, gen.load_scene(spec.floor_plan))[0] == problem
        p = spec.params
        assert traj["task_type"] == gen.FAMILIES[fam]
        assert scene.kind in {"pick": {"Kitchen", "LivingRoom", "Bedroom", "Bathroom"},
                              "pick2": {"Kitchen", "LivingRoom", "Bedroom", "Bathroom"},
                              "look": {"LivingRoom", "Bedroom"}, "clean": {"Kitchen", "Bathroom"},
                              "heat": {"Kitchen"}, "cool": {"Kitchen"}}[fam]
        # Which receptacle holds each object (from the problem text itself).
        where = dict(re.findall(r"\(inReceptacle (\S+) (\S+)\)", problem))
        rtype = dict(re.findall(r"\(receptacleType (\S+) (\S+)Type\)", problem))
        targets = [o for o in where if o.lower().startswith(p["object_target"].lower() + "_bar_")]
        assert len(targets) >= (2 if fam == "pick2" else 1)
        if p["parent_target"]:
            # the parent receptacle exists and no target starts inside one
            assert p["parent_target"] in rtype.values()
            assert all(rtype[where[o]] != p["parent_target"] for o in targets)
        if fam == "look":
            assert any(o.lower().startswith(p["toggle_target"].lower()) for o in where)
        tool = {"clean": "SinkBasin", "heat": "Microwave", "cool": "Fridge"}.get(fam)
        if tool:
            assert tool in rtype.values()


def test_valid_seen_tasks_are_disjoint_from_train():
    cache, used = {}, set()
    train = [gen.sample_spec(0, "train", f, s, 0, used, cache) for f in FAMILY_NAMES for s in range(3)]
    for t in train:
        used.add(t.key)
    seen = [gen.sample_spec(0, "valid_seen", f, s, 0, set(used), cache) for f in FAMILY_NAMES for s in range(3)]
    assert not {t.key for t in train} & {s.key for s in seen}
    unseen = [gen.sample_spec(0, "valid_unseen", f, 0, 0, set(), cache) for f in FAMILY_NAMES]
    # ALFRED's held-out floor plans: 1-6, 201-206, 301-306, 401-406
    assert all(u.floor_plan % 100 in range(1, 7) for u in unseen)
    assert all(t.floor_plan % 100 >= 7 for t in train + seen)


def test_bad_generation_arguments(tmp_path):
    with pytest.raises(ValueError, match="valid: pick, look"):
        gen.generate_game_set(str(tmp_path / "x"), 1, families=["sweep"], progress=False)
    with pytest.raises(ValueError, match="valid: train, valid_seen"):
        gen.generate_game_set(str(tmp_path / "x"), 1, splits=["test"], progress=False)


# --- the generated set --------------------------------------------------------------------------
def test_generated_set_covers_every_family_and_split(game_root):
    with open(os.path.join(game_root, "manifest.json")) as f:
        m = json.load(f)
    cov = gen.coverage(m)
    for split in ("train", "valid_seen", "valid_unseen"):
        assert all(cov[split].get(fam) == 1 for fam in FAMILY_NAMES), cov
    for g in m["games"]:
        with open(os.path.join(game_root, g["dir"], "game.tw-pddl")) as f:
            data = json.load(f)
        assert data["solvable"] is True and data["walkthrough"], g
        assert "UNKNOWN GOAL" not in data["grammar"]            # task text was filled in


# --- env ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_expert_wins_every_family(env, family):
    r, n, info, trace = play_expert(env, 0, {"split": "train", "families": [family]})
    assert info["won"] and r == 1.0 and info["task_family"] == family
    # the planner expert follows the walkthrough stored (and verified) at generation time
    with open(trace[0][1]["game_file"]) as f:
        assert n == len(json.load(f)["walkthrough"])


def test_planner_subproblem_keeps_goal_objects_only(env):
    from agentrl_envs.alfworld.engine import pddl_env
    from agentrl_envs.alfworld.planner import reduced_problem

    tw = ALFWorldEnv(data_dir=env.root, engine="textworld")
    obs, info = tw.reset(seed=0, options={"split": "train", "families": ["pick2"]})
    with open(os.path.join(os.path.dirname(info["game_file"]), "traj_data.json")) as f:
        target = json.load(f)["pddl_params"]["object_target"].lower()
    pe = pddl_env(tw._eng.tw)
    full = pe._game_data["pddl_problem"]
    small = reduced_problem(full, pe._pddl_state.facts)
    full_objs = re.findall(r"^\s*(\S+) - object\s*$", full, re.M)
    small_objs = re.findall(r"^\s*(\S+) - object\s*$", small, re.M)
    targets = [o for o in full_objs if o.lower().startswith(target + "_bar_")]
    assert len(full_objs) > len(targets) >= 2                   # distractors exist in the game
    assert sorted(small_objs) == sorted(o.lower() for o in targets)
    assert small.endswith(full[full.index("(:goal"):])           # same goal
    tw.close()


def test_expert_replans_after_a_deviation(env):
    obs, info = env.reset(seed=0, options={"split": "valid_unseen", "families": ["pick"]})
    first = env.expert_action()
    other = next(a for a in info["admissible_actions"] if a.startswith("go to") and a != first)
    env.step(format_action(other))                     # leave the plan: agent moved elsewhere
    r = 0.0
    for _ in range(30):
        a = env.expert_action()
        obs, r, term, _, info = env.step(format_action(a))
        assert info["action_valid"]
        if term:
            break
    assert info["won"] and r == 1.0


def test_reset_is_deterministic_and_first_observation(env):
    (o1, i1), (o2, i2) = (env.reset(seed=3, options={"split": "valid_seen"}) for _ in range(2))
    assert o1 == o2 and i1 == i2
    assert o1.startswith("You are in the middle of a room. Looking quickly around you, you see ")
    assert "Welcome" not in o1 and "Your task is to" not in o1
    assert i1["action_sig"] == "" and i1["won"] is False
    # seed picks game seed % n of the split's sorted list (6 games: one per family)
    games = env.games("valid_seen")
    assert len(games) == 6 and i1["game_file"] == games[3 % 6][0]
    assert env.reset(seed=9, options={"split": "valid_seen"})[1]["game_file"] == games[3][0]


def test_same_actions_same_trajectory(env):
    def run():
        obs, info = env.reset(seed=1, options={"split": "train", "families": ["clean"]})
        out = [(obs, info["state_sig"])]
        for a in ["look", "go to sinkbasin 1", "inventory", "examine sinkbasin 1"]:
            obs, r, term, trunc, info = env.step(format_action(a))
            out.append((obs, r, info["state_sig"], info["action_sig"]))
        return out
    assert run() == run()


def test_invalid_actions(env):
    obs, info = env.reset(seed=0, options={"split": "train", "families": ["pick"]})
    sig0 = info["state_sig"]
    obs, r, term, trunc, info = env.step("I will go to the fridge")            # no <action> tag
    assert obs == MALFORMED_MESSAGE and r == pytest.approx(-0.1) and not term
    assert info["action_valid"] is False and info["action"] is None
    assert info["action_sig"] == "invalid" and info["state_sig"] == sig0
    obs, r, term, trunc, info = env.step(format_action("fly to the moon"))    # not admissible
    assert obs == NOTHING_HAPPENS and r == pytest.approx(-0.1) and not term
    assert info["action_valid"] is False and info["action_sig"] == "invalid"
    assert info["state_sig"] == sig0
    # ALFWorld's own answer to an inadmissible command is the same text
    obs, r, term, trunc, info = env.step(format_action("Go  To " + info["admissible_actions"][0][6:] + "."))
    assert info["action_valid"] and r == 0.0 and obs.startswith("You arrive at ")
    assert info["action_sig"] == normalize_command(info["action"])


def test_state_signature_ignores_order_and_bookkeeping(env):
    # look/examine/inventory change no dynamic fact -> same state_sig; moving changes it.
    obs, info = env.reset(seed=0, options={"split": "train", "families": ["look"]})
    s0 = info["state_sig"]
    for a in ["look", "inventory", "help"]:
        assert env.step(format_action(a))[4]["state_sig"] == s0
    go = [a for a in info["admissible_actions"] if a.startswith("go to")]
    s1 = env.step(format_action(go[0]))[4]["state_sig"]
    s2 = env.step(format_action(go[1]))[4]["state_sig"]
    s1_again = env.step(format_action(go[0]))[4]["state_sig"]
    assert len({s0, s1, s2}) == 3 and s1_again == s1


def test_train_and_valid_games_are_disjoint(env):
    train = {g for g, _ in env.games("train")}
    seen = {g for g, _ in env.games("valid")}                  # "valid" = valid_seen
    unseen = {g for g, _ in env.games("valid_unseen")}
    assert len(train) == len(seen) == len(unseen) == 6
    assert not (train & seen) and not (train & unseen) and not (seen & unseen)

    def task(g):
        with open(os.path.join(os.path.dirname(g), "traj_data.json")) as f:
            t = json.load(f)
        return (t["scene"]["floor_plan"], t["task_type"], json.dumps(t["pddl_params"], sort_keys=True))
    assert not {task(g) for g in train} & {task(g) for g in seen}


def test_prompt_holds_task_and_admissible_actions(env):
    obs, info = env.reset(seed=0, options={"split": "train", "families": ["heat"]})
    p = env.prompt(obs, info, [], 0)
    assert f"Your task: {info['task']}" in p and "Admissible actions: " in p
    assert "go to microwave 1" in p and "<action>" in p and "You have taken" not in p


def test_bad_options(env):
    # one wording for every env (agentrl_envs.base.parse_reset_options)
    with pytest.raises(ValueError, match="^unknown split 'test'; valid: train, valid_seen, valid_unseen, valid"):
        env.reset(seed=0, options={"split": "test"})
    with pytest.raises(ValueError, match="^unknown task family 'sweep'; valid: pick, look, clean, heat, cool, pick2$"):
        env.reset(seed=0, options={"families": ["sweep"]})
    with pytest.raises(ValueError, match="^families must not be empty; valid: pick, look"):
        env.reset(seed=0, options={"families": []})
    with pytest.raises(ValueError, match=r"^unknown reset option\(s\) \['level'\]; valid: split, families, game_file$"):
        env.reset(seed=0, options={"level": 3})
    with pytest.raises(ValueError, match="valid: planner, handcoded"):
        ALFWorldEnv(data_dir=env.root, expert_type="oracle")


def test_game_resolution(game_root, tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("AGENTRL_ALFWORLD_DIR", game_root)
    assert resolve_game_root() == game_root
    monkeypatch.delenv("AGENTRL_ALFWORLD_DIR")
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))           # empty cache, no generation
    with pytest.raises(FileNotFoundError, match="python -m agentrl_envs.alfworld.generate"):
        resolve_game_root(auto_generate=False)


def test_check_env_and_registration(game_root, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("AGENTRL_ALFWORLD_DIR", game_root)
    e = gym.make("agentrl/ALFWorld-v0")
    assert e.spec.max_episode_steps == 50
    check_env(e.unwrapped, skip_render_check=True)
    e.close()


def test_handcoded_expert_runs(game_root):
    # ALFWorld's own AlfredExpert(handcoded): explores, so only check it acts admissibly and wins
    # the small look game (4 planner steps) within the 50-step budget.
    e = ALFWorldEnv(data_dir=game_root, expert_type="handcoded")
    r, n, info, _ = play_expert(e, 0, {"split": "train", "families": ["look"]}, limit=50)
    assert info["won"] and r == 1.0
    e.close()


def test_reused_env_plays_like_a_fresh_one(env, game_root):
    # envs persist across episodes (reset, not rebuilt): after other episodes, one left half
    # played on another game, the module's env replays a game as a new instance does
    from agentrl_envs import expert_trace
    from agentrl_envs.alfworld.engine import pddl_env

    expert_trace(env, 0, {"split": "train", "families": ["clean"]}, max_steps=3)
    options = {"split": "train", "families": ["look"]}
    reused = expert_trace(env, 0, options)
    fresh = ALFWorldEnv(data_dir=game_root)
    tw1, tw2 = (ALFWorldEnv(data_dir=game_root, engine="textworld") for _ in range(2))
    try:
        assert expert_trace(fresh, 0, options) == reused
        assert reused[-1][1] == 1.0 and reused[-1][4]["won"]
        # on TextWorld, the game's parsed logic is shared by every env of the process (GameCache)
        assert expert_trace(tw1, 0, options) == reused
        tw2.reset(seed=0, options=options)
        assert pddl_env(tw1._eng.tw)._logic is pddl_env(tw2._eng.tw)._logic
    finally:
        for e in (fresh, tw1, tw2):
            e.close()


def test_game_cache_changes_nothing(game_root, monkeypatch):
    # the shared parses (GameCache) are pure memoization: a game plays the same without them,
    # and leaving the context restores the library's own functions
    import fast_downward
    from agentrl_envs import expert_trace
    from agentrl_envs.alfworld import engine
    from textworld.envs.pddl import logic
    from textworld.logic import Rule

    originals = (fast_downward.pddl2sas, logic.GameLogic, Rule.__dict__["parse_conjunctive_query"])
    options = {"split": "valid_seen", "families": ["heat"]}
    cached_env = ALFWorldEnv(data_dir=game_root, engine="textworld")
    cached = expert_trace(cached_env, 0, options)
    cached_env.close()
    assert (fast_downward.pddl2sas, logic.GameLogic, Rule.__dict__["parse_conjunctive_query"]) == originals
    monkeypatch.setattr(engine.GameCache, "__enter__", lambda self: self)
    monkeypatch.setattr(engine.GameCache, "__exit__", lambda self, *exc: False)
    plain_env = ALFWorldEnv(data_dir=game_root, engine="textworld")
    try:
        assert expert_trace(plain_env, 0, options) == cached
    finally:
        plain_env.close()
    assert cached[-1][1] == 1.0 and len(cached) > 4
