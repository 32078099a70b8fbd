"""agentrl's envs for verifiers 0.4 (``agentrl_envs.interop.verifiers_env``, taskset id
``agentrl-verifiers``).

verifiers builds the env through its own loader here (the taskset found by its id, the ``Env``
subclass the module exports), and the loop that ``AgentrlEnv.run`` drives (``Conversation``) is
played by the env's expert and compared with the env stepped directly. Real verifiers episodes,
with a model served by ``agentrl serve`` behind verifiers' harness, are in
``test_verifiers_episode.py``.
"""

from __future__ import annotations

import pytest
from agentrl_envs.actions import format_action
from agentrl_envs.probe import make_env
from agentrl_envs.prompts import turn_message, user_prompt

vf = pytest.importorskip("verifiers.v1", reason="needs the verifiers extra of agentrl-envs")


def test_verifiers_loads_the_env_and_its_tasks_through_its_own_loader():
    from agentrl_envs.interop.verifiers_env import AgentrlEnv, load_environment

    env = load_environment("agentrl/TextCraft-v0", num_tasks=3, seed_start=5, families=["depth2"])
    assert isinstance(env, AgentrlEnv) and isinstance(env, vf.Env)
    tasks = list(env.taskset)
    assert [t.data.seed for t in tasks] == [5, 6, 7] and [t.data.idx for t in tasks] == [0, 1, 2]
    local = make_env("agentrl/TextCraft-v0")
    for t in tasks:  # each task's prompt is the env's first user message for its seed
        obs, info = local.reset(seed=t.data.seed, options={"split": "train", "families": ["depth2"]})
        assert t.data.prompt == user_prompt(local.unwrapped, obs, info, [], 0, 0)
        assert t.data.options == {"split": "train", "families": ["depth2"]}
    assert vf.load_environment(env.config).taskset.config.env_id == "agentrl/TextCraft-v0"


def test_a_conversation_is_the_env_episode():
    """The expert's replies (a malformed one at turn 1) through ``Conversation``: each next user
    message is the env's turn message, the return is the sum of its rewards, the episode ends when
    the env ends it."""
    from agentrl_envs.interop.verifiers_env import Conversation

    talk = Conversation("agentrl/TextCraft-v0", None, 3, {"split": "train"})
    env = make_env("agentrl/TextCraft-v0")
    obs, info = env.reset(seed=3, options={"split": "train"})
    assert talk.first == user_prompt(env.unwrapped, obs, info, [], 0, 0)
    total, t, message = 0.0, 0, ""
    while message is not None:
        body = env.unwrapped.expert_action()
        reply = "let me think" if t == 1 else format_action(body)
        message = talk.reply(reply)
        obs, reward, term, trunc, info = env.step(reply)
        total, t = total + reward, t + 1
        assert message == (None if term or trunc else turn_message(env.unwrapped, obs, info, t))
    # TextCraft pays 1 for the goal, and its penalty for the malformed reply is 0.1
    assert talk.won and talk.steps == t and talk.return_ == pytest.approx(total) == pytest.approx(1.0 - 0.1)
    assert talk.reply("<action>inventory</action>") is None and talk.steps == t
    talk.close()
