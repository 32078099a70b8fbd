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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from agentrl.registry import class_registrar

if TYPE_CHECKING:
    import torch

    from agentrl.records import StepRecord
    from agentrl.rollout.contexts import Row
    from agentrl.rollout.episodes import Episode
    from agentrl.rollout.rows import RowCounts


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

    Hooks that decide who plays and what trains (the defaults are the trainer's own steps; the
    ``collab`` plug-in plays roles with their own policies and trains them in turn):

    * ``roll_out(trainer, tasks) -> list[Episode]``: this rank's episodes of an iteration;
    * ``row_groups(trainer, episodes, credited, mode) -> list[list[Row]]``: the training rows, in
      groups that ``balance_rows`` evens out each on its own;
    * ``balance_rows(trainer, groups, mode) -> (rows, RowCounts)``: the same row count on every rank;
    * ``pad_id(trainer)``, ``loss_model(trainer)``: the pad id of the rows and the model they train;
    * ``old_logps(trainer, batch, mode) -> dict``: the batch's old / reference log-probs;
    * ``regroups_micro_batches(trainer) -> bool``, ``micro_batches(trainer, batch) -> list[dict]``:
      whether the trainer cuts the rollout's micro-batches itself, and how;
    * ``begin_micro_step(trainer, model) -> model``, ``end_micro_step(trainer)``: around each
      training micro-step (the model it trains; an optimizer step of a model TRL does not own);
    * ``save_checkpoint(trainer, output_dir)``, ``load_checkpoint(trainer, checkpoint, state) ->
      state``: the algorithm's part of a checkpoint (after TRL's optimizer and scheduler);
    * ``save_model(trainer, output_dir)``: more files in the final model folder.
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

    # ------------------------------------------------------------------ who plays, what trains
    def roll_out(self, trainer, tasks: list[dict]) -> list[Episode]:
        """The current policy plays ``tasks``; then ``extra_episodes``."""
        episodes = trainer.rollout(tasks)
        return episodes + self.extra_episodes(trainer, episodes)

    def row_groups(self, trainer, episodes: list[Episode], credited, mode: str) -> list[list[Row]]:
        """One group: every episode's rows."""
        return [trainer.episode_rows(episodes, credited)]

    def balance_rows(self, trainer, groups: list[list[Row]], mode: str) -> tuple[list[Row], RowCounts]:
        """All rows to one count R on every rank (``agentrl.rollout.rows``)."""
        return trainer.balance_rows([r for g in groups for r in g], mode)

    def pad_id(self, trainer) -> int:
        """The trainer's tokenizer's pad id."""
        return trainer._tokenizer.pad_token_id

    def loss_model(self, trainer):
        """The trainer's model."""
        return trainer.model

    def old_logps(self, trainer, batch: dict[str, Any], mode: str) -> dict[str, torch.Tensor]:
        """The trainer's (``AgentGRPOTrainer.logps_for_loss``)."""
        return trainer.logps_for_loss(batch, mode)

    def regroups_micro_batches(self, trainer) -> bool:
        """Where the gradient does not depend on it (``AgentGRPOTrainer.groups_rows_by_length``)."""
        return trainer.groups_rows_by_length()

    def micro_batches(self, trainer, batch: dict[str, Any]) -> list[dict[str, Any]]:
        """``steps_per_generation`` micro-batches of rows of similar length."""
        from agentrl.rollout.rows import length_grouped_micro_batches

        return length_grouped_micro_batches(batch, trainer.args.steps_per_generation)

    def begin_micro_step(self, trainer, model):
        """The micro-step trains ``model``."""
        return model

    def end_micro_step(self, trainer) -> None:
        """Nothing after a micro-step."""

    def save_checkpoint(self, trainer, output_dir: str) -> None:
        """Nothing beyond TRL's checkpoint."""

    def load_checkpoint(self, trainer, checkpoint: str, state: Any) -> Any:
        """The state as it is."""
        return state

    def save_model(self, trainer, output_dir: str) -> None:
        """Nothing beyond TRL's model folder."""


_ALGORITHMS: dict[str, type[Algorithm]] = {}


register_algorithm = class_registrar(_ALGORITHMS, "algorithm")
"""Class decorator: register an ``Algorithm`` subclass under ``name`` (duplicates refused)."""

register_algorithm("grpo")(Algorithm)


def algorithm_names() -> list[str]:
    return sorted(_ALGORITHMS)


def get_algorithm(name: str) -> type[Algorithm]:
    if name not in _ALGORITHMS:
        raise KeyError(f"unknown algorithm {name!r}; registered: {', '.join(algorithm_names())}")
    return _ALGORITHMS[name]
