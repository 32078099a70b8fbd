"""agentrl/SWE-v0: fix planted bugs in tiny Python repositories inside a bubblewrap sandbox."""

from agentrl_envs.swe.env import TOOLS_DOC, SWEEnv
from agentrl_envs.swe.sandbox import sandbox_problem
from agentrl_envs.swe.tasks import Task, families, load_tasks

__all__ = ["SWEEnv", "TOOLS_DOC", "Task", "families", "load_tasks", "sandbox_problem"]
