"""``AgentGRPOTrainer``: GRPOTrainer with multi-turn env rollouts and pluggable step-level credit.

TRL calls ``_generate_and_score_completions`` once per ``steps_per_generation * num_iterations``
training steps and buffers/splits what it returns. Here it is a list of named steps, one method
each (the data flow is drawn in ``docs/design.md``):

``_build_tasks``        dataset rows -> rollout tasks (TRL's RepeatSampler already repeated each
                        task ``num_generations`` times: equal task ids = one group, group id
                        ``s{global_step}:t{task_id}``; groups may straddle ranks)
``_roll_out``           the algorithm's ``roll_out``; by default ``run_episodes`` with one batched
                        ``_generate_single_turn`` call per turn (TRL's own path: HF generate / vLLM /
                        ZeRO-3 gather), ranks in lock-step; then its ``extra_episodes`` (APPO's branches)
``_shape_rewards``      ``valid_action_reward`` on accepted actions, then the algorithm's
``_gather_and_credit``  step records of all ranks -> the algorithm's ``advantages`` -> this rank's slice
``row_groups``         (the algorithm's) each episode's context turns it into training rows
                        (per-token advantages where the algorithm gives them)
``balance_rows``       (the algorithm's) the same row count R on every rank (``agentrl.rollout.rows``)
``_rows_to_batch``      TRL's padded tensors; the rows go into TRL's unchanged loss
``_log_metrics``        ``env/*`` (``_episode_metrics``), ``time/*``, ``rows/*``, ``credit/*``
``_write_rollouts``     ``save_rollouts``: the global records with their advantages (JSONL)

What differs between algorithms (GRPO-style default, APPO, ...) is an ``agentrl.algorithms``
plug-in whose hooks these steps call; TRL's loss is reweighted per micro-batch only through the
algorithm's ``loss_transform`` (``_compute_loss`` below). The micro-batches (``_prepare_inputs``),
each micro-step (``training_step``), checkpoints and the final model folder call hooks too, so a
collaboration of roles with per-role policies is the ``collab`` plug-in (``agentrl.algorithms.collab``)
and the ``agentrl.policies`` store. There is no other trainer subclass.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation
from trl.trainer.utils import pad

from agentrl.algorithms import Advantages, Algorithm, for_config
from agentrl.config import AgentRLConfig
from agentrl.records import StepRecord, write_jsonl
from agentrl.rollout.contexts import Row
from agentrl.rollout.episodes import Episode, GenerateOutput, RolloutTiming, run_episodes
from agentrl.rollout.generation import FingerprintCapture, truncated_forward_fingerprints
from agentrl.rollout.metrics import episode_metrics, episode_summary
from agentrl.rollout.rows import (
    RowCounts,
    balance_rows,
    episode_rows,
    per_episode,
    real_token_share,
    row_target,
)
from agentrl.rollout.settings import RolloutSettings
from agentrl.trainer.tasks import _check_fingerprint_layer, build_task_dataset, env_reward


# ----------------------------------------------------------------------------------- credit glue
def credit_kwargs(args: AgentRLConfig) -> dict[str, Any]:
    """Keyword arguments passed to the credit module: ``gamma`` plus the recipe's credit_kwargs."""
    kw = {"gamma": args.gamma}
    kw.update(args.credit_kwargs or {})
    return kw


def credit_requirements(name: str, kw: dict[str, Any]) -> frozenset:
    from agentrl import credit

    return frozenset(credit.requirements(name, **kw))


def compute_credit(name: str, records: list[StepRecord], kw: dict[str, Any]) -> tuple[np.ndarray, dict[str, float]]:
    """Step advantages aligned with ``records`` + diagnostics, via agentrl.credit."""
    if not records:
        return np.zeros(0), {}
    from agentrl import credit

    res = credit.compute(name, records, **kw)
    adv = np.asarray(res.step_advantages, dtype=np.float64)
    if adv.shape[0] != len(records):
        raise ValueError(f"credit {name!r} returned {adv.shape[0]} advantages for {len(records)} records")
    return adv, dict(res.diagnostics or {})


@dataclass
class Credited:
    """The global step records of one iteration with their advantages."""

    records: list[StepRecord]
    """All ranks' records, rank by rank."""
    advantages: np.ndarray
    """One advantage per record (the credit module's output)."""
    diagnostics: dict[str, Any]
    """The credit module's diagnostics (logged as ``credit/<name>``)."""
    offset: int
    """Index of this rank's first record in ``records``."""
    n_local: int
    """Number of this rank's records."""
    seconds: float
    """Time spent gathering and computing credit."""
    per_token: dict[str, np.ndarray] = field(default_factory=dict)
    """traj_id -> token advantages replacing that episode's per-record ones (the algorithm's)."""

    def local(self) -> np.ndarray:
        """This rank's advantages, aligned with its episodes' steps."""
        return self.advantages[self.offset: self.offset + self.n_local]


class AgentGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose "completions" are multi-turn env episodes. See the module docstring.

    Args:
        model: model id/folder or a PreTrainedModel.
        args: AgentRLConfig.
        train_dataset: task dataset (default ``build_task_dataset(args)``).
        processing_class: tokenizer (default: loaded from the model folder).
        peft_config: a peft.LoraConfig to train an adapter.
        callbacks: Trainer callbacks.
        algorithm: the ``agentrl.algorithms`` plug-in (default: the one the recipe selects,
            ``agentrl.algorithms.for_config``).
    """

    def __init__(self, model, args: AgentRLConfig, train_dataset=None, processing_class=None,
                 peft_config=None, callbacks=None, algorithm: Algorithm | None = None):
        algorithm = algorithm or for_config(args)
        algorithm.check(args)  # a trainer built without load_recipe gets the same one-line refusals
        credit_kw = credit_kwargs(args)
        credit_needs = credit_requirements(args.credit, credit_kw)
        if "fingerprint" in credit_needs:  # fail before the model loads, not at the first rollout
            _check_fingerprint_layer(model, args.fingerprint_layer)
        if train_dataset is None:
            train_dataset = build_task_dataset(args)
        super().__init__(model=model, reward_funcs=[env_reward], args=args, train_dataset=train_dataset,
                         processing_class=processing_class, peft_config=peft_config, callbacks=callbacks)
        self.algorithm = algorithm
        self.algorithm_state = self.algorithm.initial_state()
        """What the algorithm's ``advantages`` hook returned last (e.g. running statistics)."""
        self._loss_inputs: dict[str, Any] | None = None
        self.credit_kw = credit_kw
        self.credit_needs = credit_needs
        self.need_fingerprint = "fingerprint" in self.credit_needs
        # Sampling logprobs of env tokens do not exist; TRL's vLLM IS correction would index a
        # ratio we do not build. Off until per-turn vLLM logprobs are threaded through.
        self.vllm_importance_sampling_correction = False
        self._fp_capture: FingerprintCapture | None = None
        self._fp_time = 0.0
        self._gen_time = 0.0
        self._gen_tokens = 0
        self._gen_in_step = 0.0
        self._timing = RolloutTiming()
        self.last_rollout: dict[str, Any] | None = None
        """The latest iteration's global records, advantages and this rank's rows (for tests/tools)."""
        self.algorithm.bind(self)

    # ------------------------------------------------------------------ generation (one turn)
    def _unwrapped(self):
        return self.accelerator.unwrap_model(self.model)

    def _turn_generate(self, prompts: list[list[int]]):
        t0 = time.perf_counter()
        fps = None
        if self.need_fingerprint and not self.use_vllm:
            if self._fp_capture is None:
                self._fp_capture = FingerprintCapture(self._unwrapped(), self.args.fingerprint_layer)
            with self._fp_capture as cap:
                cap.elapsed = 0.0
                cap.arm()
                completion_ids, _ = self._generate_single_turn(prompts, None, {}, num_generations=1)
                t1 = time.perf_counter()
                fps = cap.take()
                self._fp_time += time.perf_counter() - t1 + cap.elapsed
        else:  # under vLLM the fingerprints come after the rollout (``_fingerprints_after``)
            completion_ids, _ = self._generate_single_turn(prompts, None, {}, num_generations=1)
        self._gen_time += time.perf_counter() - t0
        self._gen_tokens += sum(len(c) for c in completion_ids)
        completion_ids = [list(c) for c in completion_ids]
        return GenerateOutput(completion_ids, fps) if fps is not None else completion_ids

    def _sync(self, n_active: int) -> int:
        """The most active episodes any rank has this turn (``RolloutSettings.sync``)."""
        if self.accelerator.num_processes == 1:
            return n_active
        count = torch.tensor([int(n_active)], device=self.accelerator.device)
        return int(self.accelerator.gather(count).max().item())

    def _fingerprints_after(self, prompts: list[list[int]]) -> list[list[float]]:
        """vLLM generated elsewhere: fingerprints of a whole rollout's prompts by a truncated
        no-grad forward through blocks 0..L, under one ZeRO-3 parameter gather (not one per turn).
        Every rank runs the same number of chunks: without the gather each forward is a collective."""
        size = max(1, self.args.per_device_train_batch_size)
        chunks = [prompts[i:i + size] for i in range(0, len(prompts), size)]
        n = max(gather_object([len(chunks)])) if self.accelerator.num_processes > 1 else len(chunks)
        out: list[list[float]] = []
        with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                         gather_deepspeed3_params=self.args.ds3_gather_for_generation) as m:
            for k in range(n):
                fps = truncated_forward_fingerprints(m, chunks[k] if k < len(chunks) else prompts[:1] or [[0]],
                                                     self.args.fingerprint_layer, self._tokenizer.pad_token_id)
                out += fps if k < len(chunks) else []
        return out

    def rollout_settings(self, **overrides) -> RolloutSettings:
        """``RolloutSettings`` from the config (+ ``overrides``, any of its fields)."""
        a = self.args
        settings = RolloutSettings(
            env_id=a.env_id, env_kwargs=dict(a.env_kwargs or {}), context_mode=a.context_mode,
            history_length=a.history_length, max_turns=a.max_turns, max_prompt_tokens=a.max_prompt_tokens,
            prefill=a.prefill, stop_strings=tuple(a.stop_strings or ()),
            progress=self.accelerator.is_main_process and not a.disable_tqdm,
            sync=self._sync if self.accelerator.num_processes > 1 else None, pad_batch=self.use_vllm,
            fingerprints_after=self._fingerprints_after if self.need_fingerprint and self.use_vllm else None)
        return replace(settings, **overrides)

    def rollout(self, tasks: list[dict], generate=None, tokenizer=None, **overrides) -> list[Episode]:
        """Play ``tasks`` with the current policy (collective: all ranks call it together), or with
        ``generate`` (token-id prompts -> completions) and its ``tokenizer`` (e.g. a role's policy).
        ``overrides`` are ``RolloutSettings`` fields (e.g. ``env_kwargs``, ``context_mode``)."""
        settings = self.rollout_settings(**overrides)
        return run_episodes(tasks, generate or self._turn_generate, tokenizer or self.processing_class, settings,
                            envs=self._env_pool(settings, len(tasks)), timing=self._timing)

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:  # the env workers end with the run (a finalizer would too, later)
            if getattr(self, "_workers", None) is not None:
                self._workers.close()
                self._workers = None

    def _env_pool(self, settings: RolloutSettings, n: int):
        """This rank's env batch, made at the first rollout and kept for the run: its envs are
        reset, not rebuilt, every iteration. ``env_workers`` > 0: a worker pool; 0: ``LocalEnvs``
        in this process. None (a fresh in-process batch) for a rollout with other env settings
        (a hook's override)."""
        a = self.args
        if (settings.env_id, settings.env_kwargs) != (a.env_id, dict(a.env_kwargs or {})):
            return None
        from agentrl.rollout.env_pool import LocalEnvs, WorkerEnvs, default_workers

        if getattr(self, "_workers", None) is None:
            w = (default_workers(n, self.accelerator.num_processes) if a.env_workers == "auto"
                 else int(a.env_workers))
            self._workers = (WorkerEnvs(a.env_id, dict(a.env_kwargs or {}), n, workers=w, timeout_s=a.env_timeout_s)
                             if w > 0 else LocalEnvs(a.env_id, dict(a.env_kwargs or {}), n))
        self._workers.resize(n)
        return self._workers

    # ------------------------------------------------------------------ the iteration
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """One iteration's training batch from TRL's task rows (module docstring: the steps)."""
        t_start = time.perf_counter()
        mode = "train" if self.model.training else "eval"
        episodes, rollout_s = self._roll_out(self._build_tasks(inputs))
        self._shape_rewards(episodes)
        credited = self._gather_and_credit(episodes)
        groups = self.algorithm.row_groups(self, episodes, credited, mode)
        rows, counts = self.algorithm.balance_rows(self, groups, mode)
        out = self._rows_to_batch(rows, mode)
        self._log_metrics(mode, episodes, credited, counts, rollout_s)
        self._write_rollouts(credited)
        self.last_rollout = dict(records=credited.records, advantages=credited.advantages,
                                 offset=credited.offset, n_local=credited.n_local, rows=out, episodes=episodes,
                                 n_real_rows=counts.real, filler=counts.filler)
        self._gen_in_step += time.perf_counter() - t_start  # excluded from time/update_s
        return out

    def _build_tasks(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rollout tasks from the dataset rows; equal task ids in one iteration = one group."""
        step, rank = self.state.global_step, self.accelerator.process_index
        return [{"seed": int(x["task_seed"]), "options": json.loads(x["task_options"]),
                 "group_id": f"s{step}:t{int(x['task_id'])}", "traj_id": f"s{step}:r{rank}:{k}"}
                for k, x in enumerate(inputs)]

    def _roll_out(self, tasks: list[dict[str, Any]]) -> tuple[list[Episode], float]:
        """This rank's episodes (the algorithm's extra ones included) and the seconds they took."""
        self._fp_time = self._gen_time = 0.0
        self._gen_tokens = 0
        self._timing = RolloutTiming()
        t0 = time.perf_counter()
        episodes = self.algorithm.roll_out(self, tasks)
        return episodes, time.perf_counter() - t0

    def _shape_rewards(self, episodes: list[Episode]) -> None:
        """Add ``valid_action_reward`` to accepted actions (spread inside groups that all fail);
        the env's own reward is kept as ``info.env_reward``. Then the algorithm's own shaping of
        this rank's episodes (APPO: each branch inherits its parent's prefix rewards)."""
        bonus = self.args.valid_action_reward
        for ep in episodes:
            for r in ep.steps:
                r.info["env_reward"] = r.reward
                if bonus and r.valid:
                    r.reward = r.reward + bonus
        self.algorithm.shape_rewards(episodes)

    def compute_credit(self, records: list[StepRecord], **extra) -> tuple[np.ndarray, dict[str, float]]:
        """The recipe's credit module on ``records`` (``extra``: kwargs beyond the recipe's, e.g. an
        algorithm's state): one advantage each, and its diagnostics."""
        return compute_credit(self.args.credit, records, {**self.credit_kw, **extra})

    def _gather_and_credit(self, episodes: list[Episode]) -> Credited:
        """Step records of all ranks, the algorithm's advantages on the global batch, this rank's
        slice. The algorithm's state moves on in training only (evaluation must not advance it)."""
        t0 = time.perf_counter()
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        local = [r for ep in episodes for r in ep.steps]
        if not self.need_fingerprint:
            for r in local:
                r.fingerprint = None
        if world > 1:
            gathered = gather_object([[r.to_dict() for r in local]])
            offset = sum(len(g) for g in gathered[:rank])
            records = [StepRecord.from_dict(d) for g in gathered for d in g]
        else:  # no round trip through dicts: asdict's deep copy was ~1 ms a record
            offset, records = 0, list(local)
        if not records:
            adv = Advantages(np.zeros(0))
        else:
            adv, state = self.algorithm.advantages(self, episodes, records, self.algorithm_state)
            if self.model.training:
                self.algorithm_state = state
        if adv.per_record.shape[0] != len(records):
            raise ValueError(f"algorithm {self.algorithm.name!r} gave {adv.per_record.shape[0]} advantages "
                             f"for {len(records)} records")
        return Credited(records=records, advantages=adv.per_record, diagnostics=adv.diagnostics, offset=offset,
                        n_local=len(local), seconds=time.perf_counter() - t0, per_token=adv.per_token)

    def episode_rows(self, episodes: list[Episode], credited: Credited) -> list[Row]:
        """Training rows of this rank's episodes, each from the context that played it."""
        return [row for ep, adv in per_episode(episodes, credited.local())
                for row in episode_rows(ep, adv, credited.per_token)]

    def balance_rows(self, rows: list[Row], mode: str) -> tuple[list[Row], RowCounts]:
        """The same number of rows on every rank (``agentrl.rollout.rows``)."""
        a = self.args
        spg = a.steps_per_generation if mode == "train" else 1
        target = row_target(self.max_over_ranks(len(rows)), a.max_rows_per_rank, spg)
        return balance_rows(rows, target, self.algorithm.pad_id(self), self.row_rng())

    def max_over_ranks(self, n: int) -> int:
        """The largest ``n`` any rank holds (every rank must call it)."""
        return max(gather_object([n])) if self.accelerator.num_processes > 1 else n

    def row_rng(self) -> np.random.Generator:
        """The generator that picks rows to drop or repeat: seeded per run, step and rank."""
        return np.random.default_rng([self.args.seed, self.state.global_step, self.accelerator.process_index])

    def _episode_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """``env/*`` metrics over all ranks' episodes (every rank computes the same numbers from
        gathered per-episode summaries)."""
        summ = [episode_summary(ep) for ep in self.algorithm.metric_episodes(episodes)]
        world = self.accelerator.num_processes
        all_summ = [s for g in (gather_object([summ]) if world > 1 else [summ]) for s in g]
        if not all_summ:
            return {}
        return {k: float(v) for k, v in episode_metrics(all_summ).items()}

    def _log_metrics(self, mode: str, episodes: list[Episode], credited: Credited, counts: RowCounts,
                     rollout_s: float) -> None:
        """Episode, timing, row and credit metrics into TRL's metric buffer."""
        m = self._metrics[mode]
        values = self._episode_metrics(episodes)
        values.update({
            "time/rollout_s": rollout_s,
            "time/env_s": self._timing.env_s,
            "time/env_share": self._timing.env_s / max(rollout_s, 1e-9),
            "time/credit_s": credited.seconds,
            "time/fingerprint_s": self._fp_time + self._timing.fingerprint_s,
            "gen/tokens_per_s": self._gen_tokens / max(self._gen_time, 1e-9),
            "rows/real": float(min(counts.real, counts.target)),
            "rows/filler": float(counts.filler),
            "rows/dropped": float(counts.dropped),
        })
        for k, v in credited.diagnostics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                values[f"credit/{k}"] = float(v)
        if len(credited.advantages):
            values["credit/adv_mean"] = float(np.mean(credited.advantages))
            values["credit/adv_abs_mean"] = float(np.mean(np.abs(credited.advantages)))
        values.update(self.algorithm.metrics(self))
        for k, v in values.items():
            m[k].append(v)

    def _write_rollouts(self, credited: Credited) -> None:
        """``save_rollouts``: the global records with ``info.advantage``, one JSONL per iteration."""
        if not (self.args.save_rollouts and self.accelerator.is_main_process):
            return
        dicts = []
        for r, adv in zip(credited.records, credited.advantages, strict=True):
            d = r.to_dict()
            d.setdefault("info", {})["advantage"] = float(adv)
            dicts.append(d)
        write_jsonl(dicts, Path(self.args.output_dir) / "rollouts" / f"iter_{self.state.global_step:05d}.jsonl")

    def _rows_to_batch(self, rows: list[Row], mode: str) -> dict[str, Any]:
        """Rows as TRL's padded tensors, plus old/ref log-probs where TRL's loss needs them."""
        device = self.accelerator.device
        pad_id = self.algorithm.pad_id(self)
        p = [torch.tensor(r.prompt, dtype=torch.long) for r in rows]
        c = [torch.tensor(r.completion, dtype=torch.long) for r in rows]
        prompt_ids = pad(p, padding_value=pad_id, padding_side="left").to(device)
        prompt_mask = pad([torch.ones_like(t) for t in p], padding_value=0, padding_side="left").to(device)
        completion_ids = pad(c, padding_value=pad_id, padding_side="right").to(device)
        completion_mask = pad([torch.ones_like(t) for t in c], padding_value=0, padding_side="right").to(device)
        loss_mask = pad([torch.tensor(r.loss_mask, dtype=torch.long) for r in rows], padding_value=0,
                        padding_side="right").to(device)
        advantages = pad([torch.tensor(r.adv, dtype=torch.float32) for r in rows], padding_value=0.0,
                         padding_side="right").to(device)
        num_items = self.accelerator.gather(loss_mask.sum()).sum()
        out = {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            # TRL multiplies completion_mask by tool_mask for the loss: env tokens and filler rows
            # are attended (completion_mask) but carry no loss.
            "tool_mask": loss_mask,
            "advantages": advantages,  # (B, T): _compute_loss uses 2-D advantages as they are
            "num_items_in_batch": num_items,
        }
        out.update(self.algorithm.old_logps(self, out, mode))
        return out

    def logps_for_loss(self, batch: dict[str, Any], mode: str) -> dict[str, torch.Tensor]:
        """``old_per_token_logps`` when the batch is reused off-policy, ``ref_per_token_logps``
        when ``beta`` > 0 (the PEFT reference is the base model with the adapter disabled)."""
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        keep = batch["completion_ids"].size(1)
        bs = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        generate_every = self.args.steps_per_generation * self.num_iterations
        out = {}
        with torch.no_grad():
            if self.args.gradient_accumulation_steps % generate_every != 0:
                out["old_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                    self.algorithm.loss_model(self), ids, att, keep, batch_size=bs)
            if self.beta != 0.0:
                out["ref_per_token_logps"] = self._ref_per_token_logps(ids, att, keep, bs)
        return out

    def _ref_per_token_logps(self, ids: torch.Tensor, att: torch.Tensor, keep: int, bs: int) -> torch.Tensor:
        """Reference-model log-probs of the last ``keep`` tokens (call under no_grad): the ref
        model, or with PEFT the base model with the adapter disabled."""
        if self.ref_model is not None:
            return self._get_per_token_logps_and_entropies(self.ref_model, ids, att, keep, batch_size=bs)[0]
        from trl.trainer.utils import use_adapter

        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return self._get_per_token_logps_and_entropies(self.model, ids, att, keep, batch_size=bs)[0]

    def completion_logps(self, prompts: list[list[int]], completions: list[list[int]], entropy: bool = False,
                         reference: bool = False) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """No-grad (log-probs, entropies, reference log-probs) of the completion tokens, (N, T)
        float32 numpy, T the longest completion (padding positions hold garbage): TRL's own
        ``_get_per_token_logps_and_entropies`` on the policy (and ``_ref_per_token_logps``)."""
        pid = self._tokenizer.pad_token_id
        p = [torch.tensor(x, dtype=torch.long) for x in prompts]
        c = [torch.tensor(x, dtype=torch.long) for x in completions]
        ids = torch.cat([pad(p, padding_value=pid, padding_side="left"),
                         pad(c, padding_value=pid, padding_side="right")], dim=1).to(self.accelerator.device)
        att = torch.cat([pad([torch.ones_like(x) for x in p], padding_value=0, padding_side="left"),
                         pad([torch.ones_like(x) for x in c], padding_value=0, padding_side="right")],
                        dim=1).to(self.accelerator.device)
        keep = max(len(x) for x in completions)
        bs = self.args.per_device_train_batch_size
        with torch.no_grad():
            logp, ent, _ = self._get_per_token_logps_and_entropies(self.model, ids, att, keep, batch_size=bs,
                                                                   compute_entropy=entropy)
            ref = self._ref_per_token_logps(ids, att, keep, bs) if reference else None

        def np32(t):
            return None if t is None else t.float().cpu().numpy()

        return np32(logp), np32(ent), np32(ref)

    # ------------------------------------------------------------------ the loss
    def _compute_loss(self, model, inputs):
        """TRL's loss; with an algorithm that reweights advantages per micro-batch (APPO's Eq. 7)
        TRL gets a shallow copy of the micro-batch (the buffered one keeps its plain advantages:
        TRL reuses it for ``num_iterations`` > 1) whose ``advantages`` the algorithm replaces from
        the loss's own forward, see ``_get_per_token_logps_and_entropies``."""
        if not self.algorithm.transforms_loss:
            return super()._compute_loss(model, inputs)
        self._loss_inputs = dict(inputs)
        try:
            return super()._compute_loss(model, self._loss_inputs)
        finally:
            self._loss_inputs = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """TRL's forward. Inside ``_compute_loss`` its first call is the loss's own forward, and TRL
        reads ``inputs["advantages"]`` only after it (pinned by tests/trainer/test_trl_contract.py):
        the algorithm's ``loss_transform`` rewrites them there from the detached log-probs, so
        Eq. 7 costs no second forward and TRL's loss is not copied."""
        out = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                         *args, **kwargs)
        inputs, self._loss_inputs = self._loss_inputs, None  # the loss's forward only, not later ones
        if inputs is not None:
            inputs["advantages"], metrics = self.algorithm.loss_transform(self, out[0].detach(), inputs)
            mode = "train" if self.model.training else "eval"
            for k, v in metrics.items():
                self._metrics[mode][k].append(v)
        return out

    # ------------------------------------------------------------------ micro-batches
    def groups_rows_by_length(self) -> bool:
        """Whether the update may group rows by length: the gradient must not depend on which
        rows share a micro-batch. It does not when every optimizer step covers whole generation
        batches and the loss is not normalised per micro-batch (``bnpo``, the entropy mask)."""
        a = self.args
        return a.gradient_accumulation_steps % a.steps_per_generation == 0 and self.loss_is_split_invariant()

    def loss_is_split_invariant(self) -> bool:
        """Whether the loss ignores how rows are split into micro-batches: no per-micro-batch
        normaliser (``bnpo``, the entropy mask's quantile)."""
        return self.loss_type != "bnpo" and self.top_entropy_quantile == 1.0

    def _prepare_inputs(self, generation_batch: dict[str, Any]) -> dict[str, Any]:
        """TRL's buffering, with its shuffle + equal split replaced by ``length_grouped_micro_batches``
        where that leaves the gradient unchanged (``groups_rows_by_length``): padding waste falls
        from ~50% to a few % on window rows of mixed prompt lengths. Logged: ``rows/real_token_share``."""
        if not (self.model.training and self.algorithm.regroups_micro_batches(self)):
            return super()._prepare_inputs(generation_batch)
        spg = self.args.steps_per_generation
        if self._step % (spg * self.num_iterations) == 0 or self._buffered_inputs is None:
            # _buffered_inputs is None right after resuming from a checkpoint
            batch = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = self.algorithm.micro_batches(self, batch)
            self._metrics["train"]["rows/real_token_share"].append(real_token_share(self._buffered_inputs))
        return self._buffered_inputs[self._step % spg]

    # ------------------------------------------------------------------ timing
    def training_step(self, model, inputs, num_items_in_batch):
        """TRL's micro-step on the model the algorithm names (``begin_micro_step``), then the
        algorithm's ``end_micro_step``."""
        model = self.algorithm.begin_micro_step(self, model)
        self._gen_in_step = 0.0
        t0 = time.perf_counter()
        out = super().training_step(model, inputs, num_items_in_batch)
        self._metrics["train"]["time/update_s"].append(time.perf_counter() - t0 - self._gen_in_step)
        self.algorithm.end_micro_step(self)
        return out

    # ------------------------------------------------------------------ checkpoints
    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        """TRL's optimizer and scheduler, then the algorithm's part (``save_checkpoint``)."""
        super()._save_optimizer_and_scheduler(output_dir)
        self.algorithm.save_checkpoint(self, output_dir)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """TRL's optimizer and scheduler, then the algorithm's part and its state (``load_checkpoint``)."""
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.algorithm_state = self.algorithm.load_checkpoint(self, checkpoint, self.algorithm_state)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """TRL's model folder; the final one (not a checkpoint's) gets the algorithm's files too."""
        super().save_model(output_dir, _internal_call)
        if not _internal_call:
            self.algorithm.save_model(self, output_dir or self.args.output_dir)
