"""The native ALFWorld engine against the TextWorld stack, move for move.

Every game is played on two ``ALFWorldEnv``s, ``engine="native"`` and ``engine="textworld"``
(the reference: TextWorld's PddlEnv -> AlfredDemangler -> AlfredInfos), with the same actions:
the stored walkthrough (the planner's plan), and seeded random walks over the admissible
commands mixed with inadmissible commands, malformed responses (no ``<action>`` tag) and
re-spelled commands ("Go  To Sofa 1."). After every reset and step the observation, reward,
terminated, truncated and every info field must be equal, and so must the engines' full fact
sets (TextWorld's ``not_`` facts included: the planner's reduced problem is written from them).
The planner expert is compared too: after a deviation both engines replan (Fast Downward on
the reduced problem) and must give the same plan, followed to the end.

The normal suite plays a sample (one game per family of the test set, one walk each, the
expert on two games: ~25 s of CPU). Every shipped game (the test set and the default generated
set: the walkthrough, two 30-step walks and the expert from a deviation on each, ~15 min of CPU,
nearly all of it TextWorld's) is played by ``make test-alfworld-native`` (``AGENTRL_ALFWORLD_FULL=1``; the
test is also marked slow).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random

import pytest

pytestmark = pytest.mark.alfworld

if importlib.util.find_spec("alfworld") is None or importlib.util.find_spec("textworld") is None:
    pytest.skip("alfworld extra not installed (pip install alfworld==0.4.2 textworld==1.7.0)",
                allow_module_level=True)

from agentrl_envs.actions import format_action  # noqa: E402
from agentrl_envs.alfworld import generate as gen  # noqa: E402
from agentrl_envs.alfworld.env import ALFWorldEnv  # noqa: E402
from agentrl_envs.alfworld.games import (  # noqa: E402
    DEFAULT_PER_FAMILY,
    DEFAULT_SEED,
    DEFAULT_VALID_PER_FAMILY,
    cache_base,
    default_generated_root,
    ensure_generated,
    list_games,
)
from agentrl_envs.alfworld.native import NativeEngine, display_list  # noqa: E402

SPLITS = ("train", "valid_seen", "valid_unseen")
BAD_COMMANDS = ("fly to the moon", "take moon 1 from sky 1", "go to", "open", "examine nothing 7",
                "", "inventory please")


def game_set_root() -> str:
    return ensure_generated(os.path.join(cache_base(), f"test-v{gen.GENERATOR_VERSION}-seed0"),
                            per_family=1, valid_per_family=1, seed=0, workers=2, progress=False)


def all_games(root: str) -> list[str]:
    return [g for split in SPLITS for g, _ in list_games(root, split)]


@pytest.fixture(scope="module")
def engines():
    pair = ALFWorldEnv(engine="native", data_dir="."), ALFWorldEnv(engine="textworld", data_dir=".")
    yield pair
    for e in pair:
        e.close()


def facts_of(env) -> list[str]:
    """Full fact set of the engine playing ``env``'s game, as sorted text."""
    eng = env._eng
    if isinstance(eng, NativeEngine):
        return sorted(f"{p}({','.join(a)})" for p, s in eng.facts.items() for a in s)
    return sorted(f"{p.name}({','.join(v.name for v in p.arguments)})" for p in eng.state["_facts"])


def same(native, reference, where):
    assert native == reference, where


def random_action(rng: random.Random, admissible: list[str]) -> str:
    """A model-like response: mostly an admissible command, sometimes an inadmissible or
    re-spelled one, sometimes no ``<action>`` tag at all."""
    u = rng.random()
    if u < 0.70:
        return format_action(rng.choice(admissible))
    if u < 0.80:
        return format_action(rng.choice(BAD_COMMANDS))
    if u < 0.88:
        cmd = rng.choice(admissible)
        return format_action(cmd.title().replace(" ", "  ", 1) + ".")
    if u < 0.94:
        return rng.choice(admissible)                       # malformed: no tag
    return rng.choice(["<action></action>", "<action>look", "I think I should look around."])


def play_both(native: ALFWorldEnv, reference: ALFWorldEnv, game: str, actions, seed: int = 0):
    """Reset both envs on ``game`` and play ``actions`` (a callable: step, admissible -> response
    or None to stop); compare everything after each reset/step. Returns the steps played."""
    options = {"game_file": game}
    out_n, out_r = native.reset(seed=seed, options=options), reference.reset(seed=seed, options=options)
    same(out_n, out_r, (game, "reset"))
    same(facts_of(native), facts_of(reference), (game, "reset facts"))
    info = out_n[1]
    for t in range(50):
        response = actions(t, info["admissible_actions"])
        if response is None:
            return t
        out_n, out_r = native.step(response), reference.step(response)
        same(out_n, out_r, (game, t, response))
        same(facts_of(native), facts_of(reference), (game, t, response, "facts"))
        info = out_n[4]
        if out_n[2] or out_n[3]:
            return t + 1
    return t + 1


def walkthrough_of(game: str) -> list[str]:
    with open(game) as f:
        return list(json.load(f)["walkthrough"])


def check_walkthrough(engines, game):
    plan = walkthrough_of(game)
    n = play_both(*engines, game, lambda t, adm: format_action(plan[t]) if t < len(plan) else None)
    assert n == len(plan) and engines[0]._eng.won and engines[1]._eng.won


def check_random_walk(engines, game, seed, steps):
    rng = random.Random(f"{game}|{seed}")
    play_both(*engines, game, lambda t, adm: random_action(rng, adm) if t < steps else None, seed)


def check_expert_after_deviation(engines, game, seed):
    """A few random moves, then the expert to the end: both envs replan and must agree."""
    rng = random.Random(f"expert|{game}|{seed}")
    native, reference = engines

    def act(t, adm):
        if t < 3:
            return format_action(rng.choice(adm))
        a_n, a_r = native.expert_action(), reference.expert_action()
        assert a_n == a_r, (game, t)
        return None if a_n is None else format_action(a_n)

    play_both(native, reference, game, act, seed)


# --- unit checks ----------------------------------------------------------------------------------
def test_display_list_is_the_grammar_list():
    # alfred.twl2: list_empty "nothing", list_separator ", ", list_last_separator ", and "
    assert display_list([]) == "nothing"
    assert display_list(["a x"]) == "a x"
    assert display_list(["a x", "a y"]) == "a x, and a y"
    assert display_list(["a x", "a y", "a z"]) == "a x, a y, and a z"


def test_demangled_names():
    # sorted ids: apple_bar_1 < apple_bar_2; the base "apple" has 2 instances handed out from the
    # top, so the first sorted id is "apple 2"; an id holding "basin" gets it appended to its base;
    # an id without "_bar_" keeps its text and an empty number ("agent1 ")
    from agentrl_envs.alfworld.compiled import demangle

    assert demangle(["apple_bar_2", "agent1", "apple_bar_1", "sink_bar__minus_01_dot_2_bar_sinkbasin"]) == {
        "apple_bar_1": "apple 2", "apple_bar_2": "apple 1", "agent1": "agent1 ",
        "sink_bar__minus_01_dot_2_bar_sinkbasin": "sinkbasin 1"}


def test_goal_pins_change_no_verdict(monkeypatch):
    # the goal check enumerates only pinned values; on every state of walkthroughs followed by
    # random moves it must agree with enumerating every object of each type
    from agentrl_envs.alfworld import compiled

    for game_file in sample_games():
        eng = NativeEngine()
        eng.load(game_file)
        with open(game_file) as f:
            problem = json.load(f)["pddl_problem"]
        goal = next(p for p in compiled.parse_sexp(problem)[0][1:] if p[0] == ":goal")[1]
        with monkeypatch.context() as m:
            m.setattr(compiled, "_pins", lambda body: [])
            brute = compiled.compile_goal(goal, eng.game.objects_of_type)
        eng.reset()
        rng, plan, verdicts = random.Random(0), walkthrough_of(game_file), set()
        for _ in range(len(plan) + 20):
            eng.step(plan.pop(0) if plan else rng.choice(eng.admissible))
            assert brute(eng.facts) == eng.won
            verdicts.add(eng.won)
        assert verdicts == {True, False}        # the walk was lost, then won


def test_unsupported_game_falls_back_to_textworld(tmp_path, engines):
    # a grammar the native engine does not implement: the env plays the game on TextWorld
    game = all_games(game_set_root())[0]
    with open(game) as f:
        data = json.load(f)
    data["grammar"] = data["grammar"].replace("You arrive at {r.name}.", "You reach {r.name}.")
    alt = tmp_path / "game.tw-pddl"
    alt.write_text(json.dumps(data))
    (tmp_path / "traj_data.json").write_text(
        open(os.path.join(os.path.dirname(game), "traj_data.json")).read())
    env = ALFWorldEnv(engine="native", data_dir=".")
    try:
        with pytest.warns(UserWarning, match="played on TextWorld"):
            env.reset(seed=0, options={"game_file": str(alt)})
        go = next(a for a in env.admissible_actions() if a.startswith("go to"))
        assert env.step(format_action(go))[0].startswith("You reach ")
        assert not isinstance(env._eng, NativeEngine)
    finally:
        env.close()


def test_env_bench_benches_or_skips_every_env(capsys, monkeypatch):
    # `agentrl bench envs`: ALFWorld per engine; an env without an expert (MathAnswer)
    # is a row with its reason, not a crash
    from agentrl.benchmarks import main as bench_main

    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("AGENTRL_ALFWORLD_DIR", game_set_root())
    ids = "agentrl/ALFWorld-v0,agentrl/MathAnswer-v0"
    assert bench_main(["envs", "--envs", ids, "--episodes", "2", "--alfworld-engines", "native",
                       "--fleet", "2", "--json"]) == 0
    rows = {r["env"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert set(rows) == {"agentrl/ALFWorld-v0[native]", "agentrl/MathAnswer-v0"}
    alf = rows["agentrl/ALFWorld-v0[native]"]
    assert alf["expert_win_rate"] == 1.0 and alf["steps"] > 0 and alf["fleet_create_reset_s"] > 0
    assert rows["agentrl/MathAnswer-v0"]["skipped"] == (
        "MathAnswerEnv has no expert_action (nothing to drive its steps)")
    assert bench_main(["envs", "--alfworld-engines", "fast"]) == 2
    assert "unknown ALFWorld engine(s) ['fast']; valid: native, textworld" in capsys.readouterr().err


def test_bad_engine_name():
    with pytest.raises(ValueError, match="^unknown engine 'fast'; valid: native, textworld$"):
        ALFWorldEnv(engine="fast")


# --- differential: a sample in the normal suite ----------------------------------------------------
def sample_games() -> list[str]:
    root = game_set_root()
    return [g for g, _ in list_games(root, "train")]          # one game per family


@pytest.mark.parametrize("index", range(6))
def test_sample_walkthrough_and_random_walk(engines, index):
    game = sample_games()[index]
    check_walkthrough(engines, game)
    check_random_walk(engines, game, seed=0, steps=25)


@pytest.mark.parametrize("index", [0, 2])
def test_sample_expert_replans_alike(engines, index):
    check_expert_after_deviation(engines, sample_games()[index], seed=0)


# --- differential: every shipped game (slow) --------------------------------------------------------
FULL = bool(os.environ.get("AGENTRL_ALFWORLD_FULL"))


def shipped_games() -> list[str]:
    default = ensure_generated(default_generated_root(), DEFAULT_PER_FAMILY, DEFAULT_VALID_PER_FAMILY,
                               DEFAULT_SEED, workers=2, progress=False)
    return all_games(game_set_root()) + all_games(default)


def test_shipped_game_count():
    # the test set (1 game per family and split) and the default set (4 train, 2+2 valid per family)
    if not FULL:
        pytest.skip("counts the default set, built by make test-alfworld-native")
    assert len(shipped_games()) == 18 + 48


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="every shipped game on both engines (~15 min of CPU): "
                                     "make test-alfworld-native")
@pytest.mark.parametrize("index", range(18 + 48))
def test_every_shipped_game_plays_alike(engines, index):
    game = shipped_games()[index]
    check_walkthrough(engines, game)
    for seed in range(2):
        check_random_walk(engines, game, seed=seed, steps=30)
    check_expert_after_deviation(engines, game, seed=0)
