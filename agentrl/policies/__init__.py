"""Where each role's weights live, behind one store: the trainer asks it, never branches on it.

A collaboration names a policy per role (``agentrl.collab``). The weights of a policy live in one
of three places:

* **shared**: one policy name for every role; the trainer's model plays them all
  (``SwappedPolicies`` with one name: nothing to swap);
* **swapped** (``swap.SwappedPolicies``; ``swap_zero3.Zero3SwappedPolicies`` under ZeRO-3): several
  policies take turns in the trainer's model parameters, the others parked as exact copies;
* **separate model** (``separate.RoleModel``, recipe key ``collab_models``): the role has its own
  model object, tokenizer and optimizer.

``PolicyStore`` gives every role the same questions: ``use(role)`` (its weights in place for a
generation), ``activate(role)`` (it becomes the trained policy: weights and optimizer state),
``use_policy(name)`` (the same by policy name), ``generate(role, prompts)``, ``tokenizer(role)``, ``loss_model(role)``, ``role_model(role)`` (its
own model, if any), ``state_dict`` / ``checkpointed`` / ``load_saved`` for checkpoints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from agentrl.checkpoints import Part
from agentrl.policies.separate import ROLE_MODELS_DIR, RoleModel
from agentrl.policies.swap import PolicyNames, SwappedPolicies
from agentrl.policies.swap_zero3 import Zero3SwappedPolicies

ZERO3_PARTITIONS = "collab_policies_rank{rank}.pt"
"""Under ZeRO-3 each rank's parked policy partitions (``Zero3SwappedPolicies.state_dict``)."""


class CheckpointMismatch(ValueError):
    """A checkpoint's policies cannot be loaded into this run (one line, for the caller to report)."""


class PolicyStore:
    """Per role: where its weights live and how to generate, train and checkpoint with them.

    Args:
        role_policy: role name -> policy name.
        swaps: the policies held in the trainer's model (their names are the policies of the roles
            without a ``role_models`` entry).
        role_models: role name -> its own ``RoleModel``.
        generate: completions of token-id prompts by the trainer's model as it is now.
        tokenizer: the trainer's tokenizer.
        model: the trainer's (unwrapped-or-not) model that in-model roles' rows train.
    """

    def __init__(self, role_policy: dict[str, str], swaps: PolicyNames, role_models: dict[str, RoleModel],
                 generate: Callable[[list[list[int]]], Any], tokenizer, model: Callable[[], Any]):
        self.role_policy = dict(role_policy)
        self.swaps = swaps
        self.role_models = dict(role_models)
        self._generate = generate
        self._tokenizer = tokenizer
        self._model = model

    # ------------------------------------------------------------------ what a role uses
    @property
    def names(self) -> tuple[str, ...]:
        """The policies held in the trainer's model."""
        return self.swaps.names

    @property
    def separate(self) -> bool:
        """Whether the trainer's model holds more than one policy."""
        return self.swaps.separate

    @property
    def loaded(self) -> str:
        """The policy whose weights are in the trainer's model now."""
        return self.swaps.loaded

    @property
    def zero3(self) -> bool:
        return isinstance(self.swaps, Zero3SwappedPolicies)

    def role_model(self, role: str) -> RoleModel | None:
        """The role's own model, or None when the trainer's model plays it."""
        return self.role_models.get(role)

    @contextlib.contextmanager
    def use(self, role: str) -> Iterator[None]:
        """The role's weights in place for a generation (a role model's always are)."""
        if role in self.role_models:
            yield
            return
        with self.swaps.use(self.role_policy[role]):
            yield

    def use_policy(self, name: str):
        """A policy of the trainer's model by its policy name (e.g. to save each one)."""
        return self.swaps.use(name)

    def activate(self, role: str) -> bool:
        """Make the role's policy the trained one (weights and optimizer state); whether a swap ran."""
        return False if role in self.role_models else self.swaps.activate(self.role_policy[role])

    def generate(self, role: str, prompts: list[list[int]]):
        """Completions of ``prompts`` (in the role's tokenizer) by the role's current policy."""
        rm = self.role_models.get(role)
        if rm is not None:
            return rm.generate(prompts)
        with self.use(role):
            return self._generate(prompts)

    def tokenizer(self, role: str):
        rm = self.role_models.get(role)
        return rm.tokenizer if rm is not None else self._tokenizer

    def loss_model(self, role: str):
        """The model the role's rows train (its log-probs are the old ones)."""
        rm = self.role_models.get(role)
        return rm.model if rm is not None else self._model()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self, num_processes: int) -> dict[str, Any]:
        """The parked policies for the checkpoint's collaboration state; under ZeRO-3 only the
        process count (each rank writes its own partitions, ``save``)."""
        return {"per_rank": num_processes} if self.zero3 else self.swaps.state_dict()

    def checkpointed(self) -> list[Part]:
        """The store's own checkpoint files (``agentrl.checkpoints.Checkpointed``): under ZeRO-3 each
        rank's parked partitions; each role model's weights and optimizer state (main process)."""
        parts = [Part(ZERO3_PARTITIONS, self.swaps, required="not a checkpoint of this ZeRO-3 run's policies")
                 ] if self.zero3 else []
        return parts + [Part(f"{ROLE_MODELS_DIR}/{role}.pt", rm, required="not a checkpoint of this collab_models run",
                             map_location=next(rm.model.parameters()).device)
                        for role, rm in self.role_models.items()]

    def load_saved(self, saved: dict[str, Any], checkpoint: str, num_processes: int) -> None:
        """Back to a checkpoint's parked policies (``saved``: what ``state_dict`` gave; under ZeRO-3
        the partitions are a part of their own, ``checkpointed``); ``CheckpointMismatch`` when it was
        written by another number of ZeRO-3 processes."""
        if not self.zero3:
            self.swaps.load_state_dict(saved)
        elif saved.get("per_rank") != num_processes:
            raise CheckpointMismatch(f"resume: {checkpoint} holds separate policies' ZeRO-3 partitions of "
                                     f"{saved.get('per_rank')} processes, this run has {num_processes}")


__all__ = ["CheckpointMismatch", "PolicyNames", "PolicyStore", "RoleModel", "SwappedPolicies", "Zero3SwappedPolicies",
           "ZERO3_PARTITIONS"]
