"""Algorithm plug-ins for ``AgentGRPOTrainer``: registered at their definition, chosen by the recipe.

``Algorithm`` (``base``) lists the hooks; ``appo`` and ``collab`` are the built-in plug-ins besides
the GRPO-style default. A recipe selects one through the keys it already has
(``algorithm_name``): ``collab:`` set (or a collaboration credit) -> ``collab``; ``credit: appo`` ->
``appo``; anything else -> ``grpo`` (the recipe's credit module, per record).
"""

from __future__ import annotations

from agentrl.algorithms.base import Advantages, Algorithm, algorithm_names, get_algorithm, register_algorithm

from . import appo, collab  # noqa: F401,E402  (register the built-in plug-ins)


def algorithm_name(cfg) -> str:
    """The registered algorithm a config runs (see the module docstring)."""
    if cfg.collab or cfg.credit in collab.COLLAB_CREDITS:
        return "collab"
    return cfg.credit if cfg.credit in algorithm_names() else "grpo"


def for_config(cfg) -> Algorithm:
    """A fresh instance of the config's algorithm."""
    return get_algorithm(algorithm_name(cfg))(cfg)


def check(cfg) -> None:
    """RecipeError (one line) for settings the config's algorithm cannot run with."""
    get_algorithm(algorithm_name(cfg))().check(cfg)


__all__ = ["Advantages", "Algorithm", "algorithm_name", "algorithm_names", "check", "for_config", "get_algorithm",
           "register_algorithm"]
