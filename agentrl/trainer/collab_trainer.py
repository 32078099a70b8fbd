"""``CollabTrainer``: AgentGRPOTrainer over a collaboration of roles (CCPO / SEPO, arXiv 2603.21563).

One training iteration, for each task of TRL's generation batch (one task = one collaboration;
TRL's ``num_generations`` copies of a task are the prompt group):

1. **Joint rollouts.** Each role in order plays one turn on ``agentrl/MathAnswer-v0`` through
   ``run_episodes`` with the ``role`` context (``agentrl.collab.context``), generating with its
   own policy's weights (``SwappedPolicies.use``): the Thinker writes a plan (any ``\\boxed{}`` in
   it is removed before the Solver reads it), the Solver answers from problem + plan and the
   env's verifier grades the answer (R_joint).
2. **Counterfactuals** (``ccpo``, ``ccpo_bonus``): the collaboration without its first role
   (the Solver alone on the problem, App. C.2 Eq. 23), sampled independently of the Thinker's
   turn, one per joint rollout (R_solo). Timed as ``collab/counterfactual_s``.
3. **Ratings** (``sepo``): both roles, with their current weights, rate each finished
   collaboration (Sec. 3.3); the parsed (Thinker share, Solver share) pairs go on the Solver's
   record. Ratings are not trained.
4. **Credit**: the registered collaboration module (``agentrl.credit.collab_records``) gives
   each role turn its advantage; CCPO's EMA statistics carry over iterations as the collab
   algorithm's state (``trainer.algorithm_state``, ``agentrl.algorithms.collab``).
5. **Update**: only the trained roles' turns become rows (``RoleSchedule``): in ``blocks`` one
   role trains for ``role_block_steps`` optimizer steps, in role order (Thinker first), while
   the other policies' weights and optimizer states stay parked, exact (``SwappedPolicies``). In
   ``both`` every role trains on every rollout: with one shared policy in the same optimizer
   steps; with separate policies in role-ordered optimizer steps, each step one role's rows
   with its policy activated before it (``agentrl.trainer.role_steps``).

Checkpoints add ``collab_state.pt`` (parked weights and optimizer states, CCPO's statistics,
the schedule; under ZeRO-3 the parked partitions go to ``collab_policies_rank{r}.pt``, one per
rank, and a resume needs the same number of processes); a resumed run continues the schedule
from the checkpoint's step. Separate policies run under ZeRO-3 (``Zero3SwappedPolicies``), roles on
their own models (``collab_models``) on one process only. The final
``save_model`` also writes every policy as ``policies/<name>/`` for evaluation.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object

from agentrl.collab import Collaboration, Role, clean_output, counterfactual, to_dict
from agentrl.collab.context import RoleTokens
from agentrl.collab.recipe import SOLO_CREDITS, check_config
from agentrl.collab.spec import CollabError
from agentrl.credit.collab import (
    RATING_TEMPLATE,
    SOLVER,
    THINKER,
    VERIFIER_RANGE,
    CcpoState,
    parse_rating,
    rating_prompt,
)
from agentrl.policies import CheckpointMismatch, PolicyStore, SwappedPolicies, Zero3SwappedPolicies
from agentrl.policies.separate import RoleModel, load_role_model
from agentrl.recipe_file import RecipeError
from agentrl.records import StepRecord
from agentrl.rollout.contexts import Row
from agentrl.rollout.episodes import Episode, GenerateOutput, RolloutTiming, run_episodes
from agentrl.rollout.prompts import chat_text, decode_response, encode
from agentrl.trainer.agent_trainer import AgentGRPOTrainer, Credited
from agentrl.trainer.role_steps import RoleSteps, take_rows
from agentrl.trainer.rows import RowCounts, episode_rows, per_episode, real_token_share

COLLAB_STATE = "collab_state.pt"


def _check_zero3(accelerator) -> None:
    """Separate policies under DeepSpeed: ZeRO stage 3 without offload (``Zero3SwappedPolicies``)."""
    plugin = accelerator.state.deepspeed_plugin
    zero = (plugin.deepspeed_config or {}).get("zero_optimization", {}) if plugin is not None else {}
    if int(zero.get("stage", 0)) != 3:
        raise RecipeError("separate policies under DeepSpeed need ZeRO stage 3 (or collab_policies: shared)")
    for key in ("offload_optimizer", "offload_param"):
        if (zero.get(key) or {}).get("device", "none") not in ("none", None):
            raise RecipeError(f"separate policies under ZeRO-3 do not support {key}: set its device to none")


@dataclass(frozen=True)
class RoleSchedule:
    """Which roles train at an optimizer step (pure in the step, so a resume continues it)."""

    roles: tuple[str, ...]
    """Role names in acting order."""
    kind: str = "blocks"
    """'blocks': one role per block of ``block_steps`` steps, in order; 'both': every role."""
    block_steps: int = 10
    """Steps per block (arXiv 2603.21563 Theorem 4.1 and the authors' code: 10)."""

    def trained(self, step: int) -> tuple[str, ...]:
        if self.kind == "both":
            return self.roles
        return (self.roles[(step // self.block_steps) % len(self.roles)],)


class CollabTrainer(AgentGRPOTrainer):
    """AgentGRPOTrainer whose rollouts are collaborations (module docstring)."""

    def __init__(self, model, args, collaboration: Collaboration | None = None, **kwargs):
        try:
            self.collab = collaboration or check_config(args)
        except CollabError as e:
            raise RecipeError(str(e)) from None
        if self.collab is None:
            raise RecipeError("CollabTrainer needs a collaboration (recipe key collab)")
        super().__init__(model, args, **kwargs)
        if len(self.collab.policies) > 1 and self.is_deepspeed_enabled:
            _check_zero3(self.accelerator)
        models = dict(args.collab_models or {})
        if models and (self.accelerator.num_processes > 1 or self.is_deepspeed_enabled):
            raise RecipeError("collab_models runs on one process (the role models are not wrapped for DDP or ZeRO-3)")
        role_models = {role: load_role_model(role, path, self) for role, path in models.items()}
        main = tuple(dict.fromkeys(r.policy for r in self.collab.roles if r.name not in role_models))
        if self.is_deepspeed_enabled and len(main) > 1:  # swaps on each rank's partitions
            swaps = Zero3SwappedPolicies(main, lambda: self.optimizer)
        else:
            swaps = SwappedPolicies(self.accelerator.unwrap_model(self.model), main, lambda: self.optimizer)
        self.policies = PolicyStore({r.name: r.policy for r in self.collab.roles}, swaps, role_models,
                                    self._turn_generate, self.processing_class, lambda: self.model)
        """Where each role's weights live (``agentrl.policies``)."""
        self.schedule = RoleSchedule(self.collab.role_names, args.role_schedule, args.role_block_steps)
        self.role_steps = (RoleSteps(len(self.collab.roles), args.steps_per_generation,
                                     args.gradient_accumulation_steps)
                           if args.role_schedule == "both" and self.policies.separate else None)
        """Role-ordered optimizer steps (``both`` with separate policies), else None."""
        self.need_solo = args.credit in SOLO_CREDITS
        self.need_ratings = args.credit == "sepo"
        self.rating_template = args.collab_rating_template or RATING_TEMPLATE
        self.wrong_answer_reward = VERIFIER_RANGE[(args.env_kwargs or {}).get("scale", "01")][0]
        """The verifier's reward for a wrong answer: what a final turn that could not be played gets."""
        self.collab_times: dict[str, float] = {}

    # ------------------------------------------------------------------ rollouts
    def _roll_out(self, tasks: list[dict[str, Any]]) -> tuple[list[Episode], float]:
        """Joint rollouts, counterfactuals and ratings of this rank's tasks (module steps 1-3)."""
        self._fp_time = self._gen_time = 0.0  # the counters AgentGRPOTrainer._roll_out resets
        self._gen_tokens = 0
        self._timing = RolloutTiming()
        t0 = time.perf_counter()
        train = self.schedule.trained(self.state.global_step) if self.model.training else ()
        if train and self.role_steps is None:
            self.policies.activate(train[0])  # role-ordered steps: in training_step
        self.collab_times = {f"{p}{u}": 0.0 for p in ("counterfactual", "rating") for u in ("_s", "_cpu_s")}
        with self._timed("joint"):
            joint = self.play(self.collab, tasks, "joint", set(train))
        episodes = [ep for eps in joint for ep in eps]
        if self.need_solo:
            with self._timed("counterfactual"):
                solo = self.play(counterfactual(self.collab, self.collab.roles[0].name), tasks, "solo", set())
            episodes += [ep for eps in solo for ep in eps]
        if self.need_ratings:
            with self._timed("rating"):
                self.rate(joint)
        return episodes, time.perf_counter() - t0

    @contextlib.contextmanager
    def _timed(self, phase: str):
        """Wall and CPU seconds of a rollout phase (``collab/<phase>_s``, ``collab/<phase>_cpu_s``):
        on a machine shared with other jobs this process's CPU time is the steadier figure."""
        t, c = time.perf_counter(), time.process_time()
        yield
        self.collab_times[f"{phase}_s"] = time.perf_counter() - t
        self.collab_times[f"{phase}_cpu_s"] = time.process_time() - c

    def play(self, c: Collaboration, tasks: list[dict[str, Any]], part: str, train: set[str]) -> list[list[Episode]]:
        """Play collaboration ``c`` on ``tasks``, role after role; one episode list per role.
        Every record is tagged with the info keys the collaboration credit modules read."""
        index = {r.name: i for i, r in enumerate(self.collab.roles)}
        outputs: list[dict[str, str]] = [{} for _ in tasks]
        per_role = []
        for role in c.roles:
            final = role.name == c.final.name
            rtasks = [dict(t, traj_id=f"{t['traj_id']}:{part}:{role.name}", options={**t["options"], "grade": final},
                           role=role, outputs=dict(outputs[k]), part=part, collab_id=t["traj_id"],
                           train=role.name in train) for k, t in enumerate(tasks)]
            eps = self._play_role(role, rtasks)
            tag = dict(role=role.name, role_index=index[role.name], n_roles=len(self.collab.roles), part=part)
            for k, ep in enumerate(eps):
                if not ep.steps:  # the prompt did not fit or the env failed: an empty, wrong turn
                    self._empty_turn(ep, role, final)
                outputs[k][role.name] = clean_output(role, ep.steps[0].info.get("response", ""))
                for r in ep.steps:
                    r.info.update(tag, collab_id=tasks[k]["traj_id"])
            per_role.append(eps)
        return per_role

    def _play_role(self, role: Role, tasks: list[dict[str, Any]]) -> list[Episode]:
        """One role's turns, generated by its policy with its tokenizer (``agentrl.policies``)."""
        settings = self.rollout_settings(context_mode="role", prefill="", max_turns=1)
        with self.policies.use(role.name):
            return run_episodes(tasks, lambda prompts: self.policies.generate(role.name, prompts),
                                self.policies.tokenizer(role.name), settings,
                                envs=self._env_pool(settings, len(tasks)), timing=self._timing)

    def _tokenizer_of(self, role: Role):
        return self.policies.tokenizer(role.name)

    def _generate_as(self, role: Role, prompts: list[list[int]]) -> list[list[int]]:
        """Completions of ``prompts`` (in the role's tokenizer) by the role's current policy."""
        out = self.policies.generate(role.name, prompts)
        return out.completion_ids if isinstance(out, GenerateOutput) else out

    def _empty_turn(self, ep: Episode, role: Role, final: bool) -> None:
        reward = self.wrong_answer_reward if final else 0.0
        ep.steps.append(StepRecord(group_id=ep.group_id, traj_id=ep.traj_id, t=0, obs="", action="",
                                   reward=reward, done=True, valid=False, truncated=True,
                                   info={"response": "", "error": ep.error or "prompt over max_prompt_tokens"}))

    def rate(self, joint: list[list[Episode]]) -> None:
        """SEPO: the first and the last role rate each collaboration (Sec. 3.3); the parsed pairs
        go into the last role's record as ``info.ratings``."""
        first, last = self.collab.roles[0], self.collab.roles[-1]
        answers = [ep.steps[0] for ep in joint[-1]]
        thoughts = [clean_output(first, ep.steps[0].info.get("response", "")) for ep in joint[0]]
        ratings = {}
        for rater, role in ((THINKER, first), (SOLVER, last)):
            tok = self._tokenizer_of(role)
            prompts = [encode(tok, chat_text(tok, rating_prompt(rater, a.obs, th, a.info.get("response", ""),
                                                                  a.reward > 0, self.rating_template)))
                       for a, th in zip(answers, thoughts, strict=True)]
            ids = self._generate_as(role, prompts)
            ratings[rater] = [parse_rating(decode_response(tok, c), a.reward > 0)
                              for c, a in zip(ids, answers, strict=True)]
        for k, a in enumerate(answers):
            a.info["ratings"] = {who: [r[k].thinker, r[k].solver, r[k].valid] for who, r in ratings.items()}

    # ------------------------------------------------------------------ role-ordered steps
    def _role_ordered(self, mode: str) -> bool:
        return self.role_steps is not None and mode == "train"

    def _episode_rows(self, episodes: list[Episode], credited: Credited) -> list[Row]:
        """Role-ordered steps: the rows role after role, also kept per role for ``_balance_rows``."""
        if not self._role_ordered("train" if self.model.training else "eval"):
            return super()._episode_rows(episodes, credited)
        names = self.collab.role_names
        by_role: dict[str, list[Row]] = {n: [] for n in names}
        for ep, adv in per_episode(episodes, credited.local()):
            by_role[ep.tokens.role.name] += episode_rows(ep, adv, credited.per_token)
        self._rows_by_role = [by_role[n] for n in names]
        return [r for rows in self._rows_by_role for r in rows]

    def _balance_rows(self, rows: list[Row], mode: str) -> tuple[list[Row], RowCounts]:
        """Role-ordered steps: every role's rows to one count R on every rank, role after role."""
        if not self._role_ordered(mode):
            return super()._balance_rows(rows, mode)
        n_max = max(len(r) for r in self._rows_by_role)
        if self.accelerator.num_processes > 1:
            n_max = max(gather_object([n_max]))
        rng = np.random.default_rng([self.args.seed, self.state.global_step, self.accelerator.process_index])
        return self.role_steps.balance(self._rows_by_role, n_max, self.args.max_rows_per_rank,
                                       self._row_pad_id(), rng)

    def _logps_for_loss(self, batch: dict[str, Any], mode: str) -> dict[str, torch.Tensor]:
        """Role-ordered steps: each role's rows get their old log-probs from their own policy."""
        if not self._role_ordered(mode):
            return super()._logps_for_loss(batch, mode)
        rows = batch["prompt_ids"].shape[0]
        per = rows // self.role_steps.n_roles
        parts = []
        for k, role in enumerate(self.collab.roles):
            sub = take_rows(batch, torch.arange(k * per, (k + 1) * per), rows)
            with self.policies.use(role.name):
                parts.append(super()._logps_for_loss(sub, mode))
        return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}

    def _prepare_inputs(self, generation_batch: dict[str, Any]) -> dict[str, Any]:
        """Role-ordered steps: the rollout's micro-batches role after role (``RoleSteps.micro_batches``)."""
        if not (self.model.training and self.role_steps is not None):
            return super()._prepare_inputs(generation_batch)
        spg = self.args.steps_per_generation
        if self._step % (spg * self.num_iterations) == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            by_length = self.loss_type != "bnpo" and self.top_entropy_quantile == 1.0
            self._buffered_inputs = self.role_steps.micro_batches(
                batch, by_length, lambda t: self.accelerator.gather(t).sum())
            self._metrics["train"]["rows/real_token_share"].append(real_token_share(self._buffered_inputs))
        return self._buffered_inputs[self._step % spg]

    def _block_role(self) -> str | None:
        """The role that trains at this step in role blocks (None in evaluation or with ``both``,
        where every role's rows train the trainer's model)."""
        trained = self.schedule.trained(self.state.global_step)
        return trained[0] if self.model.training and len(trained) == 1 else None

    def _training_role_model(self) -> RoleModel | None:
        """The role model whose role trains at this step (``collab_models``, role blocks), else None."""
        role = self._block_role()
        return None if role is None else self.policies.role_model(role)

    def _row_pad_id(self) -> int:
        role = self._block_role()
        return super()._row_pad_id() if role is None else self.policies.tokenizer(role).pad_token_id

    def _loss_model(self):
        role = self._block_role()
        return super()._loss_model() if role is None else self.policies.loss_model(role)

    def training_step(self, model, inputs, num_items_in_batch):
        """Role-ordered steps: activate the role's policy before its optimizer step's first
        micro-batch (no gradients are pending there). A role on its own model: its loss on that
        model, and that model's optimizer step after the step's last micro-batch (the Trainer's
        optimizer steps with no gradients)."""
        # Trainer.training_step puts only the model it is given in train mode; the trainer's model
        # must be too, since TRL reads self.model.training to tell training from evaluation
        self.model.train()
        rm = self._training_role_model()
        if rm is not None:
            out = super().training_step(rm.model, inputs, num_items_in_batch)
            if self._step % self.args.gradient_accumulation_steps == 0:  # TRL counted this micro-step
                norm = rm.step(self._get_learning_rate(), self.args.max_grad_norm)
                self._metrics["train"]["collab/role_model_grad_norm"].append(norm)
            return out
        if self.role_steps is not None and self._step % self.args.gradient_accumulation_steps == 0:
            k = self.role_steps.role_at(self._step)
            self.policies.activate(self.collab.roles[k].name)
            self._metrics["train"]["collab/trained_role"].append(float(k))
        return super().training_step(model, inputs, num_items_in_batch)

    # ------------------------------------------------------------------ metrics
    def _episode_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """``env/*`` of the collaborations' answers (the last role's joint turns) only."""
        final = self.collab.final.name
        return super()._episode_metrics([ep for ep in episodes if isinstance(ep.tokens, RoleTokens)
                                         and ep.tokens.part == "joint" and ep.tokens.role.name == final])

    def _log_metrics(self, mode, episodes, credited, counts, rollout_s) -> None:
        super()._log_metrics(mode, episodes, credited, counts, rollout_s)
        m = self._metrics[mode]
        t = self.collab_times
        for k, v in t.items():
            m[f"collab/{k}"].append(float(v))
        m["collab/counterfactual_overhead"].append(t.get("counterfactual_s", 0.0) / max(t.get("joint_s", 0.0), 1e-9))
        if self.role_steps is not None:
            return  # logged per optimizer step (training_step)
        trained = self.schedule.trained(self.state.global_step)
        m["collab/trained_role"].append(float(self.collab.role_names.index(trained[0])) if len(trained) == 1
                                        else -1.0)

    # ------------------------------------------------------------------ checkpoints
    def collab_state_dict(self) -> dict[str, Any]:
        return {"policies": self.policies.state_dict(self.accelerator.num_processes), "ccpo": self.algorithm_state.state_dict(),
                "schedule": asdict(self.schedule), "global_step": int(self.state.global_step)}

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        self.policies.save(output_dir, self.accelerator.process_index, self.args.should_save)
        if self.args.should_save:
            torch.save(self.collab_state_dict(), Path(output_dir) / COLLAB_STATE)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = Path(checkpoint) / COLLAB_STATE
        if not path.is_file():
            raise RecipeError(f"{checkpoint} has no {COLLAB_STATE}: not a checkpoint of a collaboration run")
        d = torch.load(path, map_location="cpu", weights_only=True)
        saved = RoleSchedule(tuple(d["schedule"]["roles"]), d["schedule"]["kind"], d["schedule"]["block_steps"])
        if saved != self.schedule:
            raise RecipeError(f"resume: the checkpoint's role schedule {asdict(saved)} differs from this run's "
                              f"{asdict(self.schedule)}")
        try:
            self.policies.load(d["policies"], checkpoint, self.accelerator.process_index,
                               self.accelerator.num_processes)
        except CheckpointMismatch as e:
            raise RecipeError(str(e)) from None
        self.algorithm_state = CcpoState.from_state_dict(d["ccpo"])

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        super().save_model(output_dir, _internal_call)
        if _internal_call:
            return
        out = Path(output_dir or self.args.output_dir)
        if self.policies.zero3:  # gathers and swaps are collective: every rank saves
            for name in self.policies.names:
                with self.policies.use_policy(name):
                    super().save_model(str(out / "policies" / name), _internal_call=True)
        if not self.accelerator.is_main_process:
            return
        (out / "collab.json").write_text(json.dumps(to_dict(self.collab), indent=1))
        if (self.policies.separate or self.policies.role_models) and not self.policies.zero3:
            for name in self.policies.names:
                with self.policies.use_policy(name):
                    super().save_model(str(out / "policies" / name), _internal_call=True)
        for role, rm in self.policies.role_models.items():  # with its own tokenizer
            d = out / "policies" / self.collab.role(role).policy
            rm.model.save_pretrained(str(d))
            rm.tokenizer.save_pretrained(str(d))
