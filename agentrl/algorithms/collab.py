"""Collaborations of roles (CCPO / SEPO, arXiv 2603.21563) as an algorithm plug-in.

Selected when the recipe sets ``collab:`` (or names a collaboration credit module). ``check`` is
the collaboration recipe check (``agentrl.collab.recipe.check_config``: collab keys, credit module,
env and policies fit together). ``advantages`` carries CCPO's EMA statistics (App. C.2) as explicit
state: in to the ``ccpo`` estimator, out from its diagnostics; the trainer keeps it between
iterations (advanced in training only) and the checkpoint saves it. The rollouts, the role
schedule and the per-role policies still live in ``agentrl.trainer.collab_trainer.CollabTrainer``.
"""

from __future__ import annotations

from agentrl.algorithms.base import Advantages, Algorithm, register_algorithm
from agentrl.collab.recipe import COLLAB_CREDITS, check_config
from agentrl.collab.spec import CollabError
from agentrl.credit.collab import CcpoState
from agentrl.credit.collab_records import state_from_diagnostics
from agentrl.recipe_file import RecipeError


@register_algorithm("collab")
class Collab(Algorithm):
    """Role-by-role collaborations; the credit module is one of ``COLLAB_CREDITS``."""

    def check(self, cfg) -> None:
        try:
            check_config(cfg)
        except CollabError as e:
            raise RecipeError(str(e)) from None

    def initial_state(self) -> CcpoState:
        """CCPO's running statistics before the first update (kept, unused, by other modules)."""
        return CcpoState()

    def advantages(self, trainer, episodes, records, state: CcpoState) -> tuple[Advantages, CcpoState]:
        """The collaboration credit module per record; ``ccpo`` reads ``state`` and its diagnostics
        carry the updated statistics (``credit/ccpo_state/*``), which become the new state."""
        extra = {"state": state} if trainer.args.credit == "ccpo" else {}
        adv, diag = trainer.compute_credit(records, **extra)
        new = state_from_diagnostics(diag)
        return Advantages(adv, diag), state if new is None else new


__all__ = ["COLLAB_CREDITS", "Collab"]
