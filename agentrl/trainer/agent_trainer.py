"""``AgentGRPOTrainer``: GRPOTrainer with multi-turn env rollouts, pluggable step-level credit
and our own loss.

TRL's training loop, optimizer, ZeRO-3, PEFT and checkpoints run as they are. The trainer is the
learner: its rollout source (``agentrl.producer``) hands it one ``RolloutBatch`` per iteration
(this rank's episodes, played by the algorithm's ``roll_out`` on a ``Player``; rewards shaped),
and it learns from it. One batch feeds ``steps_per_generation * num_iterations`` training
micro-steps (``_prepare_inputs`` buffers its micro-batches). An iteration is a list of named
steps, one method each (the data flow is drawn in ``docs/design.md``):

``source.next``         TRL's task rows -> this rank's episodes (group id ``s{step}:t{task_id}``;
                        groups may straddle ranks), the policy version that played them, timings
``_gather_and_credit``  step records of all ranks -> the algorithm's ``advantages`` -> this rank's slice
``runner.rows``         each episode's context turns it into training rows, balanced across ranks
``pack_rows``           the rows' tensors: prompt + completion packed, padding on the right only
``runner.micro_batches`` the update's micro-batches, each with its old / reference log-probs
                        computed on its own tensors (``agentrl.trainer.update``)

Each training micro-step (``_compute_loss``) computes the policy's log-probs once and calls the
algorithm's registered policy loss (``agentrl.losses``); the non-finite guard
(``agentrl.trainer.guard``) refuses an optimizer step whose loss or gradient is NaN or inf.
Where rows train (several policies, their checkpoints) is the algorithm's update runner
(``agentrl.algorithms.runner``), given a ``Learner`` handle. The learner's state (counters, the
guard's verdict, the algorithm's state, the metric sink, the models as TRL's loop holds them) is
one ``LearnerState`` (``agentrl.trainer.state``), owned and written here and read by the handles:
no handle, runner, plug-in or producer holds the trainer. There is no other trainer subclass.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers import Trainer
from trl import GRPOTrainer

from agentrl import losses
from agentrl.algorithms import Advantages, Algorithm, async_refusal, for_config
from agentrl.algorithms.learner import Learner
from agentrl.checkpoints import Checkpointed, Part, load_parts, save_parts
from agentrl.config import AgentRLConfig, credit_kwargs
from agentrl.losses import LossBatch
from agentrl.producer import GenerationSetup, Player, PolicyGeneration, RolloutBatch, SyncSource
from agentrl.recipe_file import RecipeError
from agentrl.records import StepRecord, write_jsonl
from agentrl.rollout.episodes import Episode
from agentrl.rollout.failures import EnvFailureWatch
from agentrl.rollout.metrics import episode_metrics, episode_summary
from agentrl.rollout.ranks import Ranks
from agentrl.rollout.rows import RowCounts, pack_rows, real_token_share
from agentrl.sampling.spec import SamplingSpec
from agentrl.sampling.vllm_engine import uses_engine
from agentrl.trainer.callbacks import PublishWeights, ReleaseFreedMemory, SyncOnTrainBegin
from agentrl.trainer.credited import Credited, credit_requirements
from agentrl.trainer.guard import HeldScheduler, NonFiniteGuard, nonfinite_grads
from agentrl.trainer.logprobs import completion_logps, install_compact_lm_heads
from agentrl.trainer.state import LearnerState, MetricSink
from agentrl.trainer.tasks import EpochTaskOrder, _check_fingerprint_layer, build_task_dataset, env_reward
from agentrl.trainer.update import (
    corrects,
    cudnn_attention,
    log_loss_metrics,
    loss_settings,
    needs_old_logps,
    old_logps,
    sampler_dtype,
)
from agentrl.trainer.views import Reference, Scorer
from agentrl.trainer.zero_signal import ZeroSignalWatch


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
        why = async_refusal(args, algorithm)
        if why:
            raise RecipeError(why)
        credit_needs = credit_requirements(args.credit, credit_kwargs(args))
        if "fingerprint" in credit_needs:  # fail before the model loads, not at the first rollout
            _check_fingerprint_layer(model, args.fingerprint_layer)
        if train_dataset is None:
            train_dataset = build_task_dataset(args)
        self.vllm_engine = None
        """agentrl's ``VLLMEngine`` when it serves ``use_vllm`` (vLLM's CPU build in its own venv and
        process, built with the first player); TRL then builds no ``VLLMGeneration``."""
        engine_vllm = uses_engine(args)
        args.use_vllm = args.use_vllm and not engine_vllm  # TRL's own vLLM stays off under the engine
        try:
            super().__init__(model=model, reward_funcs=[env_reward], args=args, train_dataset=train_dataset,
                             processing_class=processing_class, peft_config=peft_config, callbacks=callbacks)
        finally:
            args.use_vllm = args.use_vllm or engine_vllm
        self._engine_vllm = engine_vllm
        self.learner_state = LearnerState(metrics=MetricSink(self._metrics), seed=args.seed,
                                          rank=self.accelerator.process_index, world=self.accelerator.num_processes)
        """What the handles read (``agentrl.trainer.state``); written here only (``_sync_state``)."""
        self._sync_state()
        if args.compact_lm_head:  # TRL's fused head scores every position off Triton devices
            install_compact_lm_heads(self)
        self.algorithm = algorithm
        self.loss_name, self.loss_options = algorithm.loss(args)
        """The registered policy loss (``agentrl.losses``) and its own options."""
        self.by_length = (args.gradient_accumulation_steps % args.steps_per_generation == 0
                          and losses.is_split_invariant(self.loss_name))
        """Whether the update may group rows by length: the gradient must not depend on which rows
        share a micro-batch. It does not when every optimizer step covers whole generation batches
        and the loss is not normalised per micro-batch (``bnpo``). Fixed for the run."""
        self.reference = Reference(self.learner_state, self.ref_model, self.accelerator) if self.beta != 0.0 else None
        """The reference's log-probs of a micro-batch (``beta`` > 0; ``agentrl.trainer.views``)."""
        self.guard = NonFiniteGuard(args.nonfinite_max_consecutive)
        self.env_failures = EnvFailureWatch(args.env_id, args.max_env_failure_rate, args.max_env_failure_iterations)
        self.zero_signal = ZeroSignalWatch()  # steps whose advantages are all 0: counted, the first one said
        self.last_loss: losses.LossOutput | None = None
        """The latest micro-step's loss output (for tests and tools)."""
        self.timings: dict[str, float] = {}
        """Seconds of the parts of the current optimizer step (``time/*``)."""
        self.need_fingerprint = "fingerprint" in credit_needs
        # TRL's own vLLM IS ratio is never built: the rollout correction is ours, inside the loss, from
        # the behaviour log-probs the episodes carry (``agentrl.trainer.update.corrects``).
        self.vllm_importance_sampling_correction = False
        self.correcting = False
        """Whether the current rollout's micro-batches carry the sampler's log-probs into the loss
        (the rollout correction acts: ``agentrl.trainer.update.corrects``)."""
        self.last_rollout: dict[str, Any] | None = None
        """The latest iteration's global records, advantages and this rank's rows (for tests/tools)."""
        self._micro_batches: list[dict[str, Any]] | None = None
        """The current rollout's micro-batches (None right after a resume: the next step plays anew)."""
        self._gen_in_step = 0.0
        if self.accelerator.device.type == "cuda":
            cudnn_attention(bool(args.allow_cudnn_attention))
        self.add_callback(EpochTaskOrder())  # a resumed run draws the tasks the uninterrupted one did
        # TRL's loop creates (or, under DeepSpeed, wraps) the optimizer after this and before its
        # first callbacks: the learner state holds it from then on, for any callback that swaps
        # policies or reads the optimizer before our first step
        self.add_callback(SyncOnTrainBegin(self._sync_state))
        self.learner = Learner(
            self.learner_state, args, self.processing_class, self.accelerator,
            sampling={"temperature": self.temperature, "generation_kwargs": dict(self.generation_kwargs)},
            # Trainer's rule reads nothing of the trainer (pinned in test_trl_contract)
            decay_parameter_names=functools.partial(Trainer.get_decay_parameter_names, None),
            split_invariant=losses.is_split_invariant(self.loss_name), is_deepspeed=self.is_deepspeed_enabled)
        """What the algorithm's learner-side parts get (``agentrl.algorithms.learner``)."""
        self._model_path = model if isinstance(model, str) else getattr(model, "name_or_path", None)
        self.eval_source = SyncSource(self._player(), algorithm, args.valid_action_reward)
        """Plays in this process on the current weights: every rollout of a synchronous run, the
        evaluation rollouts of an asynchronous one."""
        self.source = self._async_source() if args.rollout_mode == "async" else self.eval_source
        """Where each training iteration's episodes come from (``agentrl.producer``)."""
        self.add_callback(PublishWeights(self.source))
        if self.accelerator.device.type == "cpu":
            self.add_callback(ReleaseFreedMemory())
        self.algorithm.bind(self.eval_source.player, self.learner)
        self.runner = self.algorithm.runner(self.learner)
        """Where the rows train (``agentrl.algorithms.runner``)."""

    def _player(self) -> Player:
        """The producer-side handle over this process's model: TRL's sampling settings and engine
        (HF generate, vLLM, continuous batching), the run's env batch, and the learner's no-grad
        forward for scoring completions (``completion_logps``)."""
        a, state = self.args, self.learner_state
        vllm = self._vllm_engine() if self._engine_vllm else getattr(self, "vllm_generation", None)
        engine = "vllm" if vllm is not None else "cb" if self.use_transformers_continuous_batching else "hf"
        self.sampling_spec = SamplingSpec.from_config(a, self.model, self.processing_class)
        """How every generate call of the run samples (``agentrl.sampling``; the learner's side of the
        rollout correction is scored under the same processing)."""
        setup = GenerationSetup(
            model=functools.partial(getattr, state, "model_wrapped"), accelerator=self.accelerator,
            pad_id=self.processing_class.pad_token_id,
            eos_ids=list(self.eos_token_ids), generation_config=self.generation_config,
            generation_kwargs=getattr(self, "generation_kwargs", None), pad_to_multiple_of=self.pad_to_multiple_of,
            gather_ds3=a.ds3_gather_for_generation, checkpointing_kwargs=a.gradient_checkpointing_kwargs,
            engine=engine, vllm=vllm,
            cb_config=getattr(self, "continuous_batching_config", None),
            cb_dtype=torch.bfloat16 if a.bf16 else torch.float16 if a.fp16 else None,
            cb_lm_head_fp32=bool(a.cast_lm_head_to_fp32), sampler_dtype=sampler_dtype(a.sampler_dtype),
            fingerprint_layer=a.fingerprint_layer if self.need_fingerprint else None, seed=a.seed,
            rank=self.accelerator.process_index, spec=self.sampling_spec)
        # the model and version are read off the learner state (a getattr, no code of this module), so
        # generation never calls back into the trainer's module (tests/trainer/test_round_trips.py)
        generation = PolicyGeneration(setup, version=functools.partial(getattr, state, "step"))
        scorer = Scorer(state, self.accelerator, self.processing_class.pad_token_id, a.per_device_train_batch_size,
                        Reference(state, self.ref_model, self.accelerator))
        return Player(a, generation, self.processing_class, Ranks.of(self.accelerator), score=scorer,
                      progress=self.accelerator.is_main_process and not a.disable_tqdm)

    def _vllm_engine(self):
        """agentrl's ``VLLMEngine`` over the run's model folder (started once; its server's log in
        the output folder)."""
        from agentrl.sampling.vllm_engine import VLLMEngine, engine_settings

        if self.vllm_engine is None:
            if not self._model_path:
                raise RecipeError("use_vllm on the vLLM engine needs the model as a folder (the engine loads it)")
            log = Path(self.args.output_dir) / f"vllm_server_rank{self.accelerator.process_index}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            # started at its first generate: an asynchronous run's learner generates only evaluations
            self.vllm_engine = VLLMEngine(**engine_settings(self.args, self._model_path), log=log, lazy=True)
        return self.vllm_engine

    def _async_source(self):
        """The asynchronous source (``agentrl.producer.async_source``): a producer process per rank
        with the model folder, the sampling settings and the task plan of this run."""
        from agentrl.trainer.sources import async_source

        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        return async_source(
            self.args, model_path=self._model_path, algorithm_name=self.algorithm.name,
            train_dataset=self.train_dataset, accelerator=self.accelerator, eval_source=self.eval_source,
            learner_state=self.learner_state, tokenizer=self.processing_class, vllm_engine=self._engine_vllm,
            zero3=bool(self.is_deepspeed_enabled and plugin is not None and plugin.zero_stage == 3))

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """TRL's training loop; a checkpoint to resume from must be of this run's kind (one line
        otherwise: ``agentrl.checkpoints.identity_mismatch``)."""
        if resume_from_checkpoint:
            self._check_resumable(resume_from_checkpoint)
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:  # the env workers and producers end with the run (a finalizer would too, later)
            self.source.close()
            self.eval_source.close()

    # ------------------------------------------------------------------ the iteration
    def make_iteration_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """One iteration's packed rows from TRL's task rows (module docstring: the steps)."""
        mode = "train" if self.model.training else "eval"
        batch = self.source.next(inputs, self.state.global_step, training=self.model.training)
        episodes = batch.episodes
        self.correcting = corrects(self.args, batch)
        credited = self._gather_and_credit(episodes)
        t0 = time.perf_counter()
        rows, counts = self.runner.rows(episodes, credited, mode)
        out = {k: v.to(self.accelerator.device) for k, v in pack_rows(rows, self.runner.pad_id()).items()}
        out["num_items_in_batch"] = self.accelerator.gather(out["num_items_in_batch"]).sum()
        self.timings["rows_s"] = time.perf_counter() - t0
        wait = batch.times.wall_s if batch.wait_s is None else batch.wait_s
        self.timings.update(rollout_s=wait, credit_s=credited.seconds)
        self.last_rollout = dict(records=credited.records, advantages=credited.advantages,
                                 offset=credited.offset, n_local=credited.n_local, rows=out, episodes=episodes,
                                 n_real_rows=counts.real, filler=counts.filler)
        self._log_metrics(mode, batch, credited, counts)
        self._write_rollouts(credited)
        return out

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
            adv, state = self.algorithm.advantages(episodes, records, self.algorithm_state)
            if self.model.training:
                self.learner_state.algorithm_state = state
        if adv.per_record.shape[0] != len(records):
            raise ValueError(f"algorithm {self.algorithm.name!r} gave {adv.per_record.shape[0]} advantages "
                             f"for {len(records)} records")
        return Credited(records=records, advantages=adv.per_record, diagnostics=adv.diagnostics, offset=offset,
                        n_local=len(local), seconds=time.perf_counter() - t0, per_token=adv.per_token)

    def _episode_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """``env/*`` metrics over all ranks' episodes (every rank computes the same numbers from
        gathered per-episode summaries)."""
        summ = [episode_summary(ep) for ep in self.algorithm.metric_episodes(episodes)]
        world = self.accelerator.num_processes
        all_summ = [s for g in (gather_object([summ]) if world > 1 else [summ]) for s in g]
        if not all_summ:
            return {}
        return {k: float(v) for k, v in episode_metrics(all_summ).items()}

    def _log_metrics(self, mode: str, batch: RolloutBatch, credited: Credited, counts: RowCounts) -> None:
        """Episode, timing, row and credit metrics into TRL's metric buffer."""
        m = self.learner_state.metrics.mode(mode)
        values = self._episode_metrics(batch.episodes)
        t = batch.times
        values.update({  # time/rollout_s and time/credit_s: per optimizer step, in _close_step
            "time/env_s": t.env_s,
            "time/env_share": t.env_share,
            "time/fingerprint_s": t.fingerprint_s,
            "gen/tokens_per_s": t.tokens_per_s,
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
        values.update(self.algorithm.metrics(self.state.global_step))
        values.update(batch.metrics)
        if mode == "train":  # env failures: counted, the first one said, a stop when nothing trains
            values.update(self.env_failures.observe(
                batch.episodes, counts.real, self.state.global_step + 1, Ranks.of(self.accelerator).gather,
                functools.partial(print, flush=True) if self.accelerator.is_main_process else None))
            values.update(self.zero_signal.observe(
                credited.records, credited.advantages, self.state.global_step + 1,
                functools.partial(print, file=sys.stderr, flush=True) if self.accelerator.is_main_process else None))
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
        dicts += self.env_failures.take_records()  # episodes that failed before their first step
        write_jsonl(dicts, Path(self.args.output_dir) / "rollouts" / f"iter_{self.state.global_step:05d}.jsonl")

    def completion_logps(self, prompts: list[list[int]], completions: list[list[int]], entropy: bool = False,
                         reference: bool = False) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """No-grad (log-probs, entropies, reference log-probs) of the completion tokens (the
        player's ``Scorer``, ``agentrl.trainer.views``)."""
        return self.eval_source.player.score(prompts, completions, entropy=entropy, reference=reference)

    # ------------------------------------------------------------------ the learner state
    @property
    def algorithm_state(self) -> Any:
        """What the algorithm's ``advantages`` hook returned last (e.g. running statistics)."""
        return self.learner_state.algorithm_state

    @property
    def micro_step(self) -> int:
        """Training micro-steps done (TRL's counter; it counts the current one once TRL's
        ``training_step`` has run)."""
        return self._step

    def _sync_state(self) -> None:
        """Copy what TRL's loop moves (its counters, the objects it wraps and replaces) into the
        learner state, at the start of every step of ours that hands the state down."""
        st = self.learner_state
        st.step, st.micro_step = int(self.state.global_step), int(getattr(self, "_step", 0))
        st.model, st.model_wrapped = self.model, getattr(self, "model_wrapped", self.model)
        st.optimizer, st.lr_scheduler = self.optimizer, self.lr_scheduler

    # ------------------------------------------------------------------ micro-batches
    def groups_rows_by_length(self) -> bool:
        """``by_length`` (decided when the trainer is built)."""
        return self.by_length

    def _prepare_inputs(self, generation_batch: dict[str, Any]) -> dict[str, Any]:
        """TRL's buffering: one rollout every ``steps_per_generation * num_iterations`` micro-steps,
        cut into the runner's micro-batches, each with its old / reference log-probs computed on
        its own tensors (``micro_batches``). In evaluation the rollout is
        one micro-batch. Logged: ``rows/real_token_share``."""
        self._sync_state()
        mode = "train" if self.model.training else "eval"
        if mode == "eval":
            return self.micro_batches(self.make_iteration_batch(generation_batch), mode)[0]
        spg = self.args.steps_per_generation
        if self._step % (spg * self.num_iterations) == 0 or self._micro_batches is None:
            # _micro_batches is None right after resuming from a checkpoint
            t0 = time.perf_counter()
            batch = self.make_iteration_batch(generation_batch)
            self._micro_batches = self.micro_batches(batch, mode)
            self._gen_in_step += time.perf_counter() - t0  # excluded from time/update_s
            self.learner_state.metrics.append("rows/real_token_share", real_token_share(self._micro_batches))
        return self._micro_batches[self._step % spg]

    def micro_batches(self, batch: dict[str, Any], mode: str) -> list[dict[str, Any]]:
        """The runner's micro-batches of ``batch``, each with its old / reference log-probs
        (timed: ``time/rows_s`` includes the split, ``time/logps_s`` is the no-grad forwards)."""
        t0 = time.perf_counter()
        out = self.runner.micro_batches(batch, mode, by_length=self.by_length,
                                        generator=self.learner_state.torch_rng())
        t1 = time.perf_counter()
        autocast, spec = self.accelerator.autocast, getattr(self, "sampling_spec", None)
        for mb in out:
            if not self.correcting:  # the sampler is the learner: no correction, no extra forward
                mb.pop("behaviour_logps", None)
            if needs_old_logps(self.args, self.num_iterations, mb):  # under the policy mb's rows are of
                with self.runner.policy(mb):
                    mb.update(old_logps(mb, self.runner.loss_model(mb), spec, autocast))
            if self.reference is not None:
                with torch.no_grad():
                    mb["ref_logps"] = self.reference(mb)
        self.timings["rows_s"] = self.timings.get("rows_s", 0.0) + t1 - t0
        self.timings["logps_s"] = self.timings.get("logps_s", 0.0) + time.perf_counter() - t1
        return out

    # ------------------------------------------------------------------ the loss
    def _compute_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        """The micro-batch's policy log-probs (one forward) into the algorithm's registered loss.
        A loss that is not finite (or reads a non-finite input) is reported to the guard and
        returned as NaN, so every rank's gradient is non-finite and the step is skipped
        everywhere (DeepSpeed checks its partitioned gradients itself)."""
        self._sync_state()
        mode = "train" if self.model.training else "eval"
        logps, entropy = completion_logps(model, inputs, self.accelerator.autocast, entropy=True)
        batch = LossBatch(logps=logps, advantages=inputs["advantages"], mask=inputs["loss_mask"].float(),
                          old_logps=inputs.get("old_logps"), ref_logps=inputs.get("ref_logps"), entropy=entropy,
                          behaviour_logps=inputs.get("behaviour_logps"), correction_logps=inputs.get("correction_logps"))
        a = self.args
        settings = loss_settings(
            a, inputs, mode, self.loss_options, processes=self.accelerator.num_processes,
            # set by the Trainer's loop for each optimizer step (fewer at an epoch's end)
            accumulation=getattr(self, "current_gradient_accumulation_steps", a.gradient_accumulation_steps),
            epsilon_low=self.epsilon_low, epsilon_high=self.epsilon_high, beta=self.beta,
            max_completion_length=self.max_completion_length)
        out, bad = losses.compute(self.loss_name, batch, settings)
        self.last_loss = out
        log_loss_metrics(out, self.learner_state.metrics.mode(mode), self.accelerator)
        if bad and mode == "train":
            self.guard.note_loss(self._step % self.args.gradient_accumulation_steps, bad,
                                 self.accelerator.process_index)
            return out.loss * float("nan")
        return out.loss

    # ------------------------------------------------------------------ micro-steps
    def training_step(self, model, inputs, num_items_in_batch):
        """TRL's micro-step on the model the runner names, timed; after the optimizer step's last
        micro-step, the non-finite guard's verdict (``_close_step``)."""
        self._sync_state()
        model = self.runner.begin_micro_step(model)
        self._gen_in_step = 0.0
        t0 = time.perf_counter()
        out = super().training_step(model, inputs, num_items_in_batch)
        self._sync_state()  # TRL counted the micro-step
        self._update_s = getattr(self, "_update_s", 0.0) + time.perf_counter() - t0 - self._gen_in_step
        if self.accelerator.sync_gradients:
            self._close_step(model)
        self.runner.end_micro_step()
        return out

    def _close_step(self, model) -> None:
        """Decide whether the optimizer step that follows may run: skipped (no update, gradients
        dropped, the schedule held) when a loss or a gradient was not finite on any rank; stop
        the run after ``nonfinite_max_consecutive`` such steps in a row. Logs the step's timings."""
        m = self.learner_state.metrics.mode("train")
        if self.is_deepspeed_enabled:  # DeepSpeed has stepped (or skipped) inside the backward
            applied = self.accelerator.deepspeed_engine_wrapped.engine.was_step_applied()
            names, n_bad = [], 0 if applied else 1
        else:
            names, n_bad = nonfinite_grads(model.named_parameters())
        others = [x for i, notes in enumerate(gather_object([self.guard._pending])) if i != self.accelerator.process_index
                  for x in notes] if self.accelerator.num_processes > 1 else []
        skip = self.learner_state.skip_update = self.guard.end_step(self.state.global_step + 1, names, n_bad, others)
        if skip:
            if not self.is_deepspeed_enabled:  # AdamW skips parameters without a gradient: a no-op step
                model.zero_grad(set_to_none=True)
            if self.accelerator.is_main_process:
                print(f"agentrl train: warning: {self.guard.last}; the update was skipped", file=sys.stderr,
                      flush=True)
        m["train/nonfinite_steps"].append(float(self.guard.skipped))
        if self.accelerator.device.type == "cuda":
            m["gpu/peak_gib"].append(torch.cuda.max_memory_allocated() / 2**30)
        m["time/update_s"].append(self._update_s)
        for k in ("rollout_s", "credit_s", "rows_s", "logps_s"):
            m[f"time/{k}"].append(self.timings.pop(k, 0.0))
        self._update_s = 0.0
        self.guard.check_stop()
        self.env_failures.check_stop()

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
            self.lr_scheduler = HeldScheduler(sched, functools.partial(getattr, self.learner_state, "skip_update"))
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

    def checkpointed(self) -> list[Checkpointed]:
        """What agentrl adds to a checkpoint, in the order it is read back: the guard's, the
        env-failure watch's and the zero-signal watch's counts, the runner's parts (a
        collaboration's policies and CCPO's statistics), then the batches an asynchronous producer
        owes the learner at this step (``agentrl.checkpoints.Checkpointed``)."""
        source = self.source.checkpointed(self.state.global_step) if hasattr(self.source, "checkpointed") else []
        return [Part(GUARD_FILE, self.guard), Part(ENV_FAILURES_FILE, self.env_failures),
                Part(ZERO_SIGNAL_FILE, self.zero_signal), *self.runner.checkpointed(), *source]

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        """TRL's optimizer and scheduler, then every part (``checkpointed``) in one loop and the
        checkpoint's identity."""
        from agentrl.checkpoints import write_identity

        super()._save_optimizer_and_scheduler(output_dir)
        self._sync_state()
        save_parts(self.checkpointed(), output_dir, self.accelerator.process_index, self.args.should_save)
        if self.args.should_save:
            write_identity(output_dir, self.identity())

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """TRL's optimizer and scheduler, then every part in one loop (a part whose file a checkpoint
        lacks starts afresh, unless it is required); the algorithm state a part held goes back
        into the learner state."""
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        self._sync_state()
        load_parts(self.checkpointed(), checkpoint, self.accelerator.process_index)
        restored = self.runner.restored_state()
        if restored is not None:
            self.learner_state.algorithm_state = restored

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """TRL's model folder; the final one (not a checkpoint's) also gets the model saved into the
        runner's folders (each with its weights in place) and the runner's own files."""
        super().save_model(output_dir, _internal_call)
        if not _internal_call:
            self._sync_state()
            out = output_dir or self.args.output_dir
            for folder, weights in self.runner.model_folders(out):  # e.g. a collaboration's policies
                with weights:
                    self.save_model(folder, _internal_call=True)
            self.runner.model_files(out)


GUARD_FILE = "nonfinite_guard.json"
"""The non-finite guard's counts in a checkpoint folder."""
ENV_FAILURES_FILE = "env_failures.json"
"""The env-failure watch's counts in a checkpoint folder."""
ZERO_SIGNAL_FILE = "zero_signal.json"
"""The zero-signal watch's count of steps without a gradient, in a checkpoint folder."""
