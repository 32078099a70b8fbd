"""The algorithm plug-in: nine named hooks that ``AgentGRPOTrainer``'s steps call, and its registry.

An RL algorithm on agent episodes differs from GRPO in a few places only: what it plays (APPO's
branches, a collaboration's roles), how the gathered records become advantages (per record or per
token, with state carried across iterations), the loss it trains with (a registered policy loss:
``agentrl.losses``) and the settings it refuses. Each place is one hook here. Where a run's rows
train (several policies, their checkpoints) is the job of its update runner
(``agentrl.algorithms.runner``), which the ``runner`` hook returns.

Algorithms register at their definition (``@register_algorithm("name")``, duplicates refused:
``agentrl.registry.Registry``, as every registry) with their typed kwargs (``params``:
``agentrl.registry.Param``, checked when the recipe loads). A recipe names one with the
``algorithm`` key alone and sets it with its ``algorithm_kwargs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from agentrl.registry import Param, Registry, resolve_params

if TYPE_CHECKING:
    from agentrl.algorithms.runner import UpdateRunner
    from agentrl.records import StepRecord
    from agentrl.rollout.episodes import Episode


@dataclass
class Advantages:
    """What an algorithm's ``advantages`` hook returns for one iteration's global batch."""

    per_record: np.ndarray
    """One advantage per gathered record (all ranks), the credit module's output."""
    diagnostics: dict[str, Any] = field(default_factory=dict)
    """Logged as ``credit/<name>`` (numbers only)."""
    per_token: dict[str, np.ndarray] = field(default_factory=dict)
    """traj_id -> advantages over that episode's completion tokens; replaces its rows' per-record
    advantages (APPO's Eq. 6). Empty for record-level algorithms."""


class Algorithm:
    """GRPO-style default: one rollout, the recipe's credit module per record, the recipe's
    ``loss_type`` as the policy loss, the trainer's model trained on every row.

    Hooks (all optional to override):

    * ``check(config)``: raise ``RecipeError`` (one line) for settings it cannot run with;
    * ``bind(trainer)``: once, after the trainer is built (caches, the runner's policies);
    * ``roll_out(trainer, tasks) -> list[Episode]``: this rank's episodes of an iteration (a
      collective: play with ``trainer.rollout``, the same number of calls on every rank);
    * ``shape_rewards(episodes)``: this rank's episodes after the trainer's reward shaping,
      before the records are gathered;
    * ``advantages(trainer, episodes, records, state) -> (Advantages, state)``: the global
      records' advantages; ``state`` is what the previous iteration returned (None at first);
    * ``loss(config) -> (name, options)``: the registered policy loss and its own options;
    * ``metric_episodes(episodes)``: the episodes ``env/*`` metrics are over;
    * ``metrics(trainer) -> dict``: the algorithm's own metrics of the iteration;
    * ``runner(trainer) -> UpdateRunner``: where the rows train (``agentrl.algorithms.runner``).
    """

    name: ClassVar[str] = "grpo"
    params: ClassVar[dict[str, Param]] = {}
    """The algorithm's kwargs (recipe key ``algorithm_kwargs``), checked when the recipe loads."""
    records: ClassVar[str] = "step"
    """The records its episodes give credit: ``step`` (any step records) or ``collab``
    (collaboration records, ``agentrl.credit.available("collab")``): a credit module reading the
    other kind is refused at check time."""
    own_losses: ClassVar[tuple[str, ...]] = ()
    """Registered policy losses that only this algorithm can drive (they read the options its
    ``loss`` hook gives): a recipe naming one under another algorithm is refused at check time."""

    def __init__(self, config=None):
        self.config = config
        self.kwargs = resolve_kwargs(type(self), config) if config is not None else {}
        """The recipe's ``algorithm_kwargs`` with defaults filled in."""

    def check(self, config) -> None:
        """Nothing beyond the credit module's own validation."""

    def bind(self, trainer) -> None:
        """No per-run caches."""

    def roll_out(self, trainer, tasks: list[dict]) -> list[Episode]:
        """The current policy plays ``tasks``."""
        return trainer.rollout(tasks)

    def shape_rewards(self, episodes: list[Episode]) -> None:
        """No shaping beyond ``valid_action_reward``."""

    def advantages(self, trainer, episodes: list[Episode], records: list[StepRecord],
                   state: Any) -> tuple[Advantages, Any]:
        """The recipe's credit module on the global records."""
        adv, diag = trainer.compute_credit(records)
        return Advantages(adv, diag), state

    def loss(self, config) -> tuple[str, dict[str, Any]]:
        """The recipe's ``loss_type`` (``agentrl.losses.policy``), no options of its own."""
        return config.loss_type, {}

    def metric_episodes(self, episodes: list[Episode]) -> list[Episode]:
        return episodes

    def metrics(self, trainer) -> dict[str, float]:
        return {}

    def runner(self, trainer) -> UpdateRunner:
        """The trainer's model trains on every row."""
        from agentrl.algorithms.runner import UpdateRunner

        return UpdateRunner(trainer)


_ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm")


register_algorithm = _ALGORITHMS.register
"""Class decorator: register an ``Algorithm`` subclass under ``name`` (duplicates refused)."""

register_algorithm("grpo")(Algorithm)


def algorithm_names() -> list[str]:
    return sorted(_ALGORITHMS)


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm registered as ``name``; a one-line ValueError with a did-you-mean otherwise."""
    return _ALGORITHMS.lookup(name)


def loss_owner(loss: str) -> str | None:
    """The algorithm that declares ``loss`` its own (``Algorithm.own_losses``), or None."""
    return next((name for name, cls in _ALGORITHMS.items() if loss in cls.own_losses), None)


def resolve_kwargs(cls: type[Algorithm], config) -> dict[str, Any]:
    """``config.algorithm_kwargs`` checked against ``cls.params`` (unknown names and bad values
    are ValueErrors naming the algorithm), defaults filled in."""
    return resolve_params(cls.params, getattr(config, "algorithm_kwargs", None), f"algorithm {cls.name!r}")
