"""Collaborations of roles (CCPO / SEPO, arXiv 2603.21563) as an algorithm plug-in.

Selected when the recipe sets ``collab:`` (or names a collaboration credit module). Its hooks:

* ``check``: the collaboration recipe check (``agentrl.collab.recipe.check_config``: collab keys,
  credit module, env and policies fit together);
* ``bind``: the ``PolicyStore`` (where each role's weights live: the trainer's model, swapped
  policies in it, or a role's own model), the role schedule and, for ``both`` with separate
  policies, the role-ordered steps (``agentrl.algorithms.role_steps``);
* ``roll_out``: per task the joint rollouts, counterfactuals and ratings (``collab_play``); in
  role blocks the block's role is activated first;
* ``advantages``: the collaboration credit module per record, with CCPO's EMA statistics
  (App. C.2) as explicit state: in to the ``ccpo`` estimator, out from its diagnostics; the trainer
  keeps it between iterations (advanced in training only) and the checkpoint saves it;
* only the trained roles' turns become rows (``RoleSchedule``): in ``blocks`` one role trains for
  ``role_block_steps`` optimizer steps, in role order (Thinker first), while the other policies'
  weights and optimizer states stay parked, exact; in ``both`` every role trains on every rollout:
  with one shared policy in the same optimizer steps; with separate policies in role-ordered
  optimizer steps (``row_groups``, ``balance_rows``, ``old_logps``, ``micro_batches``,
  ``begin_micro_step``: each step one role's rows with its policy activated before it);
* a role on its own model (``collab_models``, role blocks): its rows' pad id and loss model are
  its own, and its optimizer steps at the end of each optimizer step (``end_micro_step``);
* checkpoints add ``collab_state.pt`` (parked weights and optimizer states, CCPO's statistics,
  the schedule; under ZeRO-3 the parked partitions go to ``collab_policies_rank{r}.pt``, one per
  rank, and a resume needs the same number of processes); a resumed run continues the schedule
  from the checkpoint's step. The final model folder also holds ``collab.json`` and every policy
  as ``policies/<name>/`` for evaluation.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentrl.algorithms.base import Advantages, Algorithm, register_algorithm
from agentrl.algorithms.collab_play import CollabPlay
from agentrl.algorithms.role_steps import RoleSchedule, RoleSteps, take_rows
from agentrl.collab import to_dict
from agentrl.collab.context import RoleTokens
from agentrl.collab.recipe import COLLAB_CREDITS, SOLO_CREDITS, check_config
from agentrl.collab.spec import CollabError
from agentrl.credit.collab import RATING_TEMPLATE, VERIFIER_RANGE, CcpoState
from agentrl.credit.collab_records import state_from_diagnostics
from agentrl.policies import CheckpointMismatch, PolicyStore, SwappedPolicies, Zero3SwappedPolicies
from agentrl.policies.separate import RoleModel, load_role_model
from agentrl.policies.swap_zero3 import check_zero3
from agentrl.recipe_file import RecipeError
from agentrl.rollout.rows import episode_rows, per_episode

COLLAB_STATE = "collab_state.pt"


@register_algorithm("collab")
class Collab(Algorithm):
    """Role-by-role collaborations; the credit module is one of ``COLLAB_CREDITS`` (module docstring)."""

    def check(self, cfg):
        """The recipe's collaboration (``check_config``), its errors as one-line RecipeErrors."""
        try:
            return check_config(cfg)
        except CollabError as e:
            raise RecipeError(str(e)) from None

    def bind(self, trainer) -> None:
        """The run's collaboration, its policies (``agentrl.policies``), schedule and player."""
        args = trainer.args
        self.collab = self.check(args)
        if self.collab is None:
            raise RecipeError("the collab algorithm needs a collaboration (recipe key collab)")
        if len(self.collab.policies) > 1 and trainer.is_deepspeed_enabled:
            check_zero3(trainer.accelerator)
        models = dict(args.collab_models or {})
        if models and (trainer.accelerator.num_processes > 1 or trainer.is_deepspeed_enabled):
            raise RecipeError("collab_models runs on one process (the role models are not wrapped for DDP or ZeRO-3)")
        role_models = {role: load_role_model(role, path, trainer) for role, path in models.items()}
        main = tuple(dict.fromkeys(r.policy for r in self.collab.roles if r.name not in role_models))
        if trainer.is_deepspeed_enabled and len(main) > 1:  # swaps on each rank's partitions
            swaps = Zero3SwappedPolicies(main, lambda: trainer.optimizer)
        else:
            swaps = SwappedPolicies(trainer.accelerator.unwrap_model(trainer.model), main, lambda: trainer.optimizer)
        self.policies = PolicyStore({r.name: r.policy for r in self.collab.roles}, swaps, role_models,
                                    trainer._turn_generate, trainer.processing_class, lambda: trainer.model)
        """Where each role's weights live (``agentrl.policies``)."""
        self.schedule = RoleSchedule(self.collab.role_names, args.role_schedule, args.role_block_steps)
        self.role_steps = (RoleSteps(len(self.collab.roles), args.steps_per_generation,
                                     args.gradient_accumulation_steps)
                           if args.role_schedule == "both" and self.policies.separate else None)
        """Role-ordered optimizer steps (``both`` with separate policies), else None."""
        self.play = CollabPlay(self.collab, self.policies, need_solo=args.credit in SOLO_CREDITS,
                               need_ratings=args.credit == "sepo",
                               rating_template=args.collab_rating_template or RATING_TEMPLATE,
                               wrong_answer_reward=VERIFIER_RANGE[(args.env_kwargs or {}).get("scale", "01")][0])

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

    # ------------------------------------------------------------------ rollouts
    def roll_out(self, trainer, tasks):
        """The collaborations of this rank's tasks (``CollabPlay.episodes``); in role blocks the
        block's role is activated first (role-ordered steps activate in ``begin_micro_step``)."""
        train = self.schedule.trained(trainer.state.global_step) if trainer.model.training else ()
        if train and self.role_steps is None:
            self.policies.activate(train[0])
        return self.play.episodes(trainer, tasks, train)

    # ------------------------------------------------------------------ which role trains
    def _role_ordered(self, mode: str) -> bool:
        return self.role_steps is not None and mode == "train"

    def _block_role(self, trainer) -> str | None:
        """The role that trains at this step in role blocks (None in evaluation or with ``both``,
        where every role's rows train the trainer's model)."""
        trained = self.schedule.trained(trainer.state.global_step)
        return trained[0] if trainer.model.training and len(trained) == 1 else None

    def _training_role_model(self, trainer) -> RoleModel | None:
        """The role model whose role trains at this step (``collab_models``, role blocks), else None."""
        role = self._block_role(trainer)
        return None if role is None else self.policies.role_model(role)

    def pad_id(self, trainer) -> int:
        role = self._block_role(trainer)
        return super().pad_id(trainer) if role is None else self.policies.tokenizer(role).pad_token_id

    def loss_model(self, trainer):
        role = self._block_role(trainer)
        return super().loss_model(trainer) if role is None else self.policies.loss_model(role)

    # ------------------------------------------------------------------ role-ordered steps
    def row_groups(self, trainer, episodes, credited, mode):
        """Role-ordered steps: one group per role, in role order."""
        if not self._role_ordered(mode):
            return super().row_groups(trainer, episodes, credited, mode)
        by_role: dict[str, list] = {n: [] for n in self.collab.role_names}
        for ep, adv in per_episode(episodes, credited.local()):
            by_role[ep.tokens.role.name] += episode_rows(ep, adv, credited.per_token)
        return [by_role[n] for n in self.collab.role_names]

    def balance_rows(self, trainer, groups, mode):
        """Role-ordered steps: every role's rows to one count R on every rank, role after role."""
        if not self._role_ordered(mode):
            return super().balance_rows(trainer, groups, mode)
        n_max = trainer.max_over_ranks(max(len(r) for r in groups))
        return self.role_steps.balance(groups, n_max, trainer.args.max_rows_per_rank, self.pad_id(trainer),
                                       trainer.row_rng())

    def old_logps(self, trainer, batch, mode):
        """Role-ordered steps: each role's rows get their old log-probs from their own policy."""
        if not self._role_ordered(mode):
            return super().old_logps(trainer, batch, mode)
        import torch

        rows = batch["prompt_ids"].shape[0]
        per = rows // self.role_steps.n_roles
        parts = []
        for k, role in enumerate(self.collab.roles):
            sub = take_rows(batch, torch.arange(k * per, (k + 1) * per), rows)
            with self.policies.use(role.name):
                parts.append(trainer.logps_for_loss(sub, mode))
        return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}

    def regroups_micro_batches(self, trainer) -> bool:
        return self.role_steps is not None or super().regroups_micro_batches(trainer)

    def micro_batches(self, trainer, batch):
        """Role-ordered steps: the rollout's micro-batches role after role (``RoleSteps.micro_batches``)."""
        if self.role_steps is None:
            return super().micro_batches(trainer, batch)
        return self.role_steps.micro_batches(batch, trainer.loss_is_split_invariant(), lambda t: trainer.accelerator.gather(t).sum())

    def begin_micro_step(self, trainer, model):
        """Role-ordered steps: activate the role's policy before its optimizer step's first
        micro-batch (no gradients are pending there). A role on its own model: its loss on that model."""
        # Trainer.training_step puts only the model it is given in train mode; the trainer's model
        # must be too, since TRL reads self.model.training to tell training from evaluation
        trainer.model.train()
        rm = self._training_role_model(trainer)
        if rm is not None:
            return rm.model
        if self.role_steps is not None and trainer._step % trainer.args.gradient_accumulation_steps == 0:
            k = self.role_steps.role_at(trainer._step)
            self.policies.activate(self.collab.roles[k].name)
            trainer._metrics["train"]["collab/trained_role"].append(float(k))
        return model

    def end_micro_step(self, trainer) -> None:
        """A role on its own model: that model's optimizer step after the optimizer step's last
        micro-batch (the Trainer's optimizer steps with no gradients)."""
        rm = self._training_role_model(trainer)
        if rm is not None and trainer._step % trainer.args.gradient_accumulation_steps == 0:  # TRL counted it
            norm = rm.step(trainer._get_learning_rate(), trainer.args.max_grad_norm)
            trainer._metrics["train"]["collab/role_model_grad_norm"].append(norm)

    # ------------------------------------------------------------------ metrics
    def metric_episodes(self, episodes):
        """The collaborations' answers (the last role's joint turns) only."""
        final = self.collab.final.name
        return [ep for ep in episodes if isinstance(ep.tokens, RoleTokens) and ep.tokens.part == "joint"
                and ep.tokens.role.name == final]

    def metrics(self, trainer) -> dict[str, float]:
        t = self.play.times
        out = {f"collab/{k}": float(v) for k, v in t.items()}
        out["collab/counterfactual_overhead"] = t.get("counterfactual_s", 0.0) / max(t.get("joint_s", 0.0), 1e-9)
        if self.role_steps is None:  # else logged per optimizer step (begin_micro_step)
            trained = self.schedule.trained(trainer.state.global_step)
            out["collab/trained_role"] = (float(self.collab.role_names.index(trained[0])) if len(trained) == 1
                                          else -1.0)
        return out

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self, trainer) -> dict[str, Any]:
        """What ``collab_state.pt`` holds."""
        return {"policies": self.policies.state_dict(trainer.accelerator.num_processes),
                "ccpo": trainer.algorithm_state.state_dict(), "schedule": asdict(self.schedule),
                "global_step": int(trainer.state.global_step)}

    def save_checkpoint(self, trainer, output_dir: str) -> None:
        import torch

        self.policies.save(output_dir, trainer.accelerator.process_index, trainer.args.should_save)
        if trainer.args.should_save:
            torch.save(self.checkpoint_state(trainer), Path(output_dir) / COLLAB_STATE)

    def load_checkpoint(self, trainer, checkpoint: str, state: CcpoState) -> CcpoState:
        """The checkpoint's policies (into the store) and CCPO's statistics (returned); RecipeError
        for a checkpoint of another kind of run or schedule."""
        import torch

        path = Path(checkpoint) / COLLAB_STATE
        if not path.is_file():
            raise RecipeError(f"{checkpoint} has no {COLLAB_STATE}: not a checkpoint of a collaboration run")
        d = torch.load(path, map_location="cpu", weights_only=True)
        saved = RoleSchedule(tuple(d["schedule"]["roles"]), d["schedule"]["kind"], d["schedule"]["block_steps"])
        if saved != self.schedule:
            raise RecipeError(f"resume: the checkpoint's role schedule {asdict(saved)} differs from this run's "
                              f"{asdict(self.schedule)}")
        try:
            self.policies.load(d["policies"], checkpoint, trainer.accelerator.process_index,
                               trainer.accelerator.num_processes)
        except CheckpointMismatch as e:
            raise RecipeError(str(e)) from None
        return CcpoState.from_state_dict(d["ccpo"])

    def save_model(self, trainer, output_dir: str) -> None:
        """``collab.json`` and every policy as ``policies/<name>/`` (role models with their tokenizer)."""
        out = Path(output_dir)
        if self.policies.zero3:  # gathers and swaps are collective: every rank saves
            self._save_policies(trainer, out)
        if not trainer.accelerator.is_main_process:
            return
        (out / "collab.json").write_text(json.dumps(to_dict(self.collab), indent=1))
        if (self.policies.separate or self.policies.role_models) and not self.policies.zero3:
            self._save_policies(trainer, out)
        for role, rm in self.policies.role_models.items():  # with its own tokenizer
            d = out / "policies" / self.collab.role(role).policy
            rm.model.save_pretrained(str(d))
            rm.tokenizer.save_pretrained(str(d))

    def _save_policies(self, trainer, out: Path) -> None:
        for name in self.policies.names:
            with self.policies.use_policy(name):
                trainer.save_model(str(out / "policies" / name), _internal_call=True)


__all__ = ["COLLAB_CREDITS", "COLLAB_STATE", "Collab"]
