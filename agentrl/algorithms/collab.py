"""Collaborations of roles (CCPO / SEPO, arXiv 2603.21563) as an algorithm plug-in.

Selected by ``algorithm: collab`` (or, in older recipes, by ``collab:`` or a collaboration credit
module). Its hooks:

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
* ``runner``: which role's rows train when, on which weights, and the checkpoint's policies
  (``agentrl.algorithms.collab_runner``).
"""

from __future__ import annotations

import functools

from agentrl.algorithms.base import Advantages, Algorithm, register_algorithm
from agentrl.algorithms.collab_play import CollabPlay
from agentrl.algorithms.role_steps import RoleSchedule, RoleSteps
from agentrl.collab.context import RoleTokens
from agentrl.collab.recipe import COLLAB_CREDITS, PARAMS, SOLO_CREDITS, check_config
from agentrl.collab.spec import CollabError
from agentrl.credit.collab import RATING_TEMPLATE, VERIFIER_RANGE, CcpoState
from agentrl.credit.collab_records import state_from_diagnostics
from agentrl.policies import PolicyStore, SwappedPolicies, Zero3SwappedPolicies
from agentrl.policies.separate import load_role_model
from agentrl.policies.swap_zero3 import check_zero3
from agentrl.recipe_file import RecipeError


@register_algorithm("collab")
class Collab(Algorithm):
    """Role-by-role collaborations; the credit module is one of ``COLLAB_CREDITS`` (module docstring)."""

    params = PARAMS
    plays_async = ("cannot play in a producer process: its roles swap weights inside the learner's model "
                   "(use rollout_mode: sync)")
    records = "collab"

    def check(self, cfg):
        """The recipe's collaboration (``check_config``), its errors as one-line RecipeErrors."""
        try:
            return check_config(cfg)
        except CollabError as e:
            raise RecipeError(str(e)) from None

    def bind(self, player, learner) -> None:
        """The run's collaboration, its policies (``agentrl.policies``: played through the player's
        generate, trained on the learner's model and optimizer), schedule and player."""
        args = learner.config
        self.collab = self.check(args)
        if self.collab is None:
            raise RecipeError("the collab algorithm needs a collaboration (algorithm_kwargs: {collab: think_solve})")
        if len(self.collab.policies) > 1 and learner.is_deepspeed:
            check_zero3(learner.accelerator)
        kw = self.kwargs
        models = dict(kw["models"] or {})
        if models and (learner.ranks.world > 1 or learner.is_deepspeed):
            raise RecipeError("collab models run on one process (the role models are not wrapped for DDP or ZeRO-3)")
        role_models = {role: load_role_model(role, path, learner) for role, path in models.items()}
        main = tuple(dict.fromkeys(r.policy for r in self.collab.roles if r.name not in role_models))
        # the store reads the learner's optimizer and model off the handle (a getattr, no code of this
        # module) and generates with the player's generation: nothing calls back up into the plug-in
        # or the player (tests/trainer/test_round_trips.py)
        optimizer, model = (functools.partial(getattr, learner, name) for name in ("optimizer", "model"))
        if learner.is_deepspeed and len(main) > 1:  # swaps on each rank's partitions
            swaps = Zero3SwappedPolicies(main, optimizer)
        else:
            swaps = SwappedPolicies(learner.unwrapped_model, main, optimizer)
        self.policies = PolicyStore({r.name: r.policy for r in self.collab.roles}, swaps, role_models,
                                    player.generation, player.tokenizer, model)
        """Where each role's weights live (``agentrl.policies``)."""
        self.schedule = RoleSchedule(self.collab.role_names, kw["role_schedule"], kw["role_block_steps"])
        self.role_steps = (RoleSteps(len(self.collab.roles), args.steps_per_generation,
                                     args.gradient_accumulation_steps)
                           if kw["role_schedule"] == "both" and self.policies.separate else None)
        """Role-ordered optimizer steps (``both`` with separate policies), else None."""
        self.play = CollabPlay(self.collab, self.policies, need_solo=args.credit in SOLO_CREDITS,
                               need_ratings=args.credit == "sepo",
                               rating_template=kw["rating_template"] or RATING_TEMPLATE,
                               wrong_answer_reward=VERIFIER_RANGE[(args.env_kwargs or {}).get("scale", "01")][0])

    def advantages(self, episodes, records, state: CcpoState | None) -> tuple[Advantages, CcpoState]:
        """The collaboration credit module per record; ``ccpo`` reads ``state`` (None before the
        first update: fresh statistics) and its diagnostics carry the updated statistics
        (``credit/ccpo_state/*``), which become the new state."""
        state = CcpoState() if state is None else state
        extra = {"state": state} if self.config.credit == "ccpo" else {}
        adv, diag = self._credit(records, **extra)
        new = state_from_diagnostics(diag)
        return Advantages(adv, diag), state if new is None else new

    # ------------------------------------------------------------------ rollouts
    def roll_out(self, player, tasks):
        """The collaborations of this rank's tasks (``CollabPlay.episodes``); in role blocks the
        block's role is activated first (role-ordered steps activate in ``begin_micro_step``)."""
        train = self.schedule.trained(player.step) if player.training else ()
        if train and self.role_steps is None:
            self.policies.activate(train[0])
        return self.play.episodes(player, tasks, train)

    def runner(self, learner):
        """Role blocks, role-ordered steps and role models (``agentrl.algorithms.collab_runner``)."""
        from agentrl.algorithms.collab_runner import CollabRunner

        return CollabRunner(learner, self.collab, self.policies, self.schedule, self.role_steps)

    # ------------------------------------------------------------------ metrics
    def metric_episodes(self, episodes):
        """The collaborations' answers (the last role's joint turns) only."""
        final = self.collab.final.name
        return [ep for ep in episodes if isinstance(ep.tokens, RoleTokens) and ep.tokens.part == "joint"
                and ep.tokens.role.name == final]

    def metrics(self, step: int) -> dict[str, float]:
        t = self.play.times
        out = {f"collab/{k}": float(v) for k, v in t.items()}
        out["collab/counterfactual_overhead"] = t.get("counterfactual_s", 0.0) / max(t.get("joint_s", 0.0), 1e-9)
        if self.role_steps is None:  # else logged per optimizer step (the runner's begin_micro_step)
            trained = self.schedule.trained(step)
            out["collab/trained_role"] = (float(self.collab.role_names.index(trained[0])) if len(trained) == 1
                                          else -1.0)
        return out


__all__ = ["COLLAB_CREDITS", "Collab"]
