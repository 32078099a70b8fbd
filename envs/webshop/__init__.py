"""WebShop text environment (``agentrl/WebShop-v0``): see ``envs.webshop.env`` and ``.catalog``."""

from envs.webshop.env import WebShopEnv

__all__ = ["WebShopEnv"]
