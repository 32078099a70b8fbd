"""What the OpenEnv tests share: a real ``agentrl-envs serve`` subprocess on loopback, and the
scripted episodes that are played in-process and through a server and compared move for move."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

openenv = pytest.importorskip("openenv.core.env_server", reason="needs the openenv extra of agentrl-envs")


class Server:
    """``python -m agentrl_envs serve ...`` on a free loopback port; ``url`` once it listens."""

    def __init__(self, env_id: str, *args: str, timeout: float = 240.0):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen([sys.executable, "-m", "agentrl_envs", "serve", env_id, "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.url = None
        deadline, lines = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "serving" in line:
                self.url = line.split(" at ", 1)[1].split()[0]
                return
        self.stop()
        raise RuntimeError(f"server for {env_id} did not start:\n{''.join(lines)}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc.stdout.close()


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
