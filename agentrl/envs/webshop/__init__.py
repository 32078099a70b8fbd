"""WebShop text environment (``agentrl/WebShop-v0``): see ``agentrl.envs.webshop.env`` and ``.catalog``."""

from agentrl.envs.webshop.env import WebShopEnv

__all__ = ["WebShopEnv"]
