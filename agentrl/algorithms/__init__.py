"""Algorithm plug-ins for ``AgentGRPOTrainer``: registered at their definition, chosen by the recipe.

``Algorithm`` (``base``) lists the hooks; ``appo`` and ``collab`` are the built-in plug-ins besides
the GRPO-style default. A recipe names one with ``algorithm:`` (and its ``algorithm_kwargs``);
without it, ``algorithm_name`` infers it from the credit module: a collaboration credit ->
``collab``; ``credit: appo`` -> ``appo``; anything else -> ``grpo``.
"""

from __future__ import annotations

from agentrl.algorithms.base import (
    Advantages,
    Algorithm,
    algorithm_names,
    get_algorithm,
    loss_owner,
    register_algorithm,
)

from . import appo, collab  # noqa: F401,E402  (register the built-in plug-ins)


def algorithm_name(cfg) -> str:
    """The registered algorithm a config runs (see the module docstring)."""
    if getattr(cfg, "algorithm", None):
        return cfg.algorithm
    if cfg.credit in collab.COLLAB_CREDITS:
        return "collab"
    return cfg.credit if cfg.credit in algorithm_names() else "grpo"


def for_config(cfg) -> Algorithm:
    """A fresh instance of the config's algorithm."""
    return get_algorithm(algorithm_name(cfg))(cfg)


def check(cfg) -> None:
    """RecipeError (one line) for an unknown algorithm, bad ``algorithm_kwargs``, or settings the
    config's algorithm cannot run with."""
    from agentrl.recipe_file import RecipeError

    try:
        algo = for_config(cfg)
    except (KeyError, ValueError) as e:  # a KeyError's str() is its message quoted
        raise RecipeError(e.args[0] if e.args else str(e)) from None
    algo.check(cfg)


__all__ = ["Advantages", "Algorithm", "algorithm_name", "algorithm_names", "check", "for_config", "get_algorithm",
           "loss_owner", "register_algorithm"]
