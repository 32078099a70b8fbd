"""Algorithm plug-ins for ``AgentGRPOTrainer``: registered at their definition, chosen by the recipe.

``Algorithm`` (``base``) lists the hooks; ``appo`` and ``collab`` are the built-in plug-ins besides
the GRPO-style default. A recipe names one with ``algorithm:`` alone (default grpo) and sets it
with its ``algorithm_kwargs`` (older recipes that relied on the credit name are read with a
notice: ``agentrl.config.upgrade``).
"""

from __future__ import annotations

from agentrl.algorithms.base import (
    Advantages,
    Algorithm,
    algorithm_names,
    async_refusal,
    get_algorithm,
    loss_owner,
    register_algorithm,
)

from . import appo, collab  # noqa: F401,E402  (register the built-in plug-ins)


def algorithm_name(cfg) -> str:
    """The registered algorithm a config runs: its ``algorithm`` key (grpo when unset)."""
    return getattr(cfg, "algorithm", None) or "grpo"


def for_config(cfg) -> Algorithm:
    """A fresh instance of the config's algorithm."""
    return get_algorithm(algorithm_name(cfg))(cfg)


def check(cfg) -> None:
    """RecipeError (one line) for an unknown algorithm, bad ``algorithm_kwargs``, or settings the
    config's algorithm cannot run with."""
    from agentrl import credit
    from agentrl.collab.recipe import ENV_ID
    from agentrl.recipe_file import RecipeError

    try:
        algo = for_config(cfg)
    except (KeyError, ValueError) as e:  # a KeyError's str() is its message quoted
        raise RecipeError(e.args[0] if e.args else str(e)) from None
    if algo.records == "step" and cfg.credit in credit.available("collab"):
        raise RecipeError(f"credit {cfg.credit!r} credits the roles of a collaboration: set algorithm: collab, "
                          f"algorithm_kwargs: {{collab: think_solve}} and env_id: {ENV_ID}")
    algo.check(cfg)
    why = async_refusal(cfg, algo)
    if why:
        raise RecipeError(why)


__all__ = ["Advantages", "Algorithm", "algorithm_name", "algorithm_names", "async_refusal", "check", "for_config",
           "get_algorithm", "loss_owner", "register_algorithm"]
