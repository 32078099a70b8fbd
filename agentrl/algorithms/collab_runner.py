"""Where a collaboration's rows train: role blocks, role-ordered steps and roles on their own models.

The collaboration's update runner (``agentrl.algorithms.runner``). Only the trained roles' turns
become rows (``RoleSchedule``). In role ``blocks`` one role trains for ``role_block_steps``
optimizer steps while the other policies' weights and optimizer states stay parked, exact; a
role on its own model (``collab_models``) trains that model with its own optimizer, stepped after
the Trainer's optimizer step. With ``both`` and separate policies, a rollout's rows are ordered
by role and its optimizer steps take the roles in turn, each with its policy activated first
(``agentrl.algorithms.role_steps``).

Checkpoints add ``collab_state.pt`` (parked weights and optimizer states, CCPO's statistics, the
schedule; under ZeRO-3 the parked partitions go to ``collab_policies_rank{r}.pt``, one per rank,
and a resume needs the same number of processes) and ``role_models/<role>.pt``: parts the trainer
saves and loads in its one loop (``checkpointed``). The final model folder also holds
``collab.json`` and every policy as ``policies/<name>/`` for evaluation.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrl.algorithms.role_steps import RoleSchedule, RoleSteps
from agentrl.algorithms.runner import UpdateRunner
from agentrl.collab import Collaboration, to_dict
from agentrl.credit.collab import CcpoState
from agentrl.policies import PolicyStore
from agentrl.recipe_file import RecipeError
from agentrl.rollout.rows import episode_rows, per_episode

if TYPE_CHECKING:
    from agentrl.policies.separate import RoleModel

COLLAB_STATE = "collab_state.pt"


class CollabRunner(UpdateRunner):
    """The collaboration's rows, micro-batches, micro-steps and checkpoints (module docstring)."""

    def __init__(self, learner, collab: Collaboration, policies: PolicyStore, schedule: RoleSchedule,
                 role_steps: RoleSteps | None):
        super().__init__(learner)
        self.collab, self.policies, self.schedule, self.role_steps = collab, policies, schedule, role_steps

    # ------------------------------------------------------------------ which role trains
    def _role_ordered(self, mode: str) -> bool:
        return self.role_steps is not None and mode == "train"

    def _block_role(self) -> str | None:
        """The role that trains at this step in role blocks (None in evaluation or with ``both``,
        where every role's rows train the trainer's model)."""
        trained = self.schedule.trained(self.learner.step)
        return trained[0] if self.learner.training and len(trained) == 1 else None

    def _training_role_model(self) -> RoleModel | None:
        """The role model whose role trains at this step (``collab_models``, role blocks), else None."""
        role = self._block_role()
        return None if role is None else self.policies.role_model(role)

    def pad_id(self) -> int:
        role = self._block_role()
        return super().pad_id() if role is None else self.policies.tokenizer(role).pad_token_id

    def loss_model(self, mb: dict[str, Any]):
        role = self._block_role()
        return super().loss_model(mb) if role is None else self.policies.loss_model(role)

    # ------------------------------------------------------------------ rows and micro-batches
    def rows(self, episodes, credited, mode):
        """Role-ordered steps: every role's rows to one count on every rank, role after role."""
        if not self._role_ordered(mode):
            return self.balanced_rows(episodes, credited, mode, self.pad_id())
        by_role: dict[str, list] = {n: [] for n in self.collab.role_names}
        for ep, adv in per_episode(episodes, credited.local()):
            by_role[ep.tokens.role.name] += episode_rows(ep, adv, credited.per_token)
        groups = [by_role[n] for n in self.collab.role_names]
        lr = self.learner
        n_max = lr.max_over_ranks(max(len(r) for r in groups))
        return self.role_steps.balance(groups, n_max, lr.config.max_rows_per_rank, self.pad_id(), lr.row_rng())

    def micro_batches(self, batch, mode, *, by_length, generator):
        """Role-ordered steps: the rollout's micro-batches role after role, each tagged with its
        role (``RoleSteps.micro_batches``)."""
        if not self._role_ordered(mode):
            return super().micro_batches(batch, mode, by_length=by_length, generator=generator)
        lr = self.learner
        out = self.role_steps.micro_batches(batch, lr.split_invariant, lr.sum_over_ranks)
        per = len(out) // self.role_steps.n_roles
        for i, mb in enumerate(out):
            mb["role"] = i // per
        return out

    def policy(self, mb):
        """A role-ordered micro-batch's rows are its role's policy's (old log-probs under it)."""
        if "role" not in mb:
            return nullcontext()
        return self.policies.use(self.collab.roles[mb["role"]].name)

    # ------------------------------------------------------------------ micro-steps
    def begin_micro_step(self, model):
        """Role-ordered steps: activate the role's policy before its optimizer step's first
        micro-batch (no gradients are pending there). A role on its own model: its loss on that model."""
        lr = self.learner
        # Trainer.training_step puts only the model it is given in train mode; the learner's model
        # must be too, since the trainer reads model.training to tell training from evaluation
        lr.model.train()
        rm = self._training_role_model()
        if rm is not None:
            return rm.model
        if self.role_steps is not None and lr.micro_step % lr.config.gradient_accumulation_steps == 0:
            k = self.role_steps.role_at(lr.micro_step)
            self.policies.activate(self.collab.roles[k].name)
            lr.log_metric("collab/trained_role", float(k))
        return model

    def end_micro_step(self) -> None:
        """A role on its own model: that model's optimizer step after the optimizer step's last
        micro-batch (the Trainer's optimizer steps with no gradients), unless the guard refused it."""
        lr = self.learner
        rm = self._training_role_model()
        if rm is None or lr.micro_step % lr.config.gradient_accumulation_steps != 0:
            return
        if lr.skip_update:
            rm.optimizer.zero_grad(set_to_none=True)
            return
        lr.log_metric("collab/role_model_grad_norm", rm.step(lr.learning_rate(), lr.config.max_grad_norm))

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> dict[str, Any]:
        """What ``collab_state.pt`` holds."""
        lr = self.learner
        ccpo = lr.algorithm_state if lr.algorithm_state is not None else CcpoState()
        return {"policies": self.policies.state_dict(lr.ranks.world), "ccpo": ccpo.state_dict(),
                "schedule": asdict(self.schedule), "global_step": lr.step}

    def checkpointed(self) -> list:
        """``collab_state.pt`` (first: it checks the schedule and the process count), then the policy
        store's own files (``PolicyStore.checkpointed``)."""
        return [_CollabState(self), *self.policies.checkpointed()]

    def restored_state(self) -> CcpoState | None:
        """CCPO's statistics the last loaded checkpoint held (the trainer puts them back), once."""
        out, self._restored = getattr(self, "_restored", None), None
        return out

    def model_folders(self, output_dir: str) -> list[tuple[str, AbstractContextManager]]:
        """Every policy of the trainer's model as ``policies/<name>/``, each with its weights put in
        place: on every rank under ZeRO-3 (gathers and swaps are collective), else on the main
        process, when the roles have policies of their own."""
        zero3, main = self.policies.zero3, self.learner.ranks.is_main
        if not (zero3 or (main and (self.policies.separate or self.policies.role_models))):
            return []
        out = Path(output_dir) / "policies"
        return [(str(out / name), self.policies.use_policy(name)) for name in self.policies.names]

    def model_files(self, output_dir: str) -> None:
        """``collab.json`` and every role model as ``policies/<policy>/`` with its own tokenizer."""
        if not self.learner.ranks.is_main:
            return
        out = Path(output_dir)
        (out / "collab.json").write_text(json.dumps(to_dict(self.collab), indent=1))
        for role, rm in self.policies.role_models.items():
            d = out / "policies" / self.collab.role(role).policy
            rm.model.save_pretrained(str(d))
            rm.tokenizer.save_pretrained(str(d))


class _CollabState:
    """``collab_state.pt``: the parked policies (or, under ZeRO-3, their process count), CCPO's
    statistics, the role schedule and the step (``agentrl.checkpoints.Checkpointed``)."""

    file = COLLAB_STATE
    required = "not a checkpoint of a collaboration run"

    def __init__(self, runner: CollabRunner):
        self.runner = runner

    def state_dict(self) -> dict[str, Any]:
        return self.runner.checkpoint_state()

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """RecipeError for a checkpoint of another role schedule; CheckpointMismatch (a ValueError) for
        one of another number of ZeRO-3 processes."""
        r = self.runner
        saved = RoleSchedule(tuple(d["schedule"]["roles"]), d["schedule"]["kind"], d["schedule"]["block_steps"])
        if saved != r.schedule:
            raise RecipeError(f"resume: the checkpoint's role schedule {asdict(saved)} differs from this run's "
                              f"{asdict(r.schedule)}")
        r.policies.load_saved(d["policies"], "the checkpoint", r.learner.ranks.world)
        r._restored = CcpoState.from_state_dict(d["ccpo"])
