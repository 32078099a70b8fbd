"""One turn of the trained policy: completions of token-id prompts, sampled the way TRL 1.16 samples.

``PolicyGeneration`` is the producer's ``generate``: the prompts of every active episode in one
call, through one of three engines, each as TRL's ``GRPOTrainer`` drives it (the trainer's
generation config, its padding, one ZeRO-3 parameter gather per call), so that a seed gives the
tokens TRL's own path gives:

``hf``     ``model.generate`` on the left-padded prompts (``unwrap_model_for_generation``);
``vllm``   agentrl's ``VLLMEngine`` (vLLM's CPU build in a process of its own,
           ``agentrl.sampling.vllm_engine``: the run's spec, keyed seeds, the learner's full or
           LoRA-merged weights loaded in place) or TRL's ``VLLMGeneration`` (server or colocate,
           where vLLM imports in this process); either's weights synced when the policy version
           moved on since its last call;
``cb``     transformers' continuous batching (``generate_batch``).

Every call also returns the sampler's own log-prob of each token it drew (``GenerateOutput.logprobs``,
the behaviour log-probs the rollout correction compares with the learner's): HF generate's, under
the processed distribution it sampled from (``agentrl.sampling.hf``: the one sampler, under the
run's ``SamplingSpec``);
vLLM's processed ones (``VLLMEngine``), or TRL's third value of ``VLLMGeneration.generate`` (the
sampled token's, the first of each position's list; None there becomes NaN); continuous batching gives none (NaN: transformers'
``generate_batch`` does not return them).

``sampler_dtype`` (recipe key): HF generate runs under autocast to that dtype while the learner
stays in its own, a sampler that differs from the learner in a known way on any machine
(``differs_from_learner``).

When ``fingerprint_layer`` is set, a call also returns each prompt's hidden state at that layer
(``agentrl.rollout.generation.FingerprintCapture``: captured during the prefill, no extra
forward); under vLLM, which generates elsewhere, they are computed after the rollout
(``fingerprints_after``: one truncated forward over every step's prompt, one parameter gather).

**Requests** (``submit`` / ``poll``, where ``submits``: agentrl's ``VLLMEngine``): turns that
finish on their own, for a continuous producer (``agentrl.rollout.continuous``). Each request is
keyed (run seed, rank, training, its episode, its turn), so its draws do not depend on when or with
what it was batched (``agentrl.sampling.vllm_engine``: keyed, not keyed-exact). A version that moved
on is loaded between requests, never under one: new requests are held while older ones are in
flight, the engine loads once none is, then the held ones go (every request's tokens are of the one
version it records, ``Finished.version``).

**Keyed sampling.** Each call draws its random numbers from a generator seeded by a key of its own:
(run seed, rank, optimizer step, training or evaluation, the play within the iteration, the call
within the play) (``sampling_seed``), inside a fork of torch's global random state (nothing else
the process draws moves it, and it moves nothing else). The same weights then give the same
tokens wherever and whenever the call runs: a resumed run, a producer in another process (the
asynchronous source at staleness 0 equals the synchronous run), or a rank whose other collectives
differ. ``VLLMEngine`` is keyed the same way (its own random stream: the same key gives the same
tokens there, not HF's); TRL's ``VLLMGeneration`` samples with its own generator and is not keyed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl.rollout.episodes import GenerateOutput
from agentrl.rollout.generation import FingerprintCapture, truncated_forward_fingerprints
from agentrl.sampling.hf import hf_sample
from agentrl.sampling.keys import keyed_rng, sampling_seed
from agentrl.sampling.spec import Finished, SamplingSpec

__all__ = ["GenerationSetup", "PolicyGeneration", "keyed_rng", "sampling_seed", "vllm_sampled_logprobs"]

NAN = float("nan")


@dataclass
class GenerationSetup:
    """What generation reads from the trainer, once, when it is built (the model by a getter:
    accelerate wraps it when training starts)."""

    model: Callable[[], Any]
    """The model as the trainer holds it now (DDP / DeepSpeed wrapped during training)."""
    accelerator: Any
    """The run's ``accelerate.Accelerator`` (device, unwrapping, collectives)."""
    pad_id: int
    eos_ids: list[int]
    generation_config: Any
    """TRL's ``GenerationConfig`` (sampling settings, max new tokens)."""
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    """Overrides of the model's own generation config during the call (TRL's ``generation_kwargs``)."""
    pad_to_multiple_of: int | None = None
    gather_ds3: bool = True
    """``ds3_gather_for_generation``: gather the ZeRO-3 partitions once per call."""
    checkpointing_kwargs: dict | None = None
    """Gradient checkpointing kwargs (it is switched off while generating and back on after)."""
    engine: str = "hf"
    """'hf', 'vllm' or 'cb' (module docstring)."""
    vllm: Any = None
    """Engine 'vllm': agentrl's ``VLLMEngine`` (it has ``load_weights``) or TRL's ``VLLMGeneration``."""
    cb_config: Any = None
    """transformers' ``ContinuousBatchingConfig`` (engine 'cb')."""
    cb_dtype: torch.dtype | None = None
    """The dtype the model generates in under 'cb' (bf16 / fp16 runs), else None."""
    cb_lm_head_fp32: bool = False
    sampler_dtype: torch.dtype | None = None
    """HF generate under autocast to this dtype (recipe key ``sampler_dtype``); None: the model's own."""
    fingerprint_layer: int | None = None
    """Capture fingerprints at this decoder layer (None: no fingerprints)."""
    seed: int = 0
    """The run's seed (the first part of every call's sampling key)."""
    rank: int = 0
    """This process's rank (the second part)."""
    spec: SamplingSpec | None = None
    """The run's sampling spec (``SamplingSpec.from_config``); None: read from ``generation_config``."""

    def sampling_spec(self) -> SamplingSpec:
        """``spec``, or the one ``generation_config`` and ``eos_ids`` describe."""
        if self.spec is not None:
            return self.spec
        g = self.generation_config
        return SamplingSpec.from_config(g, None, None, max_new_tokens=int(g.max_new_tokens),
                                        end_token_ids=tuple(sorted(set(self.eos_ids))))


class PolicyGeneration:
    """``generate(prompts) -> GenerateOutput`` (completion ids, their behaviour log-probs and, with
    ``fingerprint_layer``, fingerprints) of the trained policy, with seconds and token counts
    (module docstring)."""

    def __init__(self, setup: GenerationSetup, version: Callable[[], int]):
        self.setup = setup
        self.version = version
        """The policy version now (vLLM's weights are synced when it changes)."""
        self._synced_version: int | None = None
        self._capture: FingerprintCapture | None = None
        self.seconds = 0.0
        self.tokens = 0
        self.fingerprint_seconds = 0.0
        self._key: tuple[int, ...] = (setup.seed, setup.rank, 0, 1, 0)
        self.spec = setup.sampling_spec()
        """How every call samples (``agentrl.sampling``)."""
        self._calls = 0
        self._held: list[tuple[int, list[int], int]] = []
        """Requests waiting for the engine to load the version now: (id, prompt, seed)."""
        self._ids: dict[int, int] = {}
        """The engine's request id -> ours."""
        self._next_id = 0
        self.requests = 0
        """Requests submitted (``submit``), over the generation's life."""

    def reset_counters(self) -> None:
        self.seconds = self.fingerprint_seconds = 0.0
        self.tokens = 0

    def begin_play(self, step: int, training: bool, play: int) -> None:
        """The calls that follow belong to play ``play`` of the iteration at optimizer step ``step``
        (their sampling keys: module docstring)."""
        self._key = (self.setup.seed, self.setup.rank, int(step), int(bool(training)), int(play))
        self._calls = 0

    @property
    def fingerprints_with_generate(self) -> bool:
        """Whether fingerprints come back from each call (captured by a hook during the prefill)
        rather than after the rollout (vLLM generates elsewhere)."""
        return self.setup.fingerprint_layer is not None and self.setup.engine != "vllm"

    @property
    def differs_from_learner(self) -> bool:
        """Whether the distribution the tokens are drawn from can differ from the learner's on the
        same weights, so that the learner corrects with the behaviour log-probs: vLLM (its own
        kernels and dtype) or HF generate under ``sampler_dtype``. Continuous batching has no
        log-probs to correct with (False)."""
        s = self.setup
        return s.engine == "vllm" or (s.engine == "hf" and s.sampler_dtype is not None)

    def __call__(self, prompts: list[list[int]]) -> GenerateOutput:
        t0 = time.perf_counter()
        fps = None
        seed = sampling_seed(*self._key, self._calls)
        self._calls += 1
        with keyed_rng(seed, self.setup.accelerator.device):
            if self.fingerprints_with_generate:
                (completion_ids, logprobs), fps = self._with_fingerprints(prompts)
            else:
                completion_ids, logprobs = self._completions(prompts)
        self.seconds += time.perf_counter() - t0
        self.tokens += sum(len(c) for c in completion_ids)
        return GenerateOutput([list(c) for c in completion_ids], fps, logprobs)

    # ------------------------------------------------------------------ requests
    @property
    def submits(self) -> bool:
        """Whether turns go as requests that finish on their own (agentrl's ``VLLMEngine``:
        continuous batching); otherwise a continuous producer batches per tick."""
        return self.setup.engine == "vllm" and hasattr(self.setup.vllm, "submit")

    def submit(self, prompts: list[list[int]], keys: list[tuple[int, ...]]) -> list[int]:
        """One request per prompt, keyed (run seed, rank, training, *key); their ids. Sent at once,
        or held while the engine must first load a newer version (module docstring)."""
        t0 = time.perf_counter()
        base = (self.setup.seed, self.setup.rank, self._key[3])
        ids = list(range(self._next_id, self._next_id + len(prompts)))
        self._next_id += len(prompts)
        self.requests += len(prompts)
        self._held += [(i, list(p), sampling_seed(*base, *k)) for i, p, k in zip(ids, prompts, keys, strict=True)]
        self._send()
        self.seconds += time.perf_counter() - t0
        return ids

    def poll(self, timeout: float | None) -> list[Finished]:
        """The requests finished since the last poll (waiting up to ``timeout`` s for one while any
        is in flight), under our ids, with the version that drew each."""
        t0 = time.perf_counter()
        engine = self.setup.vllm
        self._send()
        done = engine.poll(timeout) if engine.unfinished() else []
        self._send()  # the drain a load waited for may have just ended
        self.seconds += time.perf_counter() - t0
        self.tokens += sum(len(f.completion_ids) for f in done)
        return [Finished(self._ids.pop(f.request_id), f.completion_ids, f.logprobs, f.version) for f in done]

    def abort(self) -> None:
        """Drop the requests held or in flight (their results never come)."""
        self._held.clear()
        self._ids.clear()
        self.setup.vllm.abort()

    def _send(self) -> None:
        """The held requests to the engine: now while it holds the version now; when the version
        moved on, once nothing is in flight, after loading it."""
        engine = self.setup.vllm
        if not self._held:
            return
        if self.version() != self._synced_version:
            if engine.unfinished():
                return
            self._sync_engine(engine)
        held, self._held = self._held, []
        ids = engine.submit([h[1] for h in held], self.spec, [h[2] for h in held])
        self._ids.update(zip(ids, (h[0] for h in held), strict=True))

    # ------------------------------------------------------------------ engines
    def _completions(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        """(completion ids, their behaviour log-probs) from the setup's engine."""
        engine = self.setup.engine
        if engine == "vllm":
            return self._vllm(prompts)
        if engine == "cb":
            return self._continuous_batching(prompts)
        return self._hf(prompts)

    def _unwrapped(self, generation_kwargs: dict | None = None, checkpointing: bool = True):
        """The model unwrapped (ZeRO-3: gathered) for a generation; gradient checkpointing is off
        inside when ``checkpointing`` (it disables the KV cache) and back on after."""
        from trl.models.utils import unwrap_model_for_generation

        s = self.setup
        return unwrap_model_for_generation(s.model(), s.accelerator, gather_deepspeed3_params=s.gather_ds3,
                                           generation_kwargs=generation_kwargs,
                                           gradient_checkpointing_kwargs=s.checkpointing_kwargs if checkpointing else None)

    def _hf(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        """The HF engine's call (``agentrl.sampling.hf.hf_sample``) on the unwrapped model: each
        completion up to and including its first end token, with the log-prob of each token under
        the processed distribution it was drawn from."""
        s = self.setup
        device = s.accelerator.device
        dtype = (torch.autocast(device.type, dtype=s.sampler_dtype) if s.sampler_dtype is not None
                 else nullcontext())
        with self._unwrapped(generation_kwargs=s.generation_kwargs) as m, torch.no_grad(), dtype:
            return hf_sample(m, prompts, self.spec, s.pad_id, s.pad_to_multiple_of, self._engine_kwargs())

    def _engine_kwargs(self) -> dict:
        """The generation config's settings beside the spec (cache implementation, bos), as TRL sets them."""
        g = self.setup.generation_config
        return {k: getattr(g, k) for k in ("cache_implementation", "bos_token_id", "suppress_tokens")
                if getattr(g, k, None) is not None}

    def _with_fingerprints(self, prompts: list[list[int]]) -> tuple[tuple[list[list[int]], list], list | None]:
        if self._capture is None:
            self._capture = FingerprintCapture(self.setup.accelerator.unwrap_model(self.setup.model()),
                                               self.setup.fingerprint_layer)
        with self._capture as cap:
            cap.elapsed = 0.0
            cap.arm()
            comps = self._completions(prompts)
            t1 = time.perf_counter()
            fps = cap.take()
            self.fingerprint_seconds += time.perf_counter() - t1 + cap.elapsed
        return comps, fps

    def _vllm(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        """vLLM's generation; its weights are synced first when the policy version moved on."""
        v = self.setup.vllm
        if hasattr(v, "load_weights"):
            return self._vllm_engine(v, prompts)
        if self.version() != self._synced_version:
            v.sync_weights()
            self._synced_version = self.version()
        _, completion_ids, logprobs, _ = v.generate(prompts=prompts, images=None, num_generations=1, profiler=nullcontext())
        return completion_ids, vllm_sampled_logprobs(logprobs, completion_ids)

    def _vllm_engine(self, engine, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        """agentrl's ``VLLMEngine`` under the run's spec, seeded by this call's key; the policy's
        weights (a LoRA adapter merged into its base) loaded first when the version moved on."""
        if self.version() != self._synced_version:
            self._sync_engine(engine)
        return engine.generate(prompts, self.spec, sampling_seed(*self._key, self._calls - 1))

    def _sync_engine(self, engine) -> None:
        """The policy's weights now (a LoRA adapter merged into its base) into ``engine``."""
        from agentrl.sampling.vllm_engine import merged_state_dict

        version = self.version()
        engine.load_weights(merged_state_dict(self.setup.accelerator.unwrap_model(self.setup.model())), version)
        self._synced_version = version

    def _continuous_batching(self, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        s = self.setup
        with self._unwrapped() as m, torch.no_grad():
            if s.cb_dtype is not None:
                m.to(s.cb_dtype)
            if s.cb_lm_head_fp32:
                m.lm_head.to(torch.float32)
            outs = m.generate_batch(prompts, generation_config=s.generation_config,
                                    continuous_batching_config=s.cb_config, progress_bar=False)
            m.train()
        ids = [o.generated_tokens for o in outs.values()]
        return ids, [[NAN] * len(c) for c in ids]  # generate_batch returns no log-probs

    # ------------------------------------------------------------------ fingerprints after a rollout
    def fingerprints_after(self, prompts: list[list[int]], chunk: int, n_chunks: Callable[[int], int]) -> list[list[float]]:
        """Fingerprints of a whole rollout's prompts (engines that do not capture them): a truncated
        no-grad forward through blocks 0..L, ``chunk`` prompts at a time, under one ZeRO-3 parameter
        gather. ``n_chunks(k)`` is the most chunks any rank has (without the gather each forward is
        a collective: every rank runs as many)."""
        t0 = time.perf_counter()
        chunks = [prompts[i:i + chunk] for i in range(0, len(prompts), chunk)]
        n = n_chunks(len(chunks))
        out: list[list[float]] = []
        with self._unwrapped(checkpointing=False) as m:
            for k in range(n):
                fps = truncated_forward_fingerprints(m, chunks[k] if k < len(chunks) else prompts[:1] or [[0]],
                                                     self.setup.fingerprint_layer, self.setup.pad_id)
                out += fps if k < len(chunks) else []
        self.fingerprint_seconds += time.perf_counter() - t0
        return out


def vllm_sampled_logprobs(logprobs, completion_ids: list[list[int]]) -> list[list[float]]:
    """The sampled token's log-prob at each position from vLLM's per-position lists (the first
    entry, as TRL takes it; a missing list or a None becomes NaN: a token the sampler did not score)."""
    if logprobs is None:
        return [[NAN] * len(c) for c in completion_ids]
    out = []
    for seq, c in zip(logprobs, completion_ids, strict=True):
        row = [NAN if not lp or lp[0] is None else float(lp[0]) for lp in (seq or [])]
        out.append((row + [NAN] * len(c))[:len(c)])
    return out
