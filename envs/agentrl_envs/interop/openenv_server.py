"""Any registered env behind OpenEnv's own server (``openenv-core`` 0.3.0), speaking its protocol.

    agentrl-envs serve agentrl/TextCraft-v0 --port 8000 [--max-concurrent 8]

OpenEnv's server (``create_fastapi_app``) gives each WebSocket session (``/ws``) its own
environment from a factory, runs ``reset``/``step`` there and answers with the observation; HTTP
``/reset`` and ``/step`` are stateless (a fresh env per request), ``/state``, ``/schema``,
``/metadata`` and ``/health`` describe the server. This module is the environment it serves:
``TextEnvEnvironment`` wraps one gymnasium env made with ``probe.make_env`` (the step limit
included), so an episode played through the server is the in-process episode, move for move.

* The action is the model's whole response (``TextAction.text``): the env parses it, so a
  malformed action gets the env's own message and penalty, exactly as in-process.
* The observation (``TextObservation``) carries the env's text, reward, ``terminated``,
  ``truncated`` and ``info``, plus what a trainer needs to build the next prompt where the env
  lives: the user prompt for history lengths 0..H (``prompts``, H = the ``history_length`` asked at
  reset, default the env's), the turn message of a growing conversation, and, when asked at reset,
  the expert's next action. The history those prompts read is the server's record of the episode
  (``agentrl_envs.prompts.history_entry``), the same one agentrl's rollout keeps.
* Bad requests fail with a message: a reset with bad options or argument types is 400, a step with
  no episode (HTTP ``/step`` is stateless; play over ``/ws``) or after the end is 409 (over ``/ws``
  both are an error message and the session goes on). An env that raises loses its episode: the
  reply is a 500 (an error message over ``/ws``) naming the exception, the env is rebuilt at the
  next reset, and the server and every other session go on.
* Sessions are apart: each has its own env. Env calls run on one thread for all sessions unless
  ``parallel`` (envs that wait on subprocesses, the SWE sandbox, gain from threads; pure-Python
  envs hold the GIL anyway, and one thread keeps any module-level state of an engine unshared).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from agentrl_envs.interop import missing_extra
from agentrl_envs.probe import first_line, make_env
from agentrl_envs.prompts import history_entry, turn_message, user_prompt

try:
    from openenv.core.env_server import Action, Environment, Observation, State
    from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata
    from pydantic import Field
except ImportError as _e:  # pragma: no cover - the extra is installed wherever this is tested
    raise missing_extra("agentrl-envs serve", "openenv", _e) from None

SERVER_NAME = "agentrl-envs"
"""``TextEnvState.server``: how a client tells one of our servers from another OpenEnv server."""


class TextAction(Action):
    """The model's response, as it wrote it: the env runs the body of its first well-formed
    ``<action>...</action>`` (or, for ToolReason, reads its tool call) and penalises a malformed one."""

    text: str = Field(description="the model's whole response for this turn")


class TextObservation(Observation):
    """One reset or step of an agentrl env (``reward``/``done`` are OpenEnv's own fields)."""

    text: str = Field(default="", description="the env's observation")
    info: dict[str, Any] = Field(default_factory=dict, description="the env's info dict (task, won, "
                                 "action_valid, admissible_actions, signatures, ...)")
    terminated: bool = Field(default=False, description="the episode ended in the env")
    truncated: bool = Field(default=False, description="the episode hit the step limit")
    prompts: list[str] = Field(default_factory=list, description="the next user prompt with the last h "
                               "(observation, action) pairs, h = 0..H; empty when the episode is over")
    prompt: str | None = Field(default=None, description="prompts[H]: the next user prompt")
    turn_message: str | None = Field(default=None, description="the next user message of a growing "
                                     "conversation (trajectory mode)")
    prompt_error: str | None = Field(default=None, description="why the prompts could not be built "
                                     "(the exception, as 'Type: message')")
    turn_error: str | None = Field(default=None, description="why the turn message could not be built")
    expert: str | None = Field(default=None, description="the expert's next action (when asked at reset)")


class TextEnvState(State):
    """``/state`` and the ``state`` message: which env this is and where its episode stands."""

    server: str = SERVER_NAME
    env_id: str = ""
    max_episode_steps: int | None = None
    history_length: int = 2
    seed: int | None = None
    done: bool = False


class BadRequest(ValueError):
    """A request whose arguments the env refuses (HTTP 400)."""


class NoEpisode(RuntimeError):
    """A step with no episode to play (HTTP 409)."""


class EnvCrash(RuntimeError):
    """The env raised: its episode is lost (HTTP 500)."""


class _Episode:
    """The server's record of one episode: what the next prompt and the next step need."""

    def __init__(self, seed: int | None, history_length: int, expert: bool):
        self.seed, self.history_length, self.expert = seed, history_length, expert
        self.obs, self.info = "", {}
        self.history: list[tuple[str, str]] = []
        self.steps = 0
        self.done = False


def _reset_args(seed, options, history_length, expert, default_h: int) -> tuple:
    """The reset arguments checked by type: a WebSocket reset reaches the env without OpenEnv's
    request validation, and a bad value must be a 400, not an env crash."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest(f"seed must be an integer or null, got {seed!r}")
    if options is not None and not isinstance(options, dict):
        raise BadRequest(f"options must be an object or null, got {type(options).__name__}")
    h = default_h if history_length is None else history_length
    if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= 64:
        raise BadRequest(f"history_length must be an integer in 0..64, got {history_length!r}")
    if not isinstance(expert, bool):
        raise BadRequest(f"expert must be true or false, got {expert!r}")
    return seed, options, h, expert


def _finite(x: float) -> float:
    """JSON has no NaN or infinity: such a reward would not survive the wire unchanged."""
    if not math.isfinite(x):
        raise EnvCrash(f"the env returned a non-finite reward {x!r}")
    return x


class TextEnvEnvironment(Environment):
    """One session's env (module docstring). ``for_env`` makes the class a server serves."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    REQUIRES_SINGLE_THREAD_EXECUTOR = True
    env_id: str = ""
    env_kwargs: dict[str, Any] = {}

    @classmethod
    def for_env(cls, env_id: str, env_kwargs: dict[str, Any] | None = None, parallel: bool = False) -> type:
        """The environment class of a server for ``env_id`` (OpenEnv's factory is a class: it reads
        the concurrency flags from it). Checks the id and the kwargs by making one env."""
        make_env(env_id, env_kwargs).close()
        name = env_id.rsplit("/", 1)[-1].split("-v")[0] + "Environment"
        return type(name, (cls,), {"env_id": env_id, "env_kwargs": dict(env_kwargs or {}),
                                   "REQUIRES_SINGLE_THREAD_EXECUTOR": not parallel})

    def __init__(self):
        super().__init__()
        self._env = make_env(self.env_id, self.env_kwargs)
        self._ep: _Episode | None = None
        self._lost: str | None = None
        """Why the last episode was lost (the env raised); the env is rebuilt at the next reset."""

    # --- OpenEnv's interface -------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, options: dict | None = None,
              history_length: int | None = None, expert: bool = False, **kwargs: Any) -> TextObservation:
        if kwargs:
            raise BadRequest(f"unknown reset argument(s) {sorted(kwargs)}; valid: seed, episode_id, "
                             "options, history_length, expert")
        seed, options, h, expert = _reset_args(seed, options, history_length, expert, self._default_h())
        if self._lost is not None:
            self._rebuild()
        try:
            obs, info = self._env.reset(seed=seed, options=options)
        except ValueError as e:  # bad options (split, families, task id): the request's fault
            raise BadRequest(f"cannot reset {self.env_id} with options {options}: {first_line(e)}") from None
        except Exception as e:
            raise self._crash("reset", e) from None
        self._ep = _Episode(seed, h, expert)
        self._ep.obs, self._ep.info = obs, info
        self._episode_id = episode_id
        return self._observation(obs, None, False, False, info)

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        ep = self._ep
        if ep is None:
            raise NoEpisode(self._lost or "no episode: reset first (HTTP /step is stateless: each request gets "
                            "a fresh env; play an episode over the /ws session)")
        if ep.done:
            raise NoEpisode("the episode is over: reset to play another")
        try:
            obs, reward, terminated, truncated, info = self._env.step(action.text)
        except Exception as e:
            raise self._crash("step", e) from None
        ep.history.append((ep.obs, history_entry(info, action.text)))
        ep.obs, ep.info, ep.steps = obs, info, ep.steps + 1
        ep.done = bool(terminated or truncated)
        return self._observation(obs, _finite(float(reward)), bool(terminated), bool(truncated), info)

    @property
    def state(self) -> TextEnvState:
        ep = self._ep
        return TextEnvState(env_id=self.env_id, max_episode_steps=self._max_steps(),
                            history_length=ep.history_length if ep else self._default_h(),
                            episode_id=getattr(self, "_episode_id", None), step_count=ep.steps if ep else 0,
                            seed=ep.seed if ep else None, done=ep.done if ep else False)

    def get_metadata(self) -> EnvironmentMetadata:
        doc = (type(self._env.unwrapped).__doc__ or "").strip().splitlines()
        return EnvironmentMetadata(name=self.env_id, description=doc[0] if doc else self.env_id,
                                   version="0.1.0", author="agentrl")

    def close(self) -> None:
        try:
            self._env.close()
        except Exception:  # closing is best effort: a broken env must not take the session down
            pass

    # --- machinery -----------------------------------------------------------------------------
    def _observation(self, obs: str, reward: float | None, terminated: bool, truncated: bool,
                     info: dict) -> TextObservation:
        done = terminated or truncated
        out = TextObservation(text=obs, reward=reward, done=done, terminated=terminated,
                              truncated=truncated, info=info)
        if not done:
            self._fill_next_turn(out)
        return out

    def _fill_next_turn(self, out: TextObservation) -> None:
        """The prompts and the turn message of the next turn, and the expert's move if asked. A
        builder that raises is reported as ``"Type: message"`` in ``prompt_error`` /
        ``turn_error``: the client raises it where the prompt is asked for (agentrl then ends that
        episode, as it does in-process)."""
        ep, env = self._ep, self._env.unwrapped
        try:
            out.prompts = [user_prompt(env, ep.obs, ep.info, ep.history, ep.steps, h)
                           for h in range(ep.history_length + 1)]
            out.prompt = out.prompts[-1]
        except Exception as e:
            out.prompt_error = f"{type(e).__name__}: {e}"
        try:
            out.turn_message = turn_message(env, ep.obs, ep.info, ep.steps)
        except Exception as e:
            out.turn_error = f"{type(e).__name__}: {e}"
        if ep.expert:
            try:
                out.expert = env.expert_action()
            except Exception as e:
                raise self._crash("expert_action", e) from None

    def _crash(self, call: str, e: BaseException) -> EnvCrash:
        self._lost = (f"env crashed in {call}: {type(e).__name__}: {first_line(e)}; the episode is lost, "
                      "reset to play another")
        self._ep = None
        return EnvCrash(self._lost)

    def _rebuild(self) -> None:
        """A fresh env after a crash: whatever state the old one was left in goes with it."""
        self.close()
        self._env = make_env(self.env_id, self.env_kwargs)
        self._lost = None

    def _default_h(self) -> int:
        return int(getattr(self._env.unwrapped, "history_length", 2))

    def _max_steps(self) -> int | None:
        spec = self._env.spec
        return spec.max_episode_steps if spec is not None else None


def make_app(env_id: str, env_kwargs: dict[str, Any] | None = None, max_concurrent: int = 8,
             session_timeout_s: float | None = None, parallel: bool = False):
    """The FastAPI app of a server for ``env_id``: OpenEnv's app and routes, our environment, and
    our errors mapped to HTTP statuses. Raises a one-line ValueError for a bad id or kwargs."""
    from openenv.core.env_server import create_fastapi_app

    if max_concurrent < 1:
        raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
    env_cls = TextEnvEnvironment.for_env(env_id, env_kwargs, parallel=parallel)
    app = create_fastapi_app(env_cls, TextAction, TextObservation, concurrency_config=ConcurrencyConfig(
        max_concurrent_envs=max_concurrent, session_timeout=session_timeout_s))
    app.title = f"{SERVER_NAME}: {env_id}"
    for exc, status in ((BadRequest, 400), (NoEpisode, 409), (EnvCrash, 500)):
        app.add_exception_handler(exc, functools.partial(_error_response, status))
    return app


async def _error_response(status: int, request, exc: Exception):
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content={"detail": str(exc)})


def serve(env_id: str, host: str = "127.0.0.1", port: int = 8000, env_kwargs: dict[str, Any] | None = None,
          max_concurrent: int = 8, session_timeout_s: float | None = None, parallel: bool = False,
          log_level: str = "warning") -> None:
    """Serve ``env_id`` until interrupted. Port 0 picks a free port; the line printed on start
    names the URL (a parent process reads it)."""
    import socket

    import uvicorn

    app = make_app(env_id, env_kwargs, max_concurrent, session_timeout_s, parallel)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # connections made once the line below is printed wait here for the loop
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, ws_max_size=64 << 20))
    print(f"{SERVER_NAME}: serving {env_id} at http://{host}:{bound} "
          f"(OpenEnv: /ws sessions, max {max_concurrent}; /reset /step /state /schema /health)", flush=True)
    server.run(sockets=[sock])
