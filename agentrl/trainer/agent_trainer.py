"""``AgentGRPOTrainer``: GRPOTrainer with multi-turn env rollouts and pluggable step-level credit.

One iteration (DESIGN.md), all inside ``_generate_and_score_completions`` (TRL calls it once per
``steps_per_generation * num_iterations`` training steps and buffers/splits what it returns):

1. the inputs are tasks (``task_seed``, ``task_options``); TRL's RepeatSampler already repeated
   each task ``num_generations`` times, so equal task ids = one group (group id
   ``s{global_step}:t{task_id}``, unique per iteration; groups may straddle ranks);
2. ``run_episodes`` plays them: one batched ``_generate_single_turn`` call per turn (TRL's own
   path: HF generate / vLLM / ZeRO-3 gather), ranks in lock-step: a rank whose episodes ended
   keeps joining each call with a dummy prompt until a gathered "still active" flag is 0 on all;
3. step records are gathered across ranks, the credit module runs on the global batch, each rank
   takes back its own slice;
4. records become training rows with (B, T) advantages (window: one row per step; trajectory:
   one row per episode, env tokens in ``tool_mask`` = 0) that go into TRL's unchanged loss.

Rows per rank vary with episode lengths; ZeRO-3 needs the same number of forwards on every
rank, so every rank trains on R rows: R = max over ranks of its rows (capped by
``max_rows_per_rank``, rounded up to a multiple of ``steps_per_generation``). Ranks with fewer
rows add filler rows whose loss mask is 0 (no gradient, not counted in the DAPO normaliser);
ranks with more rows than the cap sample R of them uniformly (seeded by seed, step, rank).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation
from trl.trainer.utils import pad

from agentrl.config import AgentRLConfig
from agentrl.recipe_file import RecipeError
from agentrl.records import StepRecord, write_jsonl
from agentrl.rollout.episodes import Episode, GenerateOutput, run_episodes
from agentrl.rollout.generation import FingerprintCapture, truncated_forward_fingerprints


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


# ----------------------------------------------------------------------------------- hooks
class RolloutHooks:
    """Extension points for estimators that change the rollout (APPO, CCPO/SEPO).

    The trainer calls ``before_rollout`` with this rank's tasks and ``after_rollout`` with this
    rank's episodes; what ``after_rollout`` returns is the batch, so to add episodes return
    ``episodes + extra`` (they get credit and rows like the others; give extra episodes traj_ids
    of their own, as ``trainer.rollout`` numbers from the tasks it is given). Inside hooks, use
    the trainer's collective-safe helpers:

    * ``trainer.rollout(tasks, **overrides)``: more episodes (e.g. CCPO counterfactual *solo*
      rollouts with a changed context: other ``env_kwargs``, options, ``history_length``);
    * ``trainer.generate_branches(prompt_ids, prefix_ids, k)``: APPO branching, K
      continuations of ``prompt + completion[:i]`` through ``_generate_single_turn``.

    Both are collectives (generation is, under ZeRO-3 / vLLM server): every rank must call them
    the same number of times with the same list lengths, e.g. by deciding from gathered data.
    """

    def before_rollout(self, trainer: AgentGRPOTrainer, tasks: list[dict]) -> list[dict]:
        return tasks

    def after_rollout(self, trainer: AgentGRPOTrainer, episodes: list[Episode]) -> list[Episode]:
        return episodes


def env_reward(prompts=None, completions=None, **kwargs):
    """Placeholder reward function: GRPOTrainer requires one, but rewards come from the env
    (step records) and advantages from the credit module; TRL's reward path is never called."""
    raise RuntimeError("env_reward is a placeholder: AgentGRPOTrainer scores episodes itself")


# ----------------------------------------------------------------------------------- dataset
def build_task_dataset(args: AgentRLConfig):
    """Training tasks: seeds task_seed_start .. +num_tasks with the recipe's reset options."""
    from datasets import Dataset

    opts = json.dumps(args.reset_options(), sort_keys=True)
    seeds = list(range(args.task_seed_start, args.task_seed_start + args.num_tasks))
    return Dataset.from_dict({
        "prompt": [f"{args.env_id} seed={s}" for s in seeds],  # TRL expects a prompt column
        "task_id": list(range(len(seeds))),
        "task_seed": seeds,
        "task_options": [opts] * len(seeds),
    })


# ----------------------------------------------------------------------------------- trainer
def _check_fingerprint_layer(model, layer: int) -> None:
    """RecipeError unless ``fingerprint_layer`` indexes one of the model's decoder layers."""
    if isinstance(model, (str, Path)):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model)
    else:
        config = model.config
    n = getattr(config, "num_hidden_layers", None)
    if isinstance(n, int) and not -n <= layer < n:
        raise RecipeError(f"fingerprint_layer {layer} is out of range for a model with {n} decoder layers "
                          f"(valid: {-n}..{n - 1})")


class AgentGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose "completions" are multi-turn env episodes. See the module docstring.

    Args:
        model: model id/folder or a PreTrainedModel.
        args: AgentRLConfig.
        train_dataset: task dataset (default ``build_task_dataset(args)``).
        processing_class: tokenizer (default: loaded from the model folder).
        peft_config: a peft.LoraConfig to train an adapter.
        callbacks: Trainer callbacks.
        hooks: RolloutHooks for rollout-changing estimators.
    """

    def __init__(self, model, args: AgentRLConfig, train_dataset=None, processing_class=None,
                 peft_config=None, callbacks=None, hooks: RolloutHooks | None = None):
        credit_kw = credit_kwargs(args)
        credit_needs = credit_requirements(args.credit, credit_kw)
        if "fingerprint" in credit_needs:  # fail before the model loads, not at the first rollout
            _check_fingerprint_layer(model, args.fingerprint_layer)
        if train_dataset is None:
            train_dataset = build_task_dataset(args)
        super().__init__(model=model, reward_funcs=[env_reward], args=args, train_dataset=train_dataset,
                         processing_class=processing_class, peft_config=peft_config, callbacks=callbacks)
        self.hooks = hooks or RolloutHooks()
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
        self.last_rollout: dict[str, Any] | None = None
        """The latest iteration's global records, advantages and this rank's rows (for tests/tools)."""

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
        else:
            completion_ids, _ = self._generate_single_turn(prompts, None, {}, num_generations=1)
        if self.need_fingerprint and self.use_vllm:
            # vLLM generated elsewhere: a truncated no-grad forward through blocks 0..L only.
            t1 = time.perf_counter()
            with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                             gather_deepspeed3_params=self.args.ds3_gather_for_generation) as m:
                fps = truncated_forward_fingerprints(m, prompts, self.args.fingerprint_layer,
                                                     self._tokenizer.pad_token_id)
            self._fp_time += time.perf_counter() - t1
        self._gen_time += time.perf_counter() - t0
        self._gen_tokens += sum(len(c) for c in completion_ids)
        completion_ids = [list(c) for c in completion_ids]
        return GenerateOutput(completion_ids, fps) if fps is not None else completion_ids

    def _sync(self, local_active: bool) -> bool:
        if self.accelerator.num_processes == 1:
            return local_active
        flag = torch.tensor([int(local_active)], device=self.accelerator.device)
        return bool(self.accelerator.gather(flag).sum().item() > 0)

    def rollout(self, tasks: list[dict], **overrides) -> list[Episode]:
        """Play ``tasks`` with the current policy (collective: all ranks call it together)."""
        a = self.args
        kw = dict(env_kwargs=a.env_kwargs, context_mode=a.context_mode, history_length=a.history_length,
                  max_turns=a.max_turns, max_prompt_tokens=a.max_prompt_tokens, prefill=a.prefill)
        kw.update(overrides)
        progress = self.accelerator.is_main_process and not a.disable_tqdm
        return run_episodes(a.env_id, tasks, self._turn_generate, self.processing_class, progress=progress,
                            sync=self._sync if self.accelerator.num_processes > 1 else None,
                            pad_batch=self.use_vllm, **kw)

    def generate_branches(self, prompt_ids: list[int], prefix_ids: list[int], k: int) -> list[list[int]]:
        """APPO hook: K sampled continuations of ``prompt_ids + prefix_ids`` (a token position
        inside an action), through TRL's per-turn generation. Returns the continuations only."""
        out = self._turn_generate([list(prompt_ids) + list(prefix_ids)] * k)
        return out.completion_ids if isinstance(out, GenerateOutput) else out

    # ------------------------------------------------------------------ the iteration
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        t_start = time.perf_counter()
        a = self.args
        mode = "train" if self.model.training else "eval"
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        step = self.state.global_step
        tasks = []
        for k, x in enumerate(inputs):
            tasks.append({"seed": int(x["task_seed"]), "options": json.loads(x["task_options"]),
                          "group_id": f"s{step}:t{int(x['task_id'])}", "traj_id": f"s{step}:r{rank}:{k}"})
        tasks = self.hooks.before_rollout(self, tasks)

        # 1-2. rollout
        self._fp_time = self._gen_time = 0.0
        self._gen_tokens = 0
        t0 = time.perf_counter()
        episodes = self.rollout(tasks)
        episodes = self.hooks.after_rollout(self, episodes)
        rollout_s = time.perf_counter() - t0

        # shaping reward for accepted actions (spread inside groups that all fail)
        for ep in episodes:
            for r in ep.steps:
                r.info["env_reward"] = r.reward
                if a.valid_action_reward and r.valid:
                    r.reward = r.reward + a.valid_action_reward

        # 3. global credit
        t1 = time.perf_counter()
        local = [r for ep in episodes for r in ep.steps]
        if not self.need_fingerprint:
            for r in local:
                r.fingerprint = None
        gathered = gather_object([[r.to_dict() for r in local]]) if world > 1 else [[r.to_dict() for r in local]]
        counts = [len(g) for g in gathered]
        offset = sum(counts[:rank])
        all_records = [StepRecord.from_dict(d) for g in gathered for d in g]
        adv_all, diag = compute_credit(a.credit, all_records, self.credit_kw)
        adv_local = adv_all[offset: offset + len(local)]
        credit_s = time.perf_counter() - t1

        # 4. rows
        rows = self._episode_rows(episodes, adv_local)
        n_real = len(rows)
        n_max = max(gather_object([n_real])) if world > 1 else n_real
        R = max(n_max, 1)
        if a.max_rows_per_rank is not None:
            R = min(R, a.max_rows_per_rank)
        spg = a.steps_per_generation if mode == "train" else 1
        R = int(math.ceil(R / spg) * spg)
        dropped = 0
        if n_real > R:
            rng = np.random.default_rng([a.seed, step, rank])
            keep = sorted(rng.choice(n_real, size=R, replace=False).tolist())
            dropped = n_real - R
            rows = [rows[i] for i in keep]
        filler = R - len(rows)
        pad_id = self._tokenizer.pad_token_id
        rows += [dict(prompt=[pad_id], completion=[pad_id], loss_mask=[0], adv=[0.0])] * filler
        out = self._rows_to_batch(rows, mode)

        # metrics (global: every rank computes the same numbers from gathered summaries)
        summ = [dict(won=ep.won, length=ep.length, invalid=ep.n_invalid, error=ep.error is not None,
                     truncated=ep.truncated, family=ep.task_family, ret=ep.return_) for ep in episodes]
        all_summ = [s for g in (gather_object([summ]) if world > 1 else [summ]) for s in g]
        m = self._metrics[mode]
        if all_summ:
            m["env/success"].append(float(np.mean([s["won"] for s in all_summ])))
            m["env/episode_len"].append(float(np.mean([s["length"] for s in all_summ])))
            m["env/return"].append(float(np.mean([s["ret"] for s in all_summ])))
            steps_total = sum(s["length"] for s in all_summ)
            m["env/invalid_action_rate"].append(sum(s["invalid"] for s in all_summ) / max(steps_total, 1))
            m["env/error_episodes"].append(float(sum(s["error"] for s in all_summ)))
            m["env/truncated_frac"].append(float(np.mean([s["truncated"] for s in all_summ])))
            fams = sorted({s["family"] for s in all_summ if s["family"]})
            for f in fams:
                m[f"env/success/{f}"].append(float(np.mean([s["won"] for s in all_summ if s["family"] == f])))
        m["time/rollout_s"].append(rollout_s)
        m["time/credit_s"].append(credit_s)
        m["time/fingerprint_s"].append(self._fp_time)
        m["gen/tokens_per_s"].append(self._gen_tokens / max(self._gen_time, 1e-9))
        m["rows/real"].append(float(min(n_real, R)))
        m["rows/filler"].append(float(filler))
        m["rows/dropped"].append(float(dropped))
        for k, v in diag.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                m[f"credit/{k}"].append(float(v))
        if len(adv_all):
            m["credit/adv_mean"].append(float(np.mean(adv_all)))
            m["credit/adv_abs_mean"].append(float(np.mean(np.abs(adv_all))))

        if a.save_rollouts and self.accelerator.is_main_process:
            dicts = []
            for r, adv in zip(all_records, adv_all, strict=True):
                d = r.to_dict()
                d.setdefault("info", {})["advantage"] = float(adv)
                dicts.append(d)
            write_jsonl(dicts, Path(a.output_dir) / "rollouts" / f"iter_{step:05d}.jsonl")
        self.last_rollout = dict(records=all_records, advantages=adv_all, offset=offset, n_local=len(local),
                                 rows=out, episodes=episodes, n_real_rows=n_real, filler=filler)
        self._gen_in_step += time.perf_counter() - t_start  # excluded from time/update_s
        return out

    def _episode_rows(self, episodes: list[Episode], adv_local: np.ndarray) -> list[dict]:
        """Training rows of this rank's episodes with their per-token advantages."""
        rows = []
        i = 0
        for ep in episodes:
            n = len(ep.steps)
            advs = adv_local[i: i + n]
            i += n
            if n == 0:
                continue
            if self.args.context_mode == "window":
                for p, c, av in zip(ep.prompt_ids, ep.completion_ids, advs, strict=True):
                    if c:
                        rows.append(dict(prompt=p, completion=c, loss_mask=[1] * len(c), adv=[float(av)] * len(c)))
            else:
                c = ep.traj_completion_ids
                tok_adv = [0.0] * len(c)
                for (s, e), av in zip(ep.step_spans, advs, strict=True):
                    for j in range(s, e):
                        tok_adv[j] = float(av)
                rows.append(dict(prompt=ep.traj_prompt_ids, completion=c, loss_mask=list(ep.env_mask), adv=tok_adv))
        return rows

    def _rows_to_batch(self, rows: list[dict], mode: str) -> dict[str, Any]:
        device = self.accelerator.device
        pad_id = self._tokenizer.pad_token_id
        p = [torch.tensor(r["prompt"], dtype=torch.long) for r in rows]
        c = [torch.tensor(r["completion"], dtype=torch.long) for r in rows]
        prompt_ids = pad(p, padding_value=pad_id, padding_side="left").to(device)
        prompt_mask = pad([torch.ones_like(t) for t in p], padding_value=0, padding_side="left").to(device)
        completion_ids = pad(c, padding_value=pad_id, padding_side="right").to(device)
        completion_mask = pad([torch.ones_like(t) for t in c], padding_value=0, padding_side="right").to(device)
        loss_mask = pad([torch.tensor(r["loss_mask"], dtype=torch.long) for r in rows], padding_value=0,
                        padding_side="right").to(device)
        advantages = pad([torch.tensor(r["adv"], dtype=torch.float32) for r in rows], padding_value=0.0,
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
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        att = torch.cat([prompt_mask, completion_mask], dim=1)
        keep = completion_ids.size(1)
        bs = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        generate_every = self.args.steps_per_generation * self.num_iterations
        with torch.no_grad():
            if self.args.gradient_accumulation_steps % generate_every != 0:
                out["old_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, att, keep, batch_size=bs)
            if self.beta != 0.0:
                if self.ref_model is not None:
                    out["ref_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                        self.ref_model, ids, att, keep, batch_size=bs)
                else:
                    from trl.trainer.utils import use_adapter

                    model = self.accelerator.unwrap_model(self.model)
                    with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                        out["ref_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                            self.model, ids, att, keep, batch_size=bs)
        return out

    # ------------------------------------------------------------------ timing
    def training_step(self, model, inputs, num_items_in_batch):
        self._gen_in_step = 0.0
        t0 = time.perf_counter()
        out = super().training_step(model, inputs, num_items_in_batch)
        self._metrics["train"]["time/update_s"].append(time.perf_counter() - t0 - self._gen_in_step)
        return out
