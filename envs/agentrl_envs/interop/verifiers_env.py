"""agentrl's envs for prime-intellect's verifiers (0.4.0: ``verifiers.v1``).

    import verifiers.v1 as vf
    from agentrl_envs.interop.verifiers_env import load_environment, run_episodes
    env = load_environment("agentrl/TextCraft-v0", num_tasks=64)      # a vf.Env
    # episodes against an OpenAI-style endpoint (e.g. `agentrl serve CHECKPOINT --port 8000`):
    episodes = asyncio.run(run_episodes("http://127.0.0.1:8000/v1", "model-id", "agentrl/TextCraft-v0",
                                        num_tasks=3, max_turns=10, sampling={"max_tokens": 64}))
    # or: agentrl-envs verifiers agentrl/TextCraft-v0 --base-url http://127.0.0.1:8000/v1 --model model-id
    # or verifiers' CLI: vf-eval agentrl-verifiers --env.taskset.env_id agentrl/TextCraft-v0 ...

verifiers 0.4 builds an environment from a taskset (the tasks) and an ``Env`` (how one task
becomes an episode), both found by the taskset's id: an installed module exporting them in
``__all__``. That module is ``agentrl_verifiers`` (shipped with agentrl-envs; id
``agentrl-verifiers``); the classes live here. As in verifiers' own TextArena taskset, the env
plays the user: the task's prompt is the env's first user message (its ``prompt`` at step 0),
each reply of the model is the env's action as it wrote it (the env parses it and applies its
penalty), the env's observation comes back as the next user turn (``turn_message``, as in
agentrl's trajectory mode), and the episode ends when the env says so. The reward is the env's
return (``agentrl_return``); ``won`` and ``env_steps`` go into the trace's info.

The model's side is verifiers' own: its ``null`` harness (a tool-less chat program that verifiers
launches once per model turn on the conversation so far) on its ``subprocess`` runtime, the
defaults of ``AgentrlEnvConfig.player``; the program's calls go through verifiers' interception
server, which records them in the trace and forwards them to the endpoint. ``run_episodes`` is
verifiers' eval runner on that config (what ``vf-eval`` runs). verifiers prepares the chat program
with uv and PyPI; ``chat_program_on_this_python`` hands it this interpreter instead (verifiers'
own dependencies are all the program needs), so an episode needs only the endpoint.

``Conversation`` is the env's side of that loop without verifiers (what ``AgentrlEnv.run``
drives).
"""

from __future__ import annotations

import os
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
    # The model only talks: verifiers' tool-less chat loop (the ``null`` harness), run as a host
    # process (the env needs no sandbox; verifiers' default runtime is a remote one)
    player: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())


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


def chat_program_on_this_python() -> str:
    """Let verifiers' subprocess runtime run its chat program (the ``null`` harness's) with this
    interpreter instead of a uv environment it would build from PyPI; returns the program's path.

    The runtime keeps the program at a path named by its text's digest and remembers which
    interpreter runs each path; ``prepare_uv_script`` only calls uv for a path it does not know.
    Every package the program declares is a dependency of verifiers itself, so the interpreter
    that imports verifiers can run it: this writes the program there and records this
    interpreter, which makes episodes need neither uv nor a network. Without it verifiers needs
    ``uv`` (it installs one with pip if missing) and PyPI the first time.
    """
    import hashlib
    import sys
    from pathlib import Path

    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    known = getattr(SubprocessRuntime, "_interpreters", None)
    if not isinstance(known, dict):  # a later verifiers keeps them elsewhere: say so, do not guess
        raise RuntimeError("verifiers' SubprocessRuntime has no interpreter table (this was written for "
                           "0.4.0); run with this_python=False to let it prepare the chat program with uv")
    path = Path(SubprocessRuntime.scripts_dir) / f"{hashlib.sha256(CHAT_PROGRAM_SOURCE.encode()).hexdigest()}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != CHAT_PROGRAM_SOURCE:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # atomic: another process may be reading it
        tmp.write_text(CHAT_PROGRAM_SOURCE)
        tmp.replace(path)
    known[str(path)] = sys.executable
    return str(path)


async def run_episodes(base_url: str, model: str, env_id: str = "agentrl/TextCraft-v0", *,
                       sampling: dict[str, Any] | None = None, max_turns: int | None = None,
                       api_key_var: str = "OPENAI_API_KEY", output_dir: str = "outputs",
                       this_python: bool = True, **taskset: Any) -> list[vf.Episode]:
    """One verifiers episode per task of ``env_id`` (the other ``AgentrlTasksetConfig`` fields
    as keywords), played by ``model`` at the OpenAI-style endpoint ``base_url``, through
    verifiers' own eval runner (what ``vf-eval`` runs): its interception server in front of the
    endpoint, the ``null`` harness's chat program in a subprocess, ``AgentrlEnv.run`` as the
    user, and the traces it writes under ``output_dir``. ``sampling`` is verifiers'
    ``SamplingConfig`` (temperature, top_p, max_tokens; other keys such as seed go to the
    endpoint as written); ``max_turns`` caps the model's turns; ``this_python``: see
    ``chat_program_on_this_python``. Nothing is pushed to Prime Intellect's platform."""
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    if this_python:
        chat_program_on_this_python()
    player = AgentrlEnvConfig().player.model_copy(update={"max_turns": max_turns})
    env = AgentrlEnvConfig(taskset={"id": TASKSET_ID, "env_id": env_id, **taskset}, player=player)
    config = EvalConfig(env=env, model=model, sampling=sampling or {}, push=False, rich=None, output_dir=output_dir,
                        client={"type": "eval", "base_url": base_url, "api_key_var": api_key_var})
    # the runner names its run in VF_RUN_ID for the processes it spawns and leaves it set; a later
    # call in this process would then stamp its programs with this run's id
    run_id = os.environ.get("VF_RUN_ID")
    try:
        return await run_eval(config)
    finally:
        if run_id is None:
            os.environ.pop("VF_RUN_ID", None)


def load_environment(env_id: str = "agentrl/TextCraft-v0", **taskset: Any):
    """verifiers' env for ``env_id`` (the other ``AgentrlTasksetConfig`` fields as keywords),
    built through verifiers' own loader."""
    config = AgentrlEnvConfig(taskset={"id": TASKSET_ID, "env_id": env_id, **taskset})
    return vf.load_environment(config)


__all__ = ["AgentrlEnv", "AgentrlEnvConfig", "AgentrlTask", "AgentrlTaskset", "AgentrlTasksetConfig",
           "Conversation", "chat_program_on_this_python", "load_environment", "run_episodes"]
