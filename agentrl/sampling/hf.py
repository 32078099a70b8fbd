"""The HF engine: ``model.generate`` under a ``SamplingSpec``, with the sampler's own log-probs.

One padding rule (``left_pad``: every row's last prompt token in the last column, where generation
and fingerprints read it), one generation config per spec (``generation_config``: every knob set
explicitly, so a checkpoint's own sampling settings, e.g. top-k 50, never fill a gap), one cut
(``cut_rows``: after the first end token, inclusive).

Streaming (``HFEngine.stream``): the same ``generate`` call on a thread, each step's tokens and
their processed log-probs handed over as they are drawn (a stopping criterion reads the processed
scores ``generate`` keeps; it also stops the call when the reader has gone), at most
``STREAM_AHEAD`` steps ahead of the reader.

Requests (``HFEngine.submit`` / ``poll``): the ``Engine`` protocol's non-blocking path, kept simple
here: ``submit`` queues, ``poll`` runs one batched ``generate`` over what is queued (one per spec)
and returns all of it. Nothing generates between polls (one process, one model), so a caller gains
no overlap from it; it lets code written for vLLM's continuous batching run on HF unchanged.

Behaviour log-probs: the log-prob of each sampled token under the distribution ``generate`` drew
it from, i.e. after every logits processor (repetition penalty, temperature, top-k, top-p, min-p):
the ``scores`` that ``generate(output_scores=True, return_dict_in_generate=True)`` returns are
exactly the processed logits it softmaxes and samples from. Asking for them draws the same tokens
(the random stream is untouched; a stop check that undoes steps drops their scores too). The cost:
``generate`` holds one (B, V) float32 tensor per step until it returns, B x V x steps x 4 bytes,
dropped right after: 8 x 49,152 x 64 = 100 MB for SmolLM2 at the CPU recipes' sizes, 32 x 151,936
x 512 = 10 GB for a Qwen2.5 body at 512 new tokens (vLLM, the production path, holds none).
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.sampling.keys import keyed_rng, sampling_seed
from agentrl.sampling.spec import Finished, SamplingSpec


def left_pad(prompts: list[list[int]], pad_id: int, device,
             pad_to_multiple_of: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of ``prompts`` left-padded to one width (rounded up to a
    multiple of ``pad_to_multiple_of`` when given): every row's last prompt token sits in the last
    column."""
    width = max(len(p) for p in prompts)
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        if p:
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            att[i, width - len(p):] = 1
    return ids.to(device), att.to(device)


def generation_config(spec: SamplingSpec, pad_id: int | None, **extra: Any):
    """transformers' ``GenerationConfig`` of ``spec``: every sampling knob set, its off value
    included (top_k 0, top_p 1.0, min_p None is no processor), so nothing comes from the
    checkpoint's own config. ``extra``: engine settings (cache_implementation, ...)."""
    from transformers import GenerationConfig

    ends = list(spec.end_token_ids) or None
    kw: dict[str, Any] = dict(max_new_tokens=spec.max_new_tokens, pad_token_id=pad_id, eos_token_id=ends,
                              repetition_penalty=spec.repetition_penalty, disable_compile=True)
    if spec.greedy:
        kw.update(do_sample=False, temperature=None, top_k=None, top_p=None, min_p=None)
    else:
        kw.update(do_sample=True, temperature=spec.temperature, top_k=spec.top_k, top_p=spec.top_p,
                  min_p=spec.min_p or None)
    kw.update(extra)
    return GenerationConfig(**kw)


def sample_with_logprobs(model, **generate_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """``model.generate(**generate_kwargs)`` -> (new tokens (B, n), their log-probs (B, n) float32)
    under the distribution each was drawn from (module docstring). Rows that ended early are padded
    by ``generate``; their log-probs there mean nothing (callers cut both after the first end)."""
    cfg = generate_kwargs.pop("generation_config", None)
    if cfg is None:
        generate_kwargs.update(output_scores=True, return_dict_in_generate=True)
    else:  # on a copy: transformers refuses generation settings beside a generation_config
        cfg = copy.deepcopy(cfg)
        cfg.output_scores = cfg.return_dict_in_generate = True
        generate_kwargs["generation_config"] = cfg
    out = model.generate(**generate_kwargs)
    new = out.sequences[:, out.sequences.shape[1] - len(out.scores):]
    logps = torch.empty(new.shape, dtype=torch.float32, device=new.device)
    for k, scores in enumerate(out.scores):
        s = scores.float()
        logps[:, k] = s.gather(1, new[:, k:k + 1]).squeeze(1) - torch.logsumexp(s, -1)
    del out
    return new, logps


def cut_rows(tokens: torch.Tensor, logps: torch.Tensor | None, eos_ids) -> tuple[list[list[int]], list[list[float]] | None]:
    """Each row of ``tokens`` (B, T) up to and including its first end token (all of it when none),
    and ``logps`` cut to the same lengths (None stays None)."""
    eos = sorted(e for e in eos_ids if e is not None)
    is_eos = torch.isin(tokens, torch.tensor(eos, device=tokens.device, dtype=tokens.dtype))
    width = tokens.shape[1]
    ends = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, torch.full_like(is_eos[:, 0], width, dtype=torch.long))
    ends = ends.tolist()
    ids = [row[:e] for row, e in zip(tokens.tolist(), ends, strict=True)]
    if logps is None:
        return ids, None
    return ids, [row[:e] for row, e in zip(logps.tolist(), ends, strict=True)]


def batch_seed(seeds: list[int | None]) -> int | None:
    """The key of one batched call over requests keyed ``seeds``: derived from all of them in
    order (the same requests batched the same way draw the same tokens), None when any is None.
    One generator draws for the whole batch, so a request's tokens depend on its batch, not on its
    key alone (vLLM's per-request generators do not)."""
    if not seeds or any(s is None for s in seeds):
        return None
    return sampling_seed(*seeds)


def pad_id_of(tokenizer, spec: SamplingSpec) -> int | None:
    """The padding id: the tokenizer's, else its end token, else the smallest end token
    (``generate`` wants one even for a single unpadded row)."""
    if tokenizer is not None and tokenizer.pad_token_id is not None:
        return tokenizer.pad_token_id
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        return tokenizer.eos_token_id
    return min(spec.end_token_ids) if spec.end_token_ids else None


def hf_sample(model, prompts: list[list[int]], spec: SamplingSpec, pad_id: int | None,
              pad_to_multiple_of: int | None = None,
              generation_kwargs: dict[str, Any] | None = None) -> tuple[list[list[int]], list[list[float]]]:
    """One ``generate`` call of ``model`` (already unwrapped, in no-grad) on ``prompts`` under
    ``spec``: (completion ids, behaviour log-probs), each cut after its first end token."""
    device = next(model.parameters()).device
    ids, att = left_pad(prompts, pad_id, device, pad_to_multiple_of)
    cfg = generation_config(spec, pad_id, **(generation_kwargs or {}))
    new, logps = sample_with_logprobs(model, input_ids=ids, attention_mask=att, generation_config=cfg)
    return cut_rows(new, logps, spec.end_token_ids)


class HFEngine:
    """``Engine`` over an HF causal LM in this process: ``generate`` runs ``model.generate`` in
    eval mode and no-grad, seeded by the call's key (``keyed_rng``)."""

    def __init__(self, model, pad_id: int | None, pad_to_multiple_of: int | None = None,
                 generation_kwargs: dict[str, Any] | None = None,
                 context: Callable[[], Any] | None = None):
        self.model = model
        self.pad_id = pad_id
        self.pad_to_multiple_of = pad_to_multiple_of
        self.generation_kwargs = dict(generation_kwargs or {})
        """Engine settings beside the spec (transformers' ``cache_implementation``, ...)."""
        self.context = context or nullcontext
        """Entered around each call (a capture hook, autocast)."""
        self._queued: list[tuple[int, list[int], SamplingSpec, int | None]] = []
        """Submitted requests not generated yet: (id, prompt, spec, seed)."""
        self._next_id = 0

    @classmethod
    def of(cls, model, tokenizer, spec: SamplingSpec, **kw: Any) -> HFEngine:
        return cls(model, pad_id_of(tokenizer, spec), **kw)

    def stream(self, prompts: list[list[int]], spec: SamplingSpec, seed: int | None = None,
               top_logprobs: int = 0) -> Iterator[list[Drawn | None]]:
        """The call of ``generate``, step by step (``hf_stream``), in eval mode."""
        self.model.eval()
        return hf_stream(self.model, prompts, spec, self.pad_id, seed, top_logprobs)

    def submit(self, prompts: list[list[int]], spec: SamplingSpec, seeds: list[int | None] | None = None) -> list[int]:
        """Queue the prompts (nothing generates until ``poll``); their request ids."""
        ids = list(range(self._next_id, self._next_id + len(prompts)))
        self._next_id += len(prompts)
        seeds = list(seeds) if seeds is not None else [None] * len(prompts)
        if len(seeds) != len(prompts):
            raise ValueError(f"submit: {len(seeds)} seeds for {len(prompts)} prompts")
        self._queued += [(i, list(p), spec, s) for i, p, s in zip(ids, prompts, seeds, strict=True)]
        return ids

    def poll(self, timeout: float | None = 0.0) -> list[Finished]:
        """Every queued request, generated now: one batched ``generate`` per distinct spec, in
        submission order, keyed by ``batch_seed`` of its requests' keys (``timeout`` does not
        apply: the call returns when they are done)."""
        queued, self._queued = self._queued, []
        out: list[Finished] = []
        for spec in dict.fromkeys(q[2] for q in queued):
            batch = [q for q in queued if q[2] == spec]
            ids, logps = self.generate([q[1] for q in batch], spec, batch_seed([q[3] for q in batch]))
            out += [Finished(q[0], c, lp) for q, c, lp in zip(batch, ids, logps, strict=True)]
        return out

    def unfinished(self) -> int:
        return len(self._queued)

    def generate(self, prompts: list[list[int]], spec: SamplingSpec,
                 seed: int | None = None) -> tuple[list[list[int]], list[list[float]]]:
        m = self.model
        was_training = m.training
        m.eval()
        try:
            with keyed_rng(seed, next(m.parameters()).device), torch.no_grad(), self.context():
                return hf_sample(m, prompts, spec, self.pad_id, self.pad_to_multiple_of, self.generation_kwargs)
        finally:
            m.train(was_training)


STREAM_AHEAD = 4
"""Steps ``HFEngine.stream`` may draw ahead of its reader (a reader that stops reading pauses the
generation instead of letting it run to ``max_new_tokens``)."""
STREAM_PATIENCE_S = 600.0
"""A stream whose reader has not taken a step for this long is cancelled (a client gone)."""


@dataclass(frozen=True)
class Drawn:
    """One token a stream drew for one row."""

    token: int
    logprob: float
    """Under the processed distribution it was drawn from (as ``sample_with_logprobs``)."""
    top: tuple[tuple[int, float], ...] = ()
    """The most likely tokens of that distribution and their log-probs (``top_logprobs`` asked)."""


class _Tap:
    """A stopping criterion that hands each step to ``out`` (a bounded queue) and stops every row
    once ``cancel`` is set. ``generate`` calls it after each draw with the processed scores it keeps
    (``output_scores``)."""

    def __init__(self, out: queue.Queue, cancel: threading.Event, top: int):
        self.out, self.cancel, self.top = out, cancel, top

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        logp = scores[-1].float().log_softmax(-1)
        drawn = input_ids[:, -1]
        lp = logp.gather(1, drawn.unsqueeze(1)).squeeze(1).tolist()
        tops = [()] * len(lp)
        if self.top:
            v, i = logp.topk(self.top, -1)
            tops = [tuple(zip(ii, vv, strict=True)) for ii, vv in zip(i.tolist(), v.tolist(), strict=True)]
        step = [Drawn(int(t), float(x), top) for t, x, top in zip(drawn.tolist(), lp, tops, strict=True)]
        waited = 0.0
        while not self.cancel.is_set():
            try:
                self.out.put(step, timeout=0.5)
                break
            except queue.Full:
                waited += 0.5
                if waited >= STREAM_PATIENCE_S:
                    self.cancel.set()
        return torch.full((input_ids.shape[0],), self.cancel.is_set(), dtype=torch.bool, device=input_ids.device)


def hf_stream(model, prompts: list[list[int]], spec: SamplingSpec, pad_id: int | None, seed: int | None = None,
              top_logprobs: int = 0) -> Iterator[list[Drawn | None]]:
    """``hf_sample``'s call, step by step: one list per step, a ``Drawn`` per row (None for a row
    that already drew an end token), as ``generate`` draws them. Closing the iterator early stops
    the call."""
    out: queue.Queue = queue.Queue(maxsize=STREAM_AHEAD)
    cancel = threading.Event()
    done = object()

    def run():
        try:
            device = next(model.parameters()).device
            ids, att = left_pad(prompts, pad_id, device)
            cfg = generation_config(spec, pad_id)
            with keyed_rng(seed, device), torch.no_grad():
                sample_with_logprobs(model, input_ids=ids, attention_mask=att, generation_config=cfg,
                                     stopping_criteria=[_Tap(out, cancel, top_logprobs)])
            result = done
        except BaseException as e:  # handed to the reader, raised there
            result = e
        while not cancel.is_set():
            try:
                out.put(result, timeout=1.0)
                return
            except queue.Full:
                continue

    thread = threading.Thread(target=run, name="hf_stream", daemon=True)
    thread.start()
    ended = [False] * len(prompts)
    ends = set(spec.end_token_ids)
    try:
        while True:
            step = out.get()
            if step is done:
                return
            if isinstance(step, BaseException):
                raise step
            yield [None if e else d for d, e in zip(step, ended, strict=True)]
            ended = [e or d.token in ends for d, e in zip(step, ended, strict=True)]
            if all(ended):
                return
    finally:
        cancel.set()
        while thread.is_alive():  # unblock a put into a full queue, then let the call return
            try:
                out.get(timeout=0.1)
            except queue.Empty:
                pass
        thread.join()
