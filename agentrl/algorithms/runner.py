"""The update runner: which weights each part of the update trains, and what a checkpoint adds.

An algorithm decides what is played and how it is credited and scored; its runner decides where
the resulting rows train. The default trains the trainer's own model on every row, and its methods
are the trainer's plain steps. A run whose rows belong to several policies (a collaboration of
roles: ``agentrl.algorithms.collab_runner``) has its own runner; nobody else's interface grows.

The trainer calls, per iteration: ``rows`` (episodes -> balanced rows), ``micro_batches`` (the
packed rows -> the update's micro-batches), ``policy`` around the no-grad forwards of a
micro-batch (old log-probs), ``begin_micro_step`` / ``end_micro_step`` around each training
micro-step; and ``checkpointed`` / ``restored_state`` / ``model_folders`` / ``model_files`` for the
run folder. A
runner is given the ``Learner`` handle (``agentrl.algorithms.learner``), not the trainer, and plain
data in each call (it never calls back into the trainer); it makes rows with
``agentrl.rollout.rows`` itself.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from agentrl.rollout.rows import (
    balance_rows,
    episode_rows,
    length_grouped_micro_batches,
    per_episode,
    row_target,
    shuffled_micro_batches,
    trim_padding,
)

if TYPE_CHECKING:
    import torch

    from agentrl.algorithms.learner import Learner
    from agentrl.rollout.contexts import Row
    from agentrl.rollout.episodes import Episode
    from agentrl.rollout.rows import RowCounts


class UpdateRunner:
    """One policy, the learner's model, trains on every row (see the module docstring)."""

    def __init__(self, learner: Learner):
        self.learner = learner

    def pad_id(self) -> int:
        """The pad id of the rows."""
        return self.learner.tokenizer.pad_token_id

    def rows(self, episodes: list[Episode], credited, mode: str) -> tuple[list[Row], RowCounts]:
        """Every episode's rows (from the context that played it), balanced to one count on every
        rank (``agentrl.rollout.rows.balance_rows``)."""
        return self.balanced_rows(episodes, credited, mode, self.pad_id())

    def balanced_rows(self, episodes: list[Episode], credited, mode: str,
                      pad_id: int) -> tuple[list[Row], RowCounts]:
        """``rows`` with the fillers' pad id given: a subclass passes its own down rather than this
        method calling its override back (``tests/trainer/test_round_trips.py``)."""
        rows = [row for ep, adv in per_episode(episodes, credited.local())
                for row in episode_rows(ep, adv, credited.per_token)]
        c, lr = self.learner.config, self.learner
        spg = c.steps_per_generation if mode == "train" else 1
        # to the count every rank trains on: fillers or a seeded sample
        target = row_target(lr.max_over_ranks(len(rows)), c.max_rows_per_rank, spg)
        return balance_rows(rows, target, pad_id, lr.row_rng())

    def micro_batches(self, batch: dict[str, Any], mode: str, *, by_length: bool,
                      generator: torch.Generator) -> list[dict[str, Any]]:
        """``steps_per_generation`` micro-batches (one in evaluation): grouped by length where the
        gradient does not depend on the grouping (``by_length``: the trainer decides it once for the
        run), else shuffled with ``generator``."""
        n = self.learner.config.steps_per_generation if mode == "train" else 1
        if n == 1:
            return [trim_padding(batch)]
        if by_length:
            return length_grouped_micro_batches(batch, n)
        return shuffled_micro_batches(batch, n, generator)

    def policy(self, mb: dict[str, Any]):
        """Context in which ``mb``'s rows are the policy's (its no-grad forwards run inside)."""
        return nullcontext()

    def loss_model(self, mb: dict[str, Any]):
        """The model whose log-probs ``mb``'s old log-probs are (the one it trains)."""
        return self.learner.model

    def begin_micro_step(self, model):
        """The model a training micro-step runs on."""
        return model

    def end_micro_step(self) -> None:
        """After a training micro-step (the trainer's ``skip_update`` says whether the optimizer
        step that ends here was refused by the non-finite guard)."""

    def checkpointed(self) -> list:
        """The runner's checkpoint parts (``agentrl.checkpoints.Checkpointed``): none beyond the
        trainer's checkpoint."""
        return []

    def restored_state(self) -> Any:
        """The algorithm state the last loaded checkpoint held, for the trainer to put back (None:
        none)."""
        return None

    def model_folders(self, output_dir: str) -> list[tuple[str, AbstractContextManager]]:
        """Folders the trainer saves its model into besides ``output_dir``, each with the context that
        puts the weights that belong there in place: none here."""
        return []

    def model_files(self, output_dir: str) -> None:
        """Files of the runner's own in the final model folder: none here."""
