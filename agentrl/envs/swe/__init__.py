"""agentrl/SWE-v0: fix planted bugs in tiny Python repositories inside a bubblewrap sandbox."""

from agentrl.envs.swe.env import TOOLS_DOC, SWEEnv
from agentrl.envs.swe.sandbox import sandbox_problem
from agentrl.envs.swe.tasks import Task, families, load_tasks

__all__ = ["SWEEnv", "TOOLS_DOC", "Task", "families", "load_tasks", "sandbox_problem"]
