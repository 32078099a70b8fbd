"""Any OpenEnv server as a gymnasium text env: ``env_id: openenv:http://HOST:PORT`` (or a name
given to ``register_openenv``), played by agentrl's rollout, env workers and credit modules like
a built-in env.

``probe.make_env`` turns such an id into ``openenv_spec(target)``: one ``OpenEnvTextEnv`` per env,
each holding one OpenEnv session (a ``/ws`` connection made with OpenEnv's own client,
``GenericEnvClient``) opened at the first reset. Two kinds of server:

* **agentrl's** (``agentrl-envs serve``, told apart by its ``state``): the response goes over
  as it is, and the server's env parses it, applies its penalty, ends the episode at its step
  limit and renders the next prompts (``openenv_server``). ``prompt`` and ``turn_prompt`` hand
  back those renderings, so the episode, its records and its prompts equal the in-process ones.
* **anyone else's**: prompt and action parsing come from the env kwargs (the recipe).
  ``action_field`` names the action's text field (default: its only required string field, read
  from ``/schema``); ``action_format`` is ``raw`` (the whole response) or ``action_tag`` (the body
  of the first ``<action>``; a response without one is not sent and costs
  ``invalid_action_penalty``); ``observation_field`` picks the observation's text (default: every
  non-empty field, one ``name: value`` line each, or the only one as it is); ``prompt_template``
  formats the user message from ``{observation}``, ``{history}``, ``{step}`` and the observation's
  own fields; ``success_reward`` makes an episode that ends with a reward at least that a win;
  ``reset_kwargs`` are sent with every reset, and ``max_episode_steps`` truncates on this side.
``action_format: mcp_tools`` plays an env whose actions are MCP tool calls (OpenEnv's
``MCPEnvironment``): its tools, listed at the first reset, are offered in the prompt, the policy
calls one per turn as ``<action>{"tool": NAME, "arguments": {...}}</action>`` (as agentrl's SWE
env takes its tool calls), and a malformed call or one the server refuses costs the penalty.
OpenEnv's wire has one ``done``: it is a truncation when the observation or its metadata says
``truncated: true``; rubric scores an env sends in ``metadata["rubric"]`` (name -> score) are
kept on each step's record (``info["record_info"]``, as ``rubric/NAME``).

A server error (the env raised; a bad request) raises ``RuntimeError`` from ``reset``/``step``, which
agentrl's env batches turn into the end of that episode; a lost connection is reopened at the next
reset.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from agentrl_envs.actions import parse_action
from agentrl_envs.base import MAX_ACTION, MAX_TEXT, PRINTABLE, clip
from agentrl_envs.extras import SERVER_NAME, missing_extra
from agentrl_envs.prompts import history_entry

PREFIX = "openenv:"
ACTION_FORMATS = ("raw", "action_tag", "mcp_tools")
DEFAULT_TIMEOUT_S = 300.0
CAPACITY_RETRIES = 8  # ~9 s of retries at a reset when the server is full  # a SWE step runs a command then may grade (10 + 30 s by default)
_NAMED: dict[str, tuple[list[str], dict[str, Any]]] = {}
_REPLICA = itertools.count()
"""Which replica the next env of this process takes (round robin)."""
_OWN_FIELDS = ("done", "reward", "metadata")  # OpenEnv's own observation fields, not the env's text


def register_openenv(name: str, url: str | list[str], **env_kwargs: Any) -> None:
    """Give an OpenEnv server a name: ``env_id: openenv:NAME`` then plays ``url`` with these env
    kwargs as defaults (a recipe's ``env_kwargs`` override them). ``url`` may list replicas of one
    server: each env made in a process takes the next (a server that allows one session at a
    time needs one replica per env of a batch). Call it from an ``env_modules`` module. A taken
    name is refused."""
    if not name or "/" in name or ":" in name:
        raise ValueError(f"an OpenEnv name has no '/' or ':' (those make a URL): {name!r}")
    if name in _NAMED:
        raise ValueError(f"OpenEnv name {name!r} is taken (by {_NAMED[name][0]})")
    urls = [url] if isinstance(url, str) else list(url)
    if not urls:
        raise ValueError(f"OpenEnv name {name!r}: no URL")
    _NAMED[name] = ([_url(u) for u in urls], dict(env_kwargs))


def registered_names() -> list[str]:
    return sorted(_NAMED)


def _url(url: str) -> str:
    url = url.rstrip("/")
    if not re.match(r"^(https?|wss?)://[^/\s]+", url):
        raise ValueError(f"not a server URL: {url!r} (http://HOST:PORT)")
    return re.sub(r"^ws", "http", url)


def resolve(target: str) -> tuple[list[str], dict[str, Any]]:
    """``openenv:`` target -> (server URLs: one, or a name's replicas; default env kwargs)."""
    if "://" in target:
        return [_url(target)], {}
    if target in _NAMED:
        urls, kwargs = _NAMED[target]
        return list(urls), dict(kwargs)
    names = ", ".join(registered_names()) or "none"
    raise ValueError(f"unknown OpenEnv env {target!r}: give a URL (openenv:http://HOST:PORT) or a name "
                     f"registered with register_openenv (registered: {names})")


# --- talking to a server ---------------------------------------------------------------------
class _Loop:
    """One asyncio loop on a daemon thread for every OpenEnv client of this process (OpenEnv's
    client is async; a loop per client would be a thread per env)."""

    _loop: asyncio.AbstractEventLoop | None = None
    _lock = threading.Lock()

    @classmethod
    def run(cls, coro, timeout: float):
        with cls._lock:
            if cls._loop is None or not cls._loop.is_running():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="openenv-clients", daemon=True).start()
                cls._loop = loop
        return asyncio.run_coroutine_threadsafe(coro, cls._loop).result(timeout)


def _client(url: str, timeout: float, connect_timeout: float = 10.0):
    """OpenEnv's generic client (``openenv`` 0.10) for one session, without websocket keepalive
    pings: a server whose step holds its event loop longer than websockets' 20 s ping timeout (a
    slow env, a loaded machine) would otherwise lose the session mid-episode. Every reset and step
    is bounded by ``timeout`` instead. Use it only inside ``_Loop`` coroutines: 0.10's client runs
    a call made outside a running loop synchronously, on a loop of its own."""
    try:
        from openenv.core.generic_client import GenericEnvClient
    except ImportError as e:
        raise missing_extra("an openenv: env id", "openenv", e) from None
    return GenericEnvClient(base_url=url, connect_timeout_s=connect_timeout, message_timeout_s=timeout,
                            websocket_ping_interval_s=None, websocket_ping_timeout_s=None)


async def _ask(client, kind: str, data: dict):
    """One reset, step, state or close of ``client``, awaited on ``_Loop``'s loop (where 0.10's
    client takes its async path)."""
    if kind == "reset":
        return await client.reset(**data)
    if kind == "step":
        return await client.step(data)
    if kind == "state":
        return await client.state()
    return await client.close()


def _get_json(url: str, timeout: float = 10.0) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # it answered: a server, but not one speaking OpenEnv's protocol
        raise ValueError(f"{url} answered HTTP {e.code}: not an OpenEnv server (OpenEnv's /schema, /ws "
                         "protocol, as openenv 0.3 to 0.10 serve it)") from None
    except (urllib.error.URLError, OSError) as e:
        raise ValueError(f"cannot reach the OpenEnv server at {url}: {getattr(e, 'reason', e)}") from None
    except ValueError:
        raise ValueError(f"{url} answered something other than JSON: not an OpenEnv server") from None


def server_info(url: str, timeout: float = 30.0) -> dict[str, Any]:
    """What a client needs before its first episode: the action and observation schemas
    (``/schema``) and, from a session's ``state``, whether this is agentrl's server and its env id
    and step limit. ValueError (one line) when the server cannot be reached or does not speak
    OpenEnv's protocol (no action/observation schema, no ``/ws`` session). ``timeout`` bounds each
    request (a refused connection fails at once; 30 s lets a server on a loaded machine answer)."""
    schema = _get_json(f"{url}/schema", timeout)
    if not (isinstance(schema, dict) and isinstance(schema.get("action"), dict)
            and isinstance(schema.get("observation"), dict)):
        raise ValueError(f"{url}/schema has no action and observation schemas: not an OpenEnv server of "
                         "a protocol agentrl speaks (openenv 0.3 to 0.10)")
    state = _Loop.run(_session_state(url, timeout), timeout + 5)
    return {"schema": schema, "state": state, "agentrl": state.get("server") == SERVER_NAME}


@functools.lru_cache(maxsize=64)
def _cached_server_info(url: str) -> dict[str, Any]:
    """``server_info`` once per URL and process: every env of a batch asks it when it is made."""
    return server_info(url)


async def _session_state(url: str, timeout: float) -> dict:
    client = _client(url, timeout, connect_timeout=timeout)
    try:
        return await _ask(client, "state", {})
    except Exception as e:
        raise ValueError(f"cannot open a session on the OpenEnv server at {url} (its /ws session protocol, "
                         f"openenv 0.3 to 0.10): {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    finally:
        await _ask(client, "close", {})


def openenv_spec(target: str) -> EnvSpec:
    """The gymnasium spec of ``openenv:TARGET``: the server's step limit where it states one
    (agentrl's servers do), the URL in the kwargs (a spec travels to env workers pickled)."""
    urls, defaults = resolve(target)
    info = server_info(urls[0])  # replicas serve the same env
    limit = info["state"].get("max_episode_steps") if info["agentrl"] else None
    safe = re.sub(r"[^\w:.-]", "_", target if "://" not in target else urls[0])
    return EnvSpec(id=f"openenv/{safe}", entry_point="agentrl_envs.openenv_client:OpenEnvTextEnv",
                   kwargs={"url": urls[0] if len(urls) == 1 else urls, **defaults}, max_episode_steps=limit,
                   disable_env_checker=True)


# --- the env ---------------------------------------------------------------------------------
class OpenEnvTextEnv(gym.Env):
    """One OpenEnv session as a gymnasium text env (module docstring)."""

    metadata = {"render_modes": ["ansi"]}
    resume_kind = "restart"
    """An episode in flight at a checkpoint is played again from its reset: the session's state lives
    on the server, which gives no snapshot and need not step deterministically."""

    def __init__(self, url: str | list[str], history_length: int = 2, expert: bool = False, action_field: str | None = None,
                 action_format: str = "raw", observation_field: str | None = None,
                 prompt_template: str | None = None, invalid_action_penalty: float = 0.1,
                 success_reward: float | None = None, reset_kwargs: dict[str, Any] | None = None,
                 max_episode_steps: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        """
        Args:
            url: the server (http://HOST:PORT), or replicas of it: this env takes the next one.
            history_length: agentrl's servers: render prompts for history lengths 0..this (at least
                the recipe's ``history_length``); others: the pairs ``{history}`` shows.
            expert: agentrl's servers: send the expert's next action with every observation
                (``expert_action``; benchmarks, tests).
            action_field, action_format, observation_field, prompt_template, invalid_action_penalty,
            success_reward, reset_kwargs, max_episode_steps: another server's episode rules (module
                docstring); ignored by agentrl's servers, whose env owns them.
            timeout_s: the longest one reset or step may take before it counts as failed.
        """
        if action_format not in ACTION_FORMATS:
            raise ValueError(f"action_format must be one of {ACTION_FORMATS}, got {action_format!r}")
        if history_length < 0 or (max_episode_steps is not None and max_episode_steps < 1) or timeout_s <= 0:
            raise ValueError("history_length must be >= 0, max_episode_steps >= 1 and timeout_s > 0")
        url = url if isinstance(url, str) else url[next(_REPLICA) % len(url)]
        self.url, self.history_length, self.expert, self.timeout_s = _url(url), int(history_length), expert, timeout_s
        self.action_format, self.observation_field = action_format, observation_field
        self.prompt_template, self.invalid_action_penalty = prompt_template, float(invalid_action_penalty)
        self.success_reward, self.reset_kwargs = success_reward, dict(reset_kwargs or {})
        self.max_episode_steps = max_episode_steps
        self.observation_space = spaces.Text(max_length=MAX_TEXT, min_length=0, charset=PRINTABLE)
        self.action_space = spaces.Text(max_length=MAX_ACTION, min_length=0, charset=PRINTABLE)
        info = _cached_server_info(self.url)
        self.agentrl, self.server_env_id = info["agentrl"], info["state"].get("env_id")
        self.action_field = (action_field if self.agentrl or action_format == "mcp_tools"
                             else _action_field(info["schema"], action_field))
        self._tools: list[dict[str, Any]] | None = None
        """An MCP-tool env's tools (name, description, input_schema), listed at the first reset."""
        self._client = None
        self._t = 0
        self._obs, self._fields, self._info = "", {}, {}
        self._history_obs = ""
        """The observation the last step was taken from (its history entry's first half)."""
        self._history: list[tuple[str, str]] = []
        self._prompts: list[str] = []
        self._turn: str | None = None
        self._prompt_error: str | None = None
        self._turn_error: str | None = None
        self._expert: str | None = None

    # --- gymnasium -----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if self.agentrl:
            data = {"seed": seed, "options": options, "history_length": self.history_length, "expert": self.expert}
        else:
            data = {"seed": seed, **({"options": options} if options else {}), **self.reset_kwargs}
        payload = self._call("reset", data)
        self._t, self._history = 0, []
        if self.action_format == "mcp_tools" and self._tools is None:
            listed = self._call("step", {"type": "list_tools"})["observation"]
            self._tools = [t for t in listed.get("tools") or [] if isinstance(t, dict) and t.get("name")]
        return self._take(payload)[0], self._info

    def step(self, response: str):
        response = response if isinstance(response, str) else str(response)
        if self.agentrl:
            payload = self._call("step", {"text": response})
            obs, reward, terminated, truncated = self._take(payload)
        else:
            obs, reward, terminated, truncated = self._foreign_step(response)
        self._history.append((self._history_obs, history_entry(self._info, response)))
        self._t += 1
        return obs, reward, terminated, truncated, self._info

    def close(self):
        client, self._client = self._client, None
        if client is not None:
            try:
                _Loop.run(_ask(client, "close", {}), 10)
            except Exception:  # closing is best effort: the server drops a vanished session itself
                pass

    def render(self):
        return self._obs

    # --- what agentrl's prompt builders and benchmarks ask ------------------------------------------------
    def prompt(self, obs: str, info: dict[str, Any], history: list[tuple[str, str]], step: int,
               history_length: int | None = None) -> str:
        """The user message for the current turn: the server's rendering (agentrl's servers) or
        ``prompt_template`` over the observation. Asking for another turn, or another history
        than the one this session played, is refused: the server renders only its own episode."""
        h = self.history_length if history_length is None else history_length
        if step != self._t or obs != self._obs:
            raise ValueError(f"prompt for step {step}: this session is at step {self._t}")
        recent = [tuple(p) for p in history]
        if step > 0 and recent != self._history[len(self._history) - len(recent):]:
            raise ValueError("prompt for a history this session did not play")
        if not self.agentrl:
            return self._template_prompt(h)
        if self._prompt_error:
            raise _remote_error(self._prompt_error)
        if h >= len(self._prompts):
            raise ValueError(f"the server rendered prompts for history lengths 0..{len(self._prompts) - 1}, "
                             f"asked for {h}: set env_kwargs history_length to at least {h}")
        return self._prompts[h]

    def turn_prompt(self, obs: str, info: dict[str, Any], step: int) -> str:
        """A later user message of a growing conversation (trajectory mode)."""
        if step != self._t:
            raise ValueError(f"turn message for step {step}: this session is at step {self._t}")
        if not self.agentrl:
            return f"Observation: {obs}"
        if self._turn_error:
            raise _remote_error(self._turn_error)
        return self._turn

    def expert_action(self) -> str | None:
        """The expert's next action, as the server's env gives it (asked with ``expert=True``)."""
        if not (self.agentrl and self.expert):
            raise NotImplementedError("an expert is sent only by agentrl's servers, asked with expert=True")
        return self._expert

    # --- machinery -----------------------------------------------------------------------------
    def _call(self, kind: str, data: dict) -> dict:
        """One reset or step over this env's session; a lost connection is dropped (the next
        reset opens another), a server error keeps it (the server went on). A full server at a
        reset is asked again for a few seconds: a session just closed may not be gone yet."""
        for attempt in range(CAPACITY_RETRIES + 1):
            try:
                return self._call_once(kind, data)
            except RuntimeError as e:
                if kind != "reset" or "CAPACITY_REACHED" not in str(e) or attempt == CAPACITY_RETRIES:
                    raise
                self.close()
                time.sleep(0.25 * (attempt + 1))
        raise AssertionError("unreachable")

    def _call_once(self, kind: str, data: dict) -> dict:
        if self._client is None:
            self._client = _client(self.url, self.timeout_s)
        try:
            result = _Loop.run(_ask(self._client, kind, data), self.timeout_s + 5)
        except RuntimeError as e:
            if str(e).startswith("Server error"):
                if "CAPACITY_REACHED" in str(e):
                    self.close()  # the server closed this connection
                raise RuntimeError(f"{kind}: {e}") from None
            self.close()
            raise
        except Exception:
            self.close()
            raise
        return {"observation": result.observation, "reward": result.reward, "done": result.done,
                "metadata": result.metadata}

    def _take(self, payload: dict) -> tuple[str, float, bool, bool]:
        """Keep a server observation; (obs, reward, terminated, truncated)."""
        o = payload["observation"]
        self._history_obs = self._obs
        if self.agentrl:
            self._obs, self._info = o["text"], o["info"]
            self._prompts, self._turn = list(o.get("prompts") or []), o.get("turn_message")
            self._prompt_error, self._turn_error = o.get("prompt_error"), o.get("turn_error")
            self._expert = o.get("expert")
            return self._obs, float(payload["reward"] or 0.0), bool(o["terminated"]), bool(o["truncated"])
        self._fields = {k: v for k, v in o.items() if k not in _OWN_FIELDS}
        self._obs = _observation_text(self._fields, self.observation_field)
        reward, done = float(payload["reward"] or 0.0), bool(payload["done"])
        # OpenEnv's wire has one `done` (0.3 to 0.10); an env that tells a time limit from an end
        # says so in a boolean `truncated` field of its observation or metadata (ours do)
        truncated = done and True in (o.get("truncated"), (payload.get("metadata") or {}).get("truncated"))
        won = done and not truncated and self.success_reward is not None and reward >= self.success_reward
        self._info = {"task_family": "openenv", "won": won, "action_valid": True, "action": None}
        key = _foreign_state_key(payload)
        if key is not None:  # the env knows its state: credit keys steps by it, not by the text
            self._info["state_key"] = key
        rubric = _rubric_scores((payload.get("metadata") or {}).get("rubric"))
        if rubric:  # kept on the step's record (StepRecord.info), one key per rubric
            self._info["record_info"] = rubric
        return self._obs, reward, done and not truncated, truncated

    def _foreign_step(self, response: str) -> tuple[str, float, bool, bool]:
        if self.action_format == "mcp_tools":
            return self._tool_step(response)
        text = response if self.action_format == "raw" else parse_action(response)
        if text is None:  # no <action>: not sent; the env's state is unchanged
            self._history_obs = self._obs
            key = self._info.get("state_key")
            self._info = {"task_family": "openenv", "won": False, "action_valid": False, "action": None,
                          "penalty": self.invalid_action_penalty}
            if key is not None:
                self._info["state_key"] = key
            obs, reward, terminated = self._obs, -self.invalid_action_penalty, False
        else:
            obs, reward, terminated, truncated = self._take(self._call("step", {self.action_field: text}))
            self._info.update(action=clip(text, MAX_ACTION), penalty=0.0)
            if terminated or truncated:
                return obs, reward, terminated, truncated
        truncated = self.max_episode_steps is not None and self._t + 1 >= self.max_episode_steps
        return obs, reward, terminated, truncated

    def _tool_step(self, response: str) -> tuple[str, float, bool, bool]:
        """One turn of an MCP-tool env: the response's ``<action>{"tool": NAME, "arguments":
        {...}}</action>`` is checked against the listed tools (a malformed call is not sent), then
        sent as OpenEnv's ``call_tool``. A malformed call, or one the server answers with a tool
        error (bad arguments, an unknown tool, the tool raised), costs ``invalid_action_penalty``:
        the policy made it. The observation is the tool's text, or the error in one line."""
        call, why = _tool_call(parse_action(response), self._tools or [])
        if call is None:
            self._history_obs = self._obs
            self._obs = f"Invalid tool call: {why}"
            self._info = {"task_family": "openenv", "won": False, "action_valid": False, "action": None,
                          "penalty": self.invalid_action_penalty}
            truncated = self.max_episode_steps is not None and self._t + 1 >= self.max_episode_steps
            return self._obs, -self.invalid_action_penalty, False, truncated
        payload = self._call("step", {"type": "call_tool", "tool_name": call[0], "arguments": call[1]})
        _, reward, terminated, truncated = self._take(payload)
        self._obs, error = _tool_text(payload["observation"])
        self._info.update(action=clip(json.dumps({"tool": call[0], "arguments": call[1]}), MAX_ACTION),
                          action_valid=not error, penalty=self.invalid_action_penalty if error else 0.0)
        if error:
            reward -= self.invalid_action_penalty
        if not (terminated or truncated):
            truncated = self.max_episode_steps is not None and self._t + 1 >= self.max_episode_steps
        return self._obs, reward, terminated, truncated

    def _template_prompt(self, h: int) -> str:
        recent = self._history[-h:] if h > 0 and self._t > 0 else []
        history = "".join(f"Observation: {o}\nAction: {a}\n" for o, a in recent)
        ask = {"action_tag": "Reply with your next command inside <action>...</action>.",
               "mcp_tools": "Tools:\n{tools}\nCall one tool per turn: "
                            '<action>{{"tool": "NAME", "arguments": {{...}}}}</action>'}
        default = "{history}Observation: {observation}\n" + ask.get(self.action_format, "Reply with your next action.")
        values = {**self._fields, "observation": self._obs, "history": history, "step": self._t,
                  "tools": _tool_lines(self._tools or [])}
        try:
            return (self.prompt_template or default).format(**values)
        except (KeyError, IndexError) as e:
            raise ValueError(f"prompt_template names {e}, which this observation lacks; "
                             f"valid: {', '.join(sorted(values))}") from None


def _tool_call(body: str | None, tools: list[dict[str, Any]]) -> tuple[tuple[str, dict] | None, str]:
    """``((tool, arguments), "")`` of a well-formed call of a listed tool, else ``(None, why)``:
    what the policy wrote wrong, in one line (the arguments' types are the server's to check)."""
    if body is None:
        return None, 'no <action>{"tool": NAME, "arguments": {...}}</action>'
    try:
        call = json.loads(body)
    except ValueError:
        return None, "the action is not JSON"
    if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
        return None, 'the action needs "tool": a tool name'
    args = call.get("arguments", {})
    by_name = {t["name"]: t for t in tools}
    if call["tool"] not in by_name:
        return None, f"unknown tool {call['tool']!r}; tools: {', '.join(by_name)}"
    schema = by_name[call["tool"]].get("input_schema") or by_name[call["tool"]].get("inputSchema") or {}
    if not isinstance(args, dict):
        return None, '"arguments" must be an object'
    missing = [k for k in schema.get("required", []) if k not in args]
    unknown = [k for k in args if k not in schema.get("properties", {})]
    if missing or unknown:
        return None, f"{call['tool']}: missing {missing}, unknown {unknown}"
    return (call["tool"], args), ""


def _tool_text(obs: dict[str, Any]) -> tuple[str, bool]:
    """(the text of OpenEnv's ``CallToolObservation``, whether it is an error): the result's text
    content, or the error's type and first line."""
    error = obs.get("error")
    if error:
        message = str(error.get("message", error) if isinstance(error, dict) else error).strip()
        kind = error.get("error_type", "error") if isinstance(error, dict) else "error"
        return f"Tool error ({kind}): {message.splitlines()[0] if message else kind}", True
    result = obs.get("result")
    if isinstance(result, dict):
        texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
        return "\n".join(t for t in texts if t), bool(result.get("is_error") or result.get("isError"))
    return "" if result is None else str(result), False


def _tool_lines(tools: list[dict[str, Any]]) -> str:
    """One line per tool: ``name(arg: type, ...): description``."""
    lines = []
    for t in tools:
        props = (t.get("input_schema") or t.get("inputSchema") or {}).get("properties", {})
        args = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in props.items())
        lines.append(f"- {t['name']}({args}): {(t.get('description') or '').strip().splitlines()[0] if t.get('description') else ''}")
    return "\n".join(lines)


def _remote_error(text: str) -> Exception:
    """The server's ``"Type: message"`` as that exception where it is a builtin one (so an
    episode's error reads as it would in-process), else as a RuntimeError."""
    import builtins

    name, _, message = text.partition(": ")
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls(message)
    return RuntimeError(text)


def _rubric_scores(scores: Any) -> dict[str, float]:
    """An env's rubric scores (``metadata["rubric"]``: name -> score, as OpenEnv's
    ``Rubric.named_rubrics()`` names them) as ``{"rubric/NAME": score}``; numbers only."""
    if not isinstance(scores, dict):
        return {}
    return {f"rubric/{k}": float(v) for k, v in scores.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _action_field(schema: dict, given: str | None) -> str:
    """The action field the response text goes into: ``given`` (checked), else the action
    schema's only required string field."""
    props = schema.get("action", {}).get("properties", {})
    if given is not None:
        if given not in props:
            raise ValueError(f"action_field {given!r} is not a field of the server's action; valid: "
                             f"{', '.join(sorted(props))}")
        return given
    required = schema.get("action", {}).get("required", [])
    strings = [k for k in required if props.get(k, {}).get("type") == "string"]
    if len(strings) != 1:
        raise ValueError(f"cannot tell which action field holds the text (required string fields: {strings}); "
                         f"set env_kwargs action_field to one of {', '.join(sorted(props))}")
    return strings[0]


def _foreign_state_key(payload: dict) -> str | None:
    """A foreign env's state key: ``state_key`` in its observation's metadata (agentrl's servers
    put it there; any env may), as text; None where it gives none (credit then keys by the text)."""
    meta = payload.get("metadata") or (payload["observation"] or {}).get("metadata") or {}
    key = meta.get("state_key") if isinstance(meta, dict) else None
    return None if key is None else str(key)


def _observation_text(fields: dict[str, Any], field: str | None) -> str:
    """The text of another server's observation: ``field``, or every non-empty field."""
    if field is not None:
        if field not in fields:
            raise RuntimeError(f"observation_field {field!r} is not in the observation; has: {', '.join(fields)}")
        value = fields[field]
        return value if isinstance(value, str) else json.dumps(value)
    shown = {k: v for k, v in fields.items() if v not in (None, "", [], {})}
    if len(shown) == 1 and isinstance(next(iter(shown.values())), str):
        return next(iter(shown.values()))
    return "\n".join(f"{k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in shown.items())


__all__ = ["ACTION_FORMATS", "OpenEnvTextEnv", "openenv_spec", "register_openenv", "registered_names",
           "resolve", "server_info"]
