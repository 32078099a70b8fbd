"""What the SWE env tests share: the sandbox probe, tool-call helpers, the paginate task's fix."""

from __future__ import annotations

import hashlib
import json

import pytest
from agentrl_envs.actions import format_action
from agentrl_envs.swe import SWEEnv, load_tasks
from agentrl_envs.swe.sandbox import sandbox_problem

PROBLEM = sandbox_problem()
bwrap = [pytest.mark.bwrap, pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox: {PROBLEM}")]

TASKS = load_tasks()
PAGES = "pager/pages.py"
OLD_LINE = "    start = page * per_page\n"
NEW_LINE = "    start = (page - 1) * per_page\n"
# RTMC Sec. 4.2: 4-char MD5 of old + new text; the paginate fix changes exactly this one line.
PAGES_HASH = hashlib.md5((OLD_LINE + NEW_LINE).encode()).hexdigest()[:4]
FLAGS0 = "(think=0,test_ok=0,test_err=0,exec_ok=0,exec_err=0)"


def act(env, **call):
    return env.step(format_action(json.dumps(call)))


def bash(env, command):
    return act(env, tool="bash", command=command)


def open_env(**kwargs):
    """Fixture body: an SWEEnv for the module (skipped where there is no sandbox), closed after."""
    if PROBLEM is not None:
        pytest.skip(f"no sandbox: {PROBLEM}")
    e = SWEEnv(**kwargs)
    yield e
    e.close()
