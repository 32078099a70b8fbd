"""What the OpenEnv tests share: a real ``agentrl-envs serve`` subprocess on loopback, and the
scripted episodes that are played in-process and through a server and compared move for move."""

from __future__ import annotations

import pytest
from agentrl_envs.interop.local_server import LocalServer

openenv = pytest.importorskip("openenv.core.env_server", reason="needs the openenv extra of agentrl-envs")


class Server(LocalServer):
    """``agentrl-envs serve`` on a free loopback port (``agentrl_envs.interop.local_server``)."""


def scripted_responses(env, seed, options, n_max: int = 12) -> list[str]:
    """The responses of a scripted episode, worked out on ``env`` (in-process): a malformed
    response at step 1, a command no env accepts at step 2, the expert's actions otherwise (the
    expert recovers from both). ``env`` is left at the episode's end."""
    from agentrl_envs.actions import format_action

    env.reset(seed=seed, options=options)
    out = []
    for t in range(n_max):
        if t == 1:
            response = "I will think about it first."
        elif t == 2:
            response = format_action("fly to the moon")
        else:
            body = env.unwrapped.expert_action()
            if body is None:
                break
            response = format_action(body)
        out.append(response)
        if any(env.step(response)[2:4]):
            break
    return out


def play(env, seed, options, responses: list[str], history_length: int = 2) -> list[tuple]:
    """Reset ``env`` and play ``responses``; per move, what a trainer sees: the reset's (obs, info)
    or the step's 5-tuple, then the user prompts for h = 0..history_length and the turn message
    of the next turn (or the exception a builder raised, by type and text)."""
    from agentrl_envs.prompts import history_entry

    obs, info = env.reset(seed=seed, options=options)
    moves, history = [(obs, info, _prompts(env, obs, info, [], 0, history_length))], []
    for t, response in enumerate(responses):
        result = env.step(response)
        history.append((obs, history_entry(result[4], response)))
        obs, info = result[0], result[4]
        done = result[2] or result[3]
        moves.append((*result, None if done else _prompts(env, obs, info, history, t + 1, history_length)))
        if done:
            break
    return moves


def _prompts(env, obs, info, history, t, history_length):
    from agentrl_envs.prompts import turn_message, user_prompt

    out = []
    for h in range(history_length + 1):
        try:
            out.append(user_prompt(env.unwrapped, obs, info, history, t, h))
        except Exception as e:
            out.append(f"raised {type(e).__name__}: {e}")
    try:
        out.append(turn_message(env.unwrapped, obs, info, t))
    except Exception as e:
        out.append(f"raised {type(e).__name__}: {e}")
    return out
