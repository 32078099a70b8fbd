"""Each env's way of resuming an episode in flight (``TextEnv.resume_kind``, docs/training.md):
a ``snapshot`` env taken mid-episode and set on a fresh env (reset with the episode's seed and
options) plays the rest of the episode as the original does, step for step (observation, reward,
terminated, truncated, info), the step limit included; a ``replay`` env does the same when its
responses are stepped again after a reset. The kinds each env declares are the docs' table.

Runtime: ~5 s (ALFWorld's native engine: +~30 s the first time its test games are generated).
"""

from __future__ import annotations

import importlib.util
import random

import pytest
from agentrl_envs.base import restore_in_flight
from agentrl_envs.probe import make_env


def _walk(env, seed: int, n: int) -> list[str]:
    """``n`` responses: admissible commands where the env lists them (seeded), some malformed."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        adm = env.unwrapped.admissible_actions() or ["inventory", "get 1 stick", "north"]
        out.append("no tags here" if k % 4 == 3 else f"<action>{rng.choice(adm)}</action>")
        env.step(out[-1])
    return out


def _same_rest(env_id: str, kwargs: dict, seed: int, options: dict, cut: int, rest: int, snapshot: bool):
    a = make_env(env_id, kwargs)
    a.reset(seed=seed, options=options)
    done = _walk(a, seed, cut)
    b = make_env(env_id, kwargs)
    b.reset(seed=seed, options=options)
    if snapshot:
        restore_in_flight(b, a.unwrapped.snapshot())
    else:
        for r in done:
            b.step(r)
    assert b.unwrapped.render() == a.unwrapped.render()
    rng = random.Random(seed + 1)
    for _ in range(rest):
        adm = a.unwrapped.admissible_actions() or ["inventory", "get 1 stick"]
        r = f"<action>{rng.choice(adm)}</action>"
        ra, rb = a.step(r), b.step(r)
        assert ra == rb, (env_id, ra, rb)
        if ra[2] or ra[3]:
            break


@pytest.mark.parametrize("env_id, kwargs, options", [
    ("agentrl/TextCraft-v0", {"prompt_style": "compact"}, {}),
    ("agentrl/FiniteMDP-v0", {"family": "recurrent", "knobs": {"slip": 0.3}}, {}),
])
@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "replay"])
def test_a_snapshot_or_a_replay_plays_the_rest_of_the_episode_as_the_original(env_id, kwargs, options, snapshot):
    env = make_env(env_id, kwargs)
    assert env.unwrapped.resume_kind == "snapshot"
    for seed in (0, 3, 11):
        _same_rest(env_id, kwargs, seed, options, cut=3, rest=8, snapshot=snapshot)


def test_the_step_limit_counts_the_restored_steps():
    # TextCraft's registered limit is 30: restored at step 29, the next step is truncated
    a = make_env("agentrl/TextCraft-v0", {"prompt_style": "compact"})
    a.reset(seed=1)
    for _ in range(29):
        a.step("<action>inventory</action>")
    b = make_env("agentrl/TextCraft-v0", {"prompt_style": "compact"})
    b.reset(seed=1)
    restore_in_flight(b, a.unwrapped.snapshot())
    assert a.step("<action>inventory</action>")[3] is True
    assert b.step("<action>inventory</action>")[3] is True


@pytest.mark.parametrize("workers", [0, 1])
def test_env_batches_snapshot_and_restore_their_slots(workers):
    """The env batches' optional ``snapshot_many`` / ``restore_many`` (a worker process's envs too):
    slot 0 mid-episode set on slot 1 plays on as slot 0 does."""
    from agentrl.rollout.env_pool import LocalEnvs, WorkerEnvs

    envs = (WorkerEnvs("agentrl/TextCraft-v0", {"prompt_style": "compact"}, 2, workers=workers) if workers
            else LocalEnvs("agentrl/TextCraft-v0", {"prompt_style": "compact"}, 2))
    try:
        envs.reset_many([(0, 5, {})])
        for _ in range(2):  # the expert's moves: the inventory fills
            envs.step_many([(0, f"<action>{envs.expert_actions([0])[0]}</action>")])
        (kind, snap), = envs.snapshot_many([0])
        assert kind == "snapshot" and snap["steps"] == 2
        assert envs.restore_many([(1, 5, {}, snap)]) == [None]
        a, b = envs.step_many([(0, "<action>inventory</action>"), (1, "<action>inventory</action>")])
        assert a == b and a[0] != "Inventory: nothing."
    finally:
        envs.close()


def test_each_env_declares_how_it_resumes():
    """The table of docs/training.md ("Resume and episodes in flight"), env by env."""
    from agentrl_envs.math_answer import MathAnswerEnv
    from agentrl_envs.mdp import FiniteMDPEnv
    from agentrl_envs.openenv_client import OpenEnvTextEnv
    from agentrl_envs.swe import SWEEnv
    from agentrl_envs.textcraft import TextCraftEnv
    from agentrl_envs.toolreason import ToolReasonEnv
    from agentrl_envs.webshop import WebShopEnv

    assert TextCraftEnv.resume_kind == FiniteMDPEnv.resume_kind == "snapshot"
    assert WebShopEnv.resume_kind == ToolReasonEnv.resume_kind == MathAnswerEnv.resume_kind == "replay"
    assert OpenEnvTextEnv.resume_kind == "restart"
    assert SWEEnv.resume_kind == "replay"
    mixed = make_env("agentrl/Mixed-v0", {"envs": [{"id": "agentrl/TextCraft-v0", "weight": 1},
                                                   {"id": "agentrl/FiniteMDP-v0", "weight": 1}]})
    mixed.reset(seed=0)
    assert mixed.unwrapped.resume_kind == "snapshot"


@pytest.mark.alfworld
def test_alfworld_native_snapshot_plays_the_rest_as_the_original():
    if importlib.util.find_spec("alfworld") is None or importlib.util.find_spec("textworld") is None:
        pytest.skip("alfworld extra not installed")
    from agentrl_envs.alfworld.env import ALFWorldEnv
    from test_alfworld_native import game_set_root

    root = game_set_root()
    env = ALFWorldEnv(engine="native", data_dir=root)
    env.reset(seed=0)
    assert env.resume_kind == "snapshot"
    for seed in (0, 1):
        _same_rest("agentrl/ALFWorld-v0", {"engine": "native", "data_dir": root}, seed, {}, cut=4, rest=10,
                   snapshot=True)
