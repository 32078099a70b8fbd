"""``agentrl/ToolReason-v0``: reasoning with a Python tool and a search tool, in APPO's format.

A trajectory-mode env (arXiv 2606.12384's tasks, offline): the model calls ``<python>...</python>``
or ``<search>...</search>`` (one call per turn), reads the ``<result>...</result>`` of the next
turn, and ends with ``<answer>...\\boxed{...}</answer>``. Families: ``math`` (reasoning-gym),
``multihop`` (the generated knowledge base) and dataset families (``datasets=``, ``sources.py``).
At most ``tool_call_limit`` calls run; a bad format, or no answer within ``max_turns``, ends the
episode with -1; the final turn's reward is the episode's return (APPO's reward). Each step's
``info["record_info"]`` feeds the metrics (``agentrl.rollout.metrics.tool_summary``); ``snapshot``
/ ``restore`` serve branch continuations. ``format.py`` parses and rewards, ``tools.py`` runs the
tools. Rules in full: docs/environments.md, "ToolReason".
"""

from __future__ import annotations

import random
from typing import Any

from agentrl_envs.base import TextEnv, clip, parse_reset_options, to_printable
from agentrl_envs.toolreason import format as fmt
from agentrl_envs.toolreason import sources
from agentrl_envs.toolreason.sources import Task
from agentrl_envs.toolreason.tools import PythonTool, format_hits, kb_index

FAMILIES = sources.BUILTIN
SPLITS = sources.SPLITS
MATH_TASKS = sources.MATH_TASKS

INSTRUCTIONS = (
    "Solve the problem below. Think step by step. You can use two tools, one call per reply:\n"
    "- <python>code</python> runs Python 3 (standard library only) in a fresh sandbox; print what you "
    "need, the value of a last bare expression is printed.\n"
    "- <search>query</search> searches a document collection and returns the top {k} documents.\n"
    "Each call's output comes back as <result>...</result>. You may make at most {limit} tool calls. "
    "Stop right after the closing tag of a call. When you are done, reply with "
    "<answer>your final answer in \\boxed{{...}}</answer>."
)


class ToolReasonEnv(TextEnv):
    """APPO's tool-using reasoning tasks (module docstring; rules: docs/environments.md)."""

    env_title = "a reasoning task with a Python tool and a search tool"

    def __init__(self, tool_call_limit: int = 3, max_turns: int | None = None, math_tasks=MATH_TASKS,
                 math_size: int = 300, math_seed: int = 0, kb_seed: int = 0, search_k: int = 3,
                 math_reward: str = "verify", both_tools_bonus: float = fmt.BOTH_TOOLS_BONUS,
                 python_timeout: float = 10.0, python_memory_mb: int = 512, max_result_chars: int = 2000,
                 datasets: dict[str, dict] | None = None, history_length: int = 2,
                 render_mode: str | None = None):
        """
        Args:
            tool_call_limit: tool calls executed per episode (APPO: 3).
            max_turns: model turns before the episode ends without an answer (-1); default limit + 2.
            math_tasks / math_size / math_seed: reasoning-gym datasets, problems per split, seed.
            kb_seed: seed of the generated knowledge base (multihop family and search corpus).
            search_k: documents per search.
            math_reward: "verify" (math-verify, 0/1) or "f1" (token-F1, the authors' code).
            both_tools_bonus: added when the answer scores > 0 and both tools were used (0.1).
            python_timeout / python_memory_mb: sandbox wall-clock and address-space limits per call.
            max_result_chars: tool output kept in a <result>.
            datasets: extra families from benchmark / QA dataset files or the hub, with the
                loader's kwargs per split (``sources`` module docstring).
        """
        super().__init__(invalid_action_penalty=0.0, history_length=history_length, render_mode=render_mode)
        if tool_call_limit < 0:
            raise ValueError(f"tool_call_limit must be >= 0, got {tool_call_limit}")
        if math_reward not in fmt.MATH_REWARDS:
            raise ValueError(f"math_reward must be one of {list(fmt.MATH_REWARDS)}, got {math_reward!r}")
        if math_size < 1 or search_k < 1:
            raise ValueError("math_size and search_k must be >= 1")
        self.tool_call_limit = int(tool_call_limit)
        self.max_turns = int(max_turns) if max_turns is not None else self.tool_call_limit + 2
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        self.math_names = (math_tasks,) if isinstance(math_tasks, str) else tuple(math_tasks)
        self.math_size, self.math_seed = int(math_size), int(math_seed)
        self.kb_seed = int(kb_seed)
        self.search_k = int(search_k)
        self.math_reward = math_reward
        self.both_tools_bonus = float(both_tools_bonus)
        self.max_result_chars = int(max_result_chars)
        self._python_args = {"wall_s": float(python_timeout), "memory_mb": int(python_memory_mb),
                             "max_output_chars": self.max_result_chars}
        self.datasets = sources.check_datasets(datasets)
        self.families = FAMILIES + tuple(self.datasets)
        self._python: PythonTool | None = None
        self.task: Task | None = None
        self._calls = 0
        self._used: set[str] = set()
        self._done = True  # until the first reset

    # --- tasks ---------------------------------------------------------------------------------
    def tasks(self, split: str, family: str) -> tuple[Task, ...]:
        """All tasks of ``family`` in ``split``."""
        if family == "math":
            return sources.math_tasks(split, self.math_names, self.math_size, self.math_seed)
        if family == "multihop":
            return sources.kb_tasks(split, self.kb_seed)
        return sources.dataset_tasks(family, split, self.datasets[family])

    def _reset_task(self, seed, options):
        split, fams = parse_reset_options(options, SPLITS, self.families, extra_keys=("task_id",))
        if "task_id" in options:
            self.task = self._find(split, fams, options["task_id"])
        else:
            if seed is None:
                seed = int(self.np_random.integers(2**31))
            rng = random.Random(seed)
            pool = self.tasks(split, fams[rng.randrange(len(fams))])
            self.task = pool[rng.randrange(len(pool))]
        family = self.task.family
        self._calls, self._used, self._done = 0, set(), False
        return self.task.question, self.task.question, family, self._counters()

    def _find(self, split: str, families: list[str], task_id: str) -> Task:
        for fam in families:
            for t in self.tasks(split, fam):
                if t.id == task_id:
                    return t
        raise ValueError(f"no task {task_id!r} in split {split!r}, families {families}")

    def _counters(self) -> dict[str, Any]:
        return {"task_id": self.task.id if self.task else None, "tool_calls": self._calls,
                "used_python": "python" in self._used, "used_search": "search" in self._used}

    # --- stepping ------------------------------------------------------------------------------
    def step(self, response: str):
        self._steps += 1
        text = response if isinstance(response, str) else str(response)
        turn = fmt.parse_turn(text)
        extra: dict[str, Any] = {"format_error": turn.kind is None}
        ran = None
        if self._done:
            obs, reward, terminated, valid = "The episode is over.", 0.0, True, False
        elif turn.kind is None:
            obs, reward, terminated, valid = f"Bad format: {turn.error}.", fmt.FORMAT_PENALTY, True, False
            extra["error"] = turn.error
        elif turn.kind == "answer":
            obs, reward, terminated, valid = self._answer(turn, extra), None, True, True
            reward = extra.pop("reward")
        elif self._steps >= self.max_turns:  # the last turn allowed is a tool call: no answer, no call
            obs, reward, terminated, valid = "No answer within the turn limit.", fmt.FORMAT_PENALTY, True, True
            extra["format_error"] = True
        else:
            calls = self._calls
            obs, reward, terminated, valid = self._tool(turn), 0.0, False, True
            ran = turn.kind if self._calls > calls else None
        self._done = self._done or terminated
        self._won = bool(extra.pop("won", self._won))
        self._obs = to_printable(obs)
        action = None if turn.kind is None else f"{turn.kind}: {turn.body}"
        extra["record_info"] = {"task_kind": self.task.kind if self.task else None, "tool": ran,
                                "format_error": bool(extra["format_error"]), "answer_score": extra.get("score")}
        info = self._info(action=action, valid=valid, extra={**extra, **self._counters()})
        return self._obs, float(reward), bool(terminated), False, info

    def _answer(self, turn: fmt.Turn, extra: dict) -> str:
        kind = self.task.kind
        score = fmt.answer_score(turn.boxed, self.task.answers, kind, self.math_reward)
        extra["reward"] = fmt.appo_reward(score, self._used, self.both_tools_bonus)
        extra["won"] = fmt.answer_won(turn.boxed, self.task.answers, kind)
        extra["score"] = score
        extra["answer"] = clip(turn.boxed or "")
        return f"Answer received: {clip(turn.boxed or '')}"

    def _tool(self, turn: fmt.Turn) -> str:
        if self._calls >= self.tool_call_limit:
            out = f"Tool-call limit reached ({self.tool_call_limit} calls): give your final answer now."
        else:
            self._calls += 1
            self._used.add(turn.kind)
            out = self._run_python(turn.body) if turn.kind == "python" else self._search(turn.body)
        return f"<result>\n{out}\n</result>"

    def _run_python(self, code: str) -> str:
        if self._python is None:
            self._python = PythonTool(**self._python_args)
        return self._python.run(code)

    def _search(self, query: str) -> str:
        if self.task.family in self.datasets and self.task.kind == "qa":
            index = sources.dataset_index(self.task.family, self.datasets[self.task.family])
        else:  # math and the KB's questions search the KB
            index = kb_index(self.kb_seed)[1]
        return format_hits(index.search(query, self.search_k) if index else [], self.max_result_chars)

    def close(self):
        if self._python is not None:
            self._python.close()
            self._python = None
        super().close()

    # --- branch support ------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The counters a continuation from this point needs (tool results live in its prefix)."""
        return {"calls": self._calls, "used": sorted(self._used), "steps": self._steps}

    def restore(self, snap: dict[str, Any]) -> None:
        """Set the counters from ``snapshot()`` (on an env reset to the same task)."""
        self._calls, self._used = int(snap["calls"]), set(snap["used"])
        self._steps = int(snap["steps"])
        self._done = False

    # --- prompts -------------------------------------------------------------------------------
    def prompt(self, obs: str, info: dict[str, Any], history: list[tuple[str, str]], step: int,
               history_length: int | None = None) -> str:
        """First user message: the format instructions and the problem (later turns: ``turn_prompt``)."""
        head = INSTRUCTIONS.format(k=self.search_k, limit=self.tool_call_limit)
        lines = [head, "", f"Problem: {info.get('task', self._task)}"]
        h = self.history_length if history_length is None else history_length
        recent = history[-h:] if h > 0 and step > 0 else []
        for o, a in recent:  # window mode only: trajectory mode keeps the whole exchange in context
            lines.append(f"Your call: {a}\n{o}")
        if step > 0:
            lines.append(f"Tool calls used: {info.get('tool_calls', 0)} of {self.tool_call_limit}.")
        return "\n".join(lines)

    def turn_prompt(self, obs: str, info: dict[str, Any], step: int) -> str:
        """Trajectory mode's later user messages: the tool's ``<result>`` block as it is."""
        return obs

    # --- expert --------------------------------------------------------------------------------
    def expert_response(self) -> str | None:
        """The oracle's next full response: math computes with Python then answers; multihop
        searches the next hop (by the number of calls made), then answers. None once the episode
        is over."""
        if self.task is None or self._done:
            return None
        t, k = self.task, self._calls  # a pure function of the state: asking twice gives the same
        if t.kind == "math":
            if "python" not in self._used and k < self.tool_call_limit:
                return f"Let me compute this with Python.\n<python>\n{t.code}\n</python>"
            return f"The computation gives the result.\n<answer>\\boxed{{{t.answers[0]}}}</answer>"
        if k < min(len(t.hops), self.tool_call_limit):
            return f"I need to look up {t.hops[k]}.\n<search>{t.hops[k]}</search>"
        return f"Putting the facts together.\n<answer>\\boxed{{{t.answers[0]}}}</answer>"

    def expert_action(self) -> str | None:
        """Same as ``expert_response``: this env's actions are whole responses, not <action> bodies."""
        return self.expert_response()
