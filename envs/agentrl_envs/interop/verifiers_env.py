"""agentrl's envs for prime-intellect's verifiers (0.4.0: ``verifiers.v1``).

    import verifiers.v1 as vf
    from agentrl_envs.interop.verifiers_env import load_environment
    env = load_environment("agentrl/TextCraft-v0", num_tasks=64)      # a vf.Env
    # or, with verifiers' CLI: --env.taskset.id agentrl-verifiers --env.taskset.env_id agentrl/TextCraft-v0

verifiers 0.4 builds an environment from a taskset (the tasks) and an ``Env`` (how one task
becomes an episode), both found by the taskset's id: an installed module exporting them in
``__all__``. That module is ``agentrl_verifiers`` (shipped with agentrl-envs; id
``agentrl-verifiers``); the classes live here. As in verifiers' own TextArena taskset, the env
plays the user: the task's prompt is the env's first user message (its ``prompt`` at step 0),
each reply of the model is the env's action as it wrote it (the env parses it and applies its
penalty), the env's observation comes back as the next user turn (``turn_message``, as in
agentrl's trajectory mode), and the episode ends when the env says so. The reward is the env's
return (``agentrl_return``); ``won`` goes into the trace's info.

``Conversation`` is that loop without verifiers (what ``AgentrlEnv.run`` drives; the tests drive
it with the env's expert).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agentrl_envs.interop import missing_extra
from agentrl_envs.probe import make_env
from agentrl_envs.prompts import turn_message, user_prompt

try:
    import verifiers.v1 as vf
    from pydantic import Field
except ImportError as _e:  # pragma: no cover - the extra is installed wherever this is tested
    raise missing_extra("the verifiers adapter", "verifiers", _e) from None

TASKSET_ID = "agentrl-verifiers"


class Conversation:
    """One episode of an env as a conversation: ``first`` is the opening user message, ``reply``
    steps the env with the model's reply and returns the next user message (None once the
    episode is over)."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None, seed: int | None,
                 options: dict[str, Any] | None):
        self.env = make_env(env_id, env_kwargs)
        obs, self.info = self.env.reset(seed=seed, options=options)
        self.first = user_prompt(self.env.unwrapped, obs, self.info, [], 0, 0)
        self.steps, self.return_, self.won, self.done = 0, 0.0, False, False

    def reply(self, text: str) -> str | None:
        if self.done:
            return None
        obs, reward, terminated, truncated, info = self.env.step(text)
        self.steps += 1
        self.return_ += float(reward)
        self.won = bool(info.get("won", self.won))
        self.done = bool(terminated or truncated)
        return None if self.done else turn_message(self.env.unwrapped, obs, info, self.steps)

    def close(self) -> None:
        self.env.close()


class AgentrlTasksetConfig(vf.TasksetConfig):
    """Which env and which of its tasks (``--env.taskset.<field>``)."""

    env_id: str = "agentrl/TextCraft-v0"
    """A registered agentrl env id (or module:ID)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for gymnasium.make."""
    split: str = "train"
    """Reset option ``split`` of every task."""
    families: list[str] = Field(default_factory=list)
    """Reset option ``families`` (empty: all of the env's)."""
    seed_start: int = 0
    """The first task's seed; task i uses seed_start + i."""
    num_tasks: int = 100
    """How many tasks."""


class AgentrlData(vf.TaskData):
    """What an episode needs to replay a task: the env and its reset arguments."""

    env_id: str
    env_kwargs: dict[str, Any]
    seed: int
    options: dict[str, Any]


class AgentrlTask(vf.Task[AgentrlData]):
    pass


class AgentrlEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class AgentrlEnv(vf.Env[AgentrlEnvConfig]):
    """One task -> one episode: the env plays the user (module docstring)."""

    async def run(self, task, agents):
        d = task.data
        talk = Conversation(d.env_id, d.env_kwargs, d.seed, d.options)
        try:
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()  # the task's prompt is the env's first message
                while not segment.terminated:
                    message = talk.reply(segment.last_reply)
                    if message is None:
                        break
                    segment = await interaction.turn(message)
        finally:
            talk.close()
        trace = interaction.trace
        trace.record_reward("agentrl_return", talk.return_, 1.0)
        trace.info["won"] = talk.won
        trace.info["env_steps"] = talk.steps


class AgentrlTaskset(vf.Taskset[AgentrlTask, AgentrlTasksetConfig]):
    """``num_tasks`` seeded tasks of one env; each prompt is the env's opening message."""

    def load(self) -> Iterator[AgentrlTask]:
        c = self.config
        options: dict[str, Any] = {"split": c.split, **({"families": list(c.families)} if c.families else {})}
        for i in range(c.num_tasks):
            seed = c.seed_start + i
            talk = Conversation(c.env_id, c.env_kwargs, seed, options)
            talk.close()
            yield AgentrlTask(AgentrlData(name=f"{c.env_id}#{seed}", prompt=talk.first, env_id=c.env_id,
                                          env_kwargs=dict(c.env_kwargs), seed=seed, options=options), c.task)


def load_environment(env_id: str = "agentrl/TextCraft-v0", **taskset: Any):
    """verifiers' env for ``env_id`` (the other ``AgentrlTasksetConfig`` fields as keywords),
    built through verifiers' own loader."""
    config = AgentrlEnvConfig(taskset={"id": TASKSET_ID, "env_id": env_id, **taskset})
    return vf.load_environment(config)


__all__ = ["AgentrlEnv", "AgentrlEnvConfig", "AgentrlTask", "AgentrlTaskset", "AgentrlTasksetConfig",
           "Conversation", "load_environment"]
