"""Tool-using reasoning env (``agentrl/ToolReason-v0``): see ``agentrl.envs.toolreason.env``."""

from agentrl.envs.toolreason.env import ToolReasonEnv

__all__ = ["ToolReasonEnv"]
