"""WebShop text environment (``agentrl/WebShop-v0``): see ``agentrl_envs.webshop.env`` and ``.catalog``."""

from agentrl_envs.webshop.env import WebShopEnv

__all__ = ["WebShopEnv"]
