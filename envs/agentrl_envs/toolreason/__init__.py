"""Tool-using reasoning env (``agentrl/ToolReason-v0``): see ``agentrl_envs.toolreason.env``."""

from agentrl_envs.toolreason.env import ToolReasonEnv

__all__ = ["ToolReasonEnv"]
