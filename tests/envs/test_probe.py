"""The checks every entry point runs before an episode (agentrl_envs.probe) and the one reset-option
parser (agentrl_envs.base.parse_reset_options): one wording, one line, the valid choices named."""

from __future__ import annotations

import pytest
from agentrl_envs import ENV_SPECS, check_env_id, expert_trace, make_env, probe_task, registered_env_ids
from agentrl_envs.base import parse_reset_options

SPLITS = ("train", "valid")
FAMS = ("a", "b", "c")


def test_check_env_id_names_the_valid_ids():
    for env_id in ENV_SPECS:
        check_env_id(env_id)
    assert set(ENV_SPECS) <= set(registered_env_ids())
    with pytest.raises(ValueError) as e:
        check_env_id("agentrl/TextKraft-v0")
    msg = str(e.value)
    assert msg.startswith("unknown env id 'agentrl/TextKraft-v0' (did you mean 'agentrl/TextCraft-v0'?); valid: ")
    assert "\n" not in msg and all(i in msg for i in ENV_SPECS)
    assert "CartPole-v1" not in msg  # gymnasium's own ids are not a run's choices


def test_ids_a_module_registers_are_listed():
    from gymnasium.envs.registration import register, registry

    try:
        register(id="mine/Guess-v0", entry_point="agentrl_envs.textcraft:TextCraftEnv")
        assert "mine/Guess-v0" in registered_env_ids()
        with pytest.raises(ValueError, match=r"^unknown env id 'mine/Gues-v0' \(did you mean 'mine/Guess-v0'\?\); "
                           r"valid: .*mine/Guess-v0"):
            check_env_id("mine/Gues-v0")
    finally:
        registry.pop("mine/Guess-v0", None)


def test_probe_task_and_make_env():
    probe_task("agentrl/TextCraft-v0", {}, 0, {"split": "valid"})
    with pytest.raises(ValueError, match="^unknown env id 'nope'; valid: "):
        probe_task("nope", {}, 0, {})
    with pytest.raises(ValueError, match="^cannot make agentrl/TextCraft-v0 with env_kwargs .*prompt_style"):
        probe_task("agentrl/TextCraft-v0", {"prompt_style": "tiny"}, 0, {})
    with pytest.raises(ValueError, match="^cannot reset agentrl/TextCraft-v0 with task options .*: unknown split 'x'; valid: train, valid$"):
        probe_task("agentrl/TextCraft-v0", {}, 0, {"split": "x"})
    env = make_env("agentrl/TextCraft-v0", {"prompt_style": "compact"})
    trace = expert_trace(env, 3, {"split": "train"})
    assert trace[-1][2] and trace[-1][1] == 1.0 and trace[-1][4]["won"]
    assert len(expert_trace(env, 3, {"split": "train"}, max_steps=1)) == 2  # the reset and one step
    env.close()
    with pytest.raises(ValueError, match="^unknown env id"):
        make_env("agentrl/Nope-v0")


def test_parse_reset_options():
    assert parse_reset_options(None, SPLITS, FAMS) == ("train", ["a", "b", "c"])
    assert parse_reset_options({"split": "valid", "families": "b"}, SPLITS, FAMS) == ("valid", ["b"])
    assert parse_reset_options({"families": ("c", "a")}, SPLITS, FAMS) == ("train", ["c", "a"])
    aliases = {"split_aliases": {"dev": "valid"}, "family_aliases": {"long_a": "a"}}
    assert parse_reset_options({"split": "dev", "families": ["long_a"]}, SPLITS, FAMS, **aliases) == ("valid", ["a"])
    assert parse_reset_options({"task_id": 3}, SPLITS, FAMS, extra_keys=("task_id",)) == ("train", ["a", "b", "c"])


@pytest.mark.parametrize("options, message", [
    ({"level": 1, "goal": 2}, "unknown reset option(s) ['goal', 'level']; valid: split, families"),
    ({"split": "test"}, "unknown split 'test'; valid: train, valid"),
    ({"split": ["train"]}, "unknown split ['train']; valid: train, valid"),
    ({"families": ["d"]}, "unknown task family 'd'; valid: a, b, c"),
    ({"families": ["a", 7]}, "unknown task family 7; valid: a, b, c"),
    ({"families": []}, "families must not be empty; valid: a, b, c"),
    ({"families": 3}, "families must be a name or a list of names, got 3; valid: a, b, c"),
])
def test_bad_reset_options_one_wording(options, message):
    with pytest.raises(ValueError) as e:
        parse_reset_options(options, SPLITS, FAMS)
    assert str(e.value) == message


def test_bad_split_lists_the_aliases():
    with pytest.raises(ValueError) as e:
        parse_reset_options({"split": "x"}, SPLITS, FAMS, split_aliases={"dev": "valid"})
    assert str(e.value) == "unknown split 'x'; valid: train, valid, dev"
