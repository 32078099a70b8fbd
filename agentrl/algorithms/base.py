"""The algorithm plug-in: a few named hooks that ``AgentGRPOTrainer``'s steps call, and its registry.

An RL algorithm on agent episodes differs from GRPO in a few places only: it may play more
episodes after the rollout (APPO's branches), turn the gathered records into advantages its own
way (per record or per token, with state carried across iterations), reweight the advantages
inside the loss (APPO's Eq. 7) and refuse settings it cannot run with. Each place is one hook
here; the trainer has one TRL subclass and calls them, so an algorithm is a small object, not a
trainer subclass. ``Algorithm`` itself is the GRPO-style default: every hook is the identity or
the plain credit module.

Algorithms register at their definition (``@register_algorithm("name")``, duplicates refused, as
``agentrl.credit.registry`` does for estimators). A recipe does not name the algorithm: it follows
from the keys it already has (``algorithm_name``), so every recipe keeps its behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

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
    """GRPO-style default: one rollout, the recipe's credit module per record, TRL's loss as is.

    Hooks (all optional to override):

    * ``check(config)``: raise ``RecipeError`` (one line) for settings it cannot run with;
    * ``bind(trainer)``: once, after the trainer is built (caches that need its tokenizer);
    * ``extra_episodes(trainer, episodes) -> list[Episode]``: more episodes after the rollout
      (collective: play them with ``trainer.rollout``, the same number of calls on every rank);
      they get credit, and rows from their own context (a ``branch`` context gives none);
    * ``shape_rewards(episodes)``: this rank's episodes after the trainer's reward shaping,
      before the records are gathered;
    * ``advantages(trainer, episodes, records, state) -> (Advantages, state)``: the global
      records' advantages; ``state`` is what the previous iteration returned (``initial_state``
      at the start, restored from checkpoints by the trainer);
    * ``loss_transform(trainer, logps, inputs) -> (advantages, metrics)``: the advantages TRL's
      loss uses for one micro-batch, from the loss's own detached log-probs; only called when
      ``transforms_loss`` is True;
    * ``metric_episodes(episodes)``: the episodes ``env/*`` metrics are over;
    * ``metrics(trainer) -> dict``: the algorithm's own metrics of the iteration.
    """

    name = "grpo"
    transforms_loss = False
    """Whether ``loss_transform`` is called (the trainer skips the interception otherwise)."""

    def __init__(self, config=None):
        self.config = config

    def check(self, config) -> None:
        """Nothing beyond the credit module's own validation."""

    def bind(self, trainer) -> None:
        """No per-run caches."""

    def initial_state(self) -> Any:
        """The state before the first iteration (None: stateless)."""
        return None

    def extra_episodes(self, trainer, episodes: list[Episode]) -> list[Episode]:
        return []

    def shape_rewards(self, episodes: list[Episode]) -> None:
        """No shaping beyond ``valid_action_reward``."""

    def advantages(self, trainer, episodes: list[Episode], records: list[StepRecord],
                   state: Any) -> tuple[Advantages, Any]:
        """The recipe's credit module on the global records."""
        adv, diag = trainer.compute_credit(records)
        return Advantages(adv, diag), state

    def loss_transform(self, trainer, logps: torch.Tensor, inputs: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        return inputs["advantages"], {}

    def metric_episodes(self, episodes: list[Episode]) -> list[Episode]:
        return episodes

    def metrics(self, trainer) -> dict[str, float]:
        return {}


_ALGORITHMS: dict[str, type[Algorithm]] = {}


def register_algorithm(name: str) -> Callable[[type[Algorithm]], type[Algorithm]]:
    """Class decorator: register an ``Algorithm`` subclass under ``name`` (duplicates refused)."""

    def deco(cls: type[Algorithm]) -> type[Algorithm]:
        if name in _ALGORITHMS:
            raise ValueError(f"algorithm {name!r} is already registered ({_ALGORITHMS[name].__qualname__})")
        cls.name = name
        _ALGORITHMS[name] = cls
        return cls

    return deco


register_algorithm("grpo")(Algorithm)


def algorithm_names() -> list[str]:
    return sorted(_ALGORITHMS)


def get_algorithm(name: str) -> type[Algorithm]:
    if name not in _ALGORITHMS:
        raise KeyError(f"unknown algorithm {name!r}; registered: {', '.join(algorithm_names())}")
    return _ALGORITHMS[name]
