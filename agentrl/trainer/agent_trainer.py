"""``AgentGRPOTrainer``: GRPOTrainer with multi-turn env rollouts, pluggable step-level credit
and our own loss.

TRL's training loop, optimizer, ZeRO-3, PEFT, generation (``_generate_single_turn``) and
checkpoints run as they are. One rollout feeds ``steps_per_generation * num_iterations`` training
micro-steps (``_prepare_inputs`` buffers its micro-batches). An iteration is a list of named
steps, one method each (the data flow is drawn in ``docs/design.md``):

``_build_tasks``        dataset rows -> rollout tasks (TRL's RepeatSampler already repeated each
                        task ``num_generations`` times: equal task ids = one group, group id
                        ``s{global_step}:t{task_id}``; groups may straddle ranks)
``_roll_out``           the algorithm's ``roll_out``; by default ``run_episodes`` with one batched
                        ``_generate_single_turn`` call per turn (TRL's own path: HF generate / vLLM /
                        ZeRO-3 gather), ranks in lock-step
``_shape_rewards``      ``valid_action_reward`` on accepted actions, then the algorithm's
``_gather_and_credit``  step records of all ranks -> the algorithm's ``advantages`` -> this rank's slice
``runner.rows``         each episode's context turns it into training rows, balanced across ranks
``pack_rows``           the rows' tensors: prompt + completion packed, padding on the right only
``runner.micro_batches`` the update's micro-batches, each with its old / reference log-probs
                        computed on its own tensors (``agentrl.trainer.update``)

Each training micro-step (``_compute_loss``) computes the policy's log-probs once and calls the
algorithm's registered policy loss (``agentrl.losses``); the non-finite guard
(``agentrl.trainer.guard``) refuses an optimizer step whose loss or gradient is NaN or inf.
Where rows train (several policies, their checkpoints) is the algorithm's update runner
(``agentrl.algorithms.runner``). There is no other trainer subclass.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation

from agentrl import losses
from agentrl.algorithms import Advantages, Algorithm, for_config
from agentrl.config import AgentRLConfig, credit_kwargs, rollout_settings
from agentrl.losses import LossBatch
from agentrl.records import StepRecord, write_jsonl
from agentrl.rollout.contexts import Row
from agentrl.rollout.episodes import Episode, GenerateOutput, RolloutTiming, run_episodes
from agentrl.rollout.generation import FingerprintCapture, truncated_forward_fingerprints
from agentrl.rollout.metrics import episode_metrics, episode_summary
from agentrl.rollout.rows import (
    RowCounts,
    balance_rows,
    episode_rows,
    pack_rows,
    per_episode,
    real_token_share,
    row_target,
)
from agentrl.rollout.settings import RolloutSettings
from agentrl.trainer.credited import Credited, compute_credit, credit_requirements
from agentrl.trainer.guard import HeldScheduler, NonFiniteGuard, nonfinite_grads
from agentrl.trainer.logprobs import completion_logps, install_compact_lm_heads
from agentrl.trainer.tasks import EpochTaskOrder, _check_fingerprint_layer, build_task_dataset, env_reward
from agentrl.trainer.update import (
    cudnn_attention,
    log_loss_metrics,
    loss_settings,
    ref_logps_of,
    reference_logps,
)


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
        install_compact_lm_heads(self)  # TRL's fused head scores every position off Triton devices
        self.algorithm = algorithm
        self.algorithm_state = None
        """What the algorithm's ``advantages`` hook returned last (e.g. running statistics)."""
        self.loss_name, self.loss_options = algorithm.loss(args)
        """The registered policy loss (``agentrl.losses``) and its own options."""
        self.guard = NonFiniteGuard(args.nonfinite_max_consecutive)
        self.skip_update = False
        """Whether the non-finite guard refused the optimizer step that ends at this micro-step."""
        self.last_loss: losses.LossOutput | None = None
        """The latest micro-step's loss output (for tests and tools)."""
        self.timings: dict[str, float] = {}
        """Seconds of the parts of the current optimizer step (``time/*``)."""
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
        if self.accelerator.device.type == "cuda":
            cudnn_attention(bool(args.allow_cudnn_attention))
        self.add_callback(EpochTaskOrder())  # a resumed run draws the tasks the uninterrupted one did
        self.algorithm.bind(self)
        self.runner = self.algorithm.runner(self)
        """Where the rows train (``agentrl.algorithms.runner``)."""

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
        return rollout_settings(
            self.args, progress=self.accelerator.is_main_process and not self.args.disable_tqdm,
            sync=self._sync if self.accelerator.num_processes > 1 else None, pad_batch=self.use_vllm,
            fingerprints_after=self._fingerprints_after if self.need_fingerprint and self.use_vllm else None,
            **overrides)

    def rollout(self, tasks: list[dict], generate=None, tokenizer=None, **overrides) -> list[Episode]:
        """Play ``tasks`` with the current policy (collective: all ranks call it together), or with
        ``generate`` (token-id prompts -> completions) and its ``tokenizer`` (e.g. a role's policy).
        ``overrides`` are ``RolloutSettings`` fields (e.g. ``env_kwargs``, ``context_mode``)."""
        settings = self.rollout_settings(**overrides)
        return run_episodes(tasks, generate or self._turn_generate, tokenizer or self.processing_class, settings,
                            envs=self._env_pool(settings, len(tasks)), timing=self._timing)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """TRL's training loop; a checkpoint to resume from must be of this run's kind (one line
        otherwise: ``agentrl.checkpoints.identity_mismatch``)."""
        if resume_from_checkpoint:
            self._check_resumable(resume_from_checkpoint)
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)
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
    def make_iteration_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """One iteration's packed rows from TRL's task rows (module docstring: the steps)."""
        mode = "train" if self.model.training else "eval"
        episodes, rollout_s = self._roll_out(self._build_tasks(inputs))
        self._shape_rewards(episodes)
        credited = self._gather_and_credit(episodes)
        t0 = time.perf_counter()
        rows, counts = self.runner.rows(episodes, credited, mode)
        out = {k: v.to(self.accelerator.device) for k, v in pack_rows(rows, self.runner.pad_id()).items()}
        out["num_items_in_batch"] = self.accelerator.gather(out["num_items_in_batch"]).sum()
        self.timings["rows_s"] = time.perf_counter() - t0
        self.timings.update(rollout_s=rollout_s, credit_s=credited.seconds)
        self.last_rollout = dict(records=credited.records, advantages=credited.advantages,
                                 offset=credited.offset, n_local=credited.n_local, rows=out, episodes=episodes,
                                 n_real_rows=counts.real, filler=counts.filler)
        self._log_metrics(mode, episodes, credited, counts, rollout_s)
        self._write_rollouts(credited)
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

    def balance_rows(self, rows: list[Row], mode: str, pad_id: int) -> tuple[list[Row], RowCounts]:
        """The same number of rows on every rank (``agentrl.rollout.rows``)."""
        a = self.args
        spg = a.steps_per_generation if mode == "train" else 1
        target = row_target(self.max_over_ranks(len(rows)), a.max_rows_per_rank, spg)
        return balance_rows(rows, target, pad_id, self.row_rng())

    def max_over_ranks(self, n: int) -> int:
        """The largest ``n`` any rank holds (every rank must call it)."""
        return max(gather_object([n])) if self.accelerator.num_processes > 1 else n

    def row_rng(self) -> np.random.Generator:
        """The generator that picks rows to drop or repeat: seeded per run, step and rank."""
        return np.random.default_rng([self.args.seed, self.state.global_step, self.accelerator.process_index])

    def torch_rng(self) -> torch.Generator:
        """A torch generator seeded like ``row_rng`` (a shuffled split of the rows into micro-batches)."""
        return torch.Generator().manual_seed(int(self.row_rng().integers(2**62)))

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
        values.update({  # time/rollout_s and time/credit_s: per optimizer step, in _close_step
            "time/env_s": self._timing.env_s,
            "time/env_share": self._timing.env_s / max(rollout_s, 1e-9),
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

    def completion_logps(self, prompts: list[list[int]], completions: list[list[int]], entropy: bool = False,
                         reference: bool = False) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """No-grad (log-probs, entropies, reference log-probs) of the completion tokens, (N, T)
        float32 numpy, T the longest completion (0 at padding positions): the update's own forward
        (``agentrl.trainer.logprobs``) on the policy and the reference, in chunks of
        ``per_device_train_batch_size`` rows."""
        pid = self.processing_class.pad_token_id
        rows = [Row(prompt=list(p), completion=list(c), loss_mask=[1] * len(c), adv=[0.0] * len(c))
                for p, c in zip(prompts, completions, strict=True)]
        width = max(len(c) for c in completions)
        size = max(1, self.args.per_device_train_batch_size)
        parts: list[list[np.ndarray]] = [[], [], []]
        with torch.no_grad():
            for i in range(0, len(rows), size):
                mb = {k: v.to(self.accelerator.device) for k, v in pack_rows(rows[i:i + size], pid).items()}
                lp, ent = completion_logps(self.model, mb, self.accelerator.autocast, entropy=entropy)
                ref = ref_logps_of(self, mb) if reference else None
                for j, t in enumerate((lp, ent, ref)):
                    if t is not None:
                        parts[j].append(np.pad(t.float().cpu().numpy(), ((0, 0), (0, width - t.shape[1]))))
        logp, ent, ref = (np.concatenate(p) if p else None for p in parts)
        return logp, ent, ref

    # ------------------------------------------------------------------ for runners and tools
    @property
    def micro_step(self) -> int:
        """Training micro-steps done (TRL's counter; it counts the current one once TRL's
        ``training_step`` has run)."""
        return self._step

    def log_metric(self, name: str, value: float, mode: str = "train") -> None:
        """Add a value to this logging step's ``name`` (values are averaged when logged)."""
        self._metrics[mode][name].append(float(value))

    def learning_rate(self) -> float:
        """The scheduler's current learning rate."""
        return float(self._get_learning_rate())

    # ------------------------------------------------------------------ micro-batches
    def groups_rows_by_length(self) -> bool:
        """Whether the update may group rows by length: the gradient must not depend on which
        rows share a micro-batch. It does not when every optimizer step covers whole generation
        batches and the loss is not normalised per micro-batch (``bnpo``)."""
        a = self.args
        return a.gradient_accumulation_steps % a.steps_per_generation == 0 and self.loss_is_split_invariant()

    def loss_is_split_invariant(self) -> bool:
        """Whether the loss ignores how rows are split into micro-batches (no per-micro-batch
        normaliser: every registered GRPO-family loss but ``bnpo``)."""
        return self.loss_name != "bnpo"

    def _prepare_inputs(self, generation_batch: dict[str, Any]) -> dict[str, Any]:
        """TRL's buffering: one rollout every ``steps_per_generation * num_iterations`` micro-steps,
        cut into the runner's micro-batches, each with its old / reference log-probs computed on
        its own tensors (``agentrl.trainer.update.reference_logps``). In evaluation the rollout is
        one micro-batch. Logged: ``rows/real_token_share``."""
        mode = "train" if self.model.training else "eval"
        if mode == "eval":
            return self.micro_batches(self.make_iteration_batch(generation_batch), mode)[0]
        spg = self.args.steps_per_generation
        if self._step % (spg * self.num_iterations) == 0 or self._buffered_inputs is None:
            # _buffered_inputs is None right after resuming from a checkpoint
            t0 = time.perf_counter()
            batch = self.make_iteration_batch(generation_batch)
            self._buffered_inputs = self.micro_batches(batch, mode)
            self._gen_in_step += time.perf_counter() - t0  # excluded from time/update_s
            self._metrics["train"]["rows/real_token_share"].append(real_token_share(self._buffered_inputs))
        return self._buffered_inputs[self._step % spg]

    def micro_batches(self, batch: dict[str, Any], mode: str) -> list[dict[str, Any]]:
        """The runner's micro-batches of ``batch``, each with its old / reference log-probs
        (timed: ``time/rows_s`` includes the split, ``time/logps_s`` is the no-grad forwards)."""
        t0 = time.perf_counter()
        out = self.runner.micro_batches(batch, mode)
        t1 = time.perf_counter()
        for mb in out:
            mb.update(reference_logps(self, mb))
        self.timings["rows_s"] = self.timings.get("rows_s", 0.0) + t1 - t0
        self.timings["logps_s"] = self.timings.get("logps_s", 0.0) + time.perf_counter() - t1
        return out

    # ------------------------------------------------------------------ the loss
    def _compute_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        """The micro-batch's policy log-probs (one forward) into the algorithm's registered loss.
        A loss that is not finite (or reads a non-finite input) is reported to the guard and
        returned as NaN, so every rank's gradient is non-finite and the step is skipped
        everywhere (DeepSpeed checks its partitioned gradients itself)."""
        mode = "train" if self.model.training else "eval"
        logps, entropy = completion_logps(model, inputs, self.accelerator.autocast, entropy=True)
        batch = LossBatch(logps=logps, advantages=inputs["advantages"], mask=inputs["loss_mask"].float(),
                          old_logps=inputs.get("old_logps"), ref_logps=inputs.get("ref_logps"), entropy=entropy)
        out, bad = losses.compute(self.loss_name, batch, loss_settings(self, inputs, mode, self.loss_options))
        self.last_loss = out
        log_loss_metrics(self, out, mode)
        if bad and mode == "train":
            self.guard.note_loss(self._step % self.args.gradient_accumulation_steps, bad,
                                 self.accelerator.process_index)
            return out.loss * float("nan")
        return out.loss

    # ------------------------------------------------------------------ micro-steps
    def training_step(self, model, inputs, num_items_in_batch):
        """TRL's micro-step on the model the runner names, timed; after the optimizer step's last
        micro-step, the non-finite guard's verdict (``_close_step``)."""
        model = self.runner.begin_micro_step(model)
        self._gen_in_step = 0.0
        t0 = time.perf_counter()
        out = super().training_step(model, inputs, num_items_in_batch)
        self._update_s = getattr(self, "_update_s", 0.0) + time.perf_counter() - t0 - self._gen_in_step
        if self.accelerator.sync_gradients:
            self._close_step(model)
        self.runner.end_micro_step()
        return out

    def _close_step(self, model) -> None:
        """Decide whether the optimizer step that follows may run: skipped (no update, gradients
        dropped, the schedule held) when a loss or a gradient was not finite on any rank; stop
        the run after ``nonfinite_max_consecutive`` such steps in a row. Logs the step's timings."""
        m = self._metrics["train"]
        if self.is_deepspeed_enabled:  # DeepSpeed has stepped (or skipped) inside the backward
            applied = self.accelerator.deepspeed_engine_wrapped.engine.was_step_applied()
            names, n_bad = [], 0 if applied else 1
        else:
            names, n_bad = nonfinite_grads(model.named_parameters())
        others = [x for i, notes in enumerate(gather_object([self.guard._pending])) if i != self.accelerator.process_index
                  for x in notes] if self.accelerator.num_processes > 1 else []
        self.skip_update = self.guard.end_step(self.state.global_step + 1, names, n_bad, others)
        if self.skip_update:
            if not self.is_deepspeed_enabled:  # AdamW skips parameters without a gradient: a no-op step
                model.zero_grad(set_to_none=True)
            if self.accelerator.is_main_process:
                print(f"agentrl train: warning: {self.guard.last}; the update was skipped", flush=True)
        m["train/nonfinite_steps"].append(float(self.guard.skipped))
        if self.accelerator.device.type == "cuda":
            m["gpu/peak_gib"].append(torch.cuda.max_memory_allocated() / 2**30)
        m["time/update_s"].append(self._update_s)
        for k in ("rollout_s", "credit_s", "rows_s", "logps_s"):
            m[f"time/{k}"].append(self.timings.pop(k, 0.0))
        self._update_s = 0.0
        self.guard.check_stop()

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's log; then a non-finite training loss, just logged as it was, leaves the Trainer's
        running sum (it resets it by subtracting it from itself: NaN - NaN stays NaN, and every
        later step would log NaN)."""
        super().log(logs, start_time)
        acc = getattr(self, "_tr_loss", None)
        if isinstance(acc, torch.Tensor) and not bool(torch.isfinite(acc).all()):
            acc.zero_()

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        """TRL's scheduler, held while the guard skips a step (DeepSpeed holds its own)."""
        sched = super().create_scheduler(num_training_steps, optimizer)
        if not self.is_deepspeed_enabled and not isinstance(sched, (HeldScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)):
            self.lr_scheduler = HeldScheduler(sched, lambda: self.skip_update)
        return self.lr_scheduler

    # ------------------------------------------------------------------ checkpoints
    def identity(self) -> dict[str, Any]:
        """What a checkpoint of this run is tied to: the processes and the identity keys' values."""
        from agentrl.recipe_keys import identity_keys

        keys = {k: json.loads(json.dumps(getattr(self.args, k), default=str)) for k in identity_keys()}
        keys["algorithm"] = self.algorithm.name
        return {"processes": self.accelerator.num_processes, "keys": keys}

    def _check_resumable(self, checkpoint) -> None:
        from agentrl.checkpoints import identity_mismatch, newest_complete
        from agentrl.recipe_file import RecipeError

        folder = newest_complete(self.args.output_dir)[0] if checkpoint is True else checkpoint
        why = identity_mismatch(folder, self.identity()) if folder is not None else None
        if why:
            raise RecipeError(f"resume: {why}")

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        """TRL's optimizer and scheduler, then the guard's counts, the checkpoint's identity and the
        runner's part."""
        from agentrl.checkpoints import write_identity

        super()._save_optimizer_and_scheduler(output_dir)
        if self.args.should_save:
            (Path(output_dir) / GUARD_FILE).write_text(json.dumps(self.guard.state_dict()))
            write_identity(output_dir, self.identity())
        self.runner.save_checkpoint(output_dir)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """TRL's optimizer and scheduler, then the guard's counts and the runner's part."""
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        guard = Path(checkpoint) / GUARD_FILE
        if guard.is_file():
            self.guard.load_state_dict(json.loads(guard.read_text()))
        self.runner.load_checkpoint(checkpoint)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """TRL's model folder; the final one (not a checkpoint's) gets the runner's files too."""
        super().save_model(output_dir, _internal_call)
        if not _internal_call:
            self.runner.save_model(output_dir or self.args.output_dir)


GUARD_FILE = "nonfinite_guard.json"
"""The non-finite guard's counts in a checkpoint folder."""
