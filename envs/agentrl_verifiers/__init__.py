"""verifiers' plugin module for agentrl's envs: taskset id ``agentrl-verifiers``.

verifiers 0.4 imports a taskset by id as a top-level module and takes the ``Env`` and
``Taskset`` subclasses its ``__all__`` exports; the classes live in
``agentrl_envs.interop.verifiers_env``.
"""

from agentrl_envs.interop.verifiers_env import (
    AgentrlEnv,
    AgentrlEnvConfig,
    AgentrlTask,
    AgentrlTaskset,
    AgentrlTasksetConfig,
    load_environment,
)

__all__ = ["AgentrlEnv", "AgentrlEnvConfig", "AgentrlTask", "AgentrlTaskset", "AgentrlTasksetConfig",
           "load_environment"]
