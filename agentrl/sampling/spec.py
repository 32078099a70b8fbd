"""The sampling spec: how every generate call of a run draws its tokens, built once from the recipe.

One spec serves synchronous training, the asynchronous producer, evaluation (the training spec by
default, ``as_greedy()`` when asked), held-out sets, collaborations, the benchmarks and
``agentrl serve``; an engine (``Engine``: HF generate here, vLLM elsewhere) turns it into tokens.
One end-token rule (``end_token_ids``): the tokenizer's end token plus every id the model's
generation config names; a completion is cut after the first of them, inclusive.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingSpec:
    """The processing of the logits and the stopping rule of every generate call of a run."""

    temperature: float = 1.0
    """Logits are divided by it before the truncations below (> 0)."""
    top_k: int = 0
    """Keep the k largest logits (0: no top-k; a checkpoint's own top-k is never used)."""
    top_p: float = 1.0
    """Keep the smallest set of most likely tokens whose mass reaches p (1.0: no top-p)."""
    min_p: float = 0.0
    """Drop tokens whose probability is below min_p times the largest one (0.0: none)."""
    repetition_penalty: float = 1.0
    """HF's penalty of tokens already in the context (1.0: none). Not replayed on the learner's side
    of the rollout correction (``agentrl.sampling.processed``)."""
    max_new_tokens: int = 32
    """The most tokens one call generates per prompt."""
    end_token_ids: tuple[int, ...] = ()
    """The tokens that end a completion (sorted; the completion keeps the first one it draws)."""
    greedy: bool = False
    """Take the most likely token at every step (the truncations and temperature do not apply)."""

    @property
    def truncates(self) -> bool:
        """Whether sampling draws from a truncated support (top-k, top-p or min-p): the sampler's
        log-probs then differ from the full distribution's by the log of the kept mass."""
        return not self.greedy and (self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0)

    def as_greedy(self) -> SamplingSpec:
        """The same spec, greedy (evaluation's deterministic mode)."""
        return replace(self, greedy=True)

    @classmethod
    def from_config(cls, config: Any, model: Any, tokenizer: Any, **overrides: Any) -> SamplingSpec:
        """The spec of a recipe's settings (``GRPOConfig`` or a namespace of its keys:
        temperature, top_k, top_p, min_p, repetition_penalty, max_completion_length); a None there
        is the knob's off value; the recipe's ``generation_kwargs`` win over them, as they do in
        TRL's generation config. ``overrides`` replace single fields (an evaluation's own
        ``max_new_tokens``)."""
        kwargs = dict(getattr(config, "generation_kwargs", None) or {})

        def get(name: str, off: Any) -> Any:
            v = kwargs.get("max_new_tokens" if name == "max_completion_length" else name, getattr(config, name, None))
            return off if v is None else v

        spec = cls(temperature=float(get("temperature", 1.0)), top_k=int(get("top_k", 0)),
                   top_p=float(get("top_p", 1.0)), min_p=float(get("min_p", 0.0)),
                   repetition_penalty=float(get("repetition_penalty", 1.0)),
                   max_new_tokens=int(get("max_completion_length", 32)),
                   end_token_ids=tuple(sorted(end_token_ids(model, tokenizer))))
        return replace(spec, **overrides) if overrides else spec


def end_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The tokens that end a turn: the tokenizer's end token and every one the model's generation
    config names (instruct checkpoints list the chat template's end-of-turn token there)."""
    cfg = getattr(model, "generation_config", None)
    eos = cfg.eos_token_id if cfg is not None else None
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


@dataclass(frozen=True)
class Finished:
    """One submitted request's completion (``Engine.poll``)."""

    request_id: int
    completion_ids: list[int]
    """Cut after the first of the spec's end tokens (inclusive), as ``generate``'s."""
    logprobs: list[float]
    """Each token's log-prob under the processed distribution it was drawn from (NaN: unscored)."""
    version: int | None = None
    """The version of the weights that drew every token of it, where the engine knows
    (``VLLMEngine``: weights load only while no request is in flight); None: the caller's."""


@runtime_checkable
class Engine(Protocol):
    """What generates: an HF model (``agentrl.sampling.hf.HFEngine``) or vLLM.

    Two paths: ``generate`` blocks for a batch; ``submit`` + ``poll`` let requests finish on their
    own (continuous batching in vLLM; HF runs one batched generate over what is queued when
    polled), so a caller can step the env of a finished request while the others generate.
    """

    def generate(self, prompts: list[list[int]], spec: SamplingSpec,
                 seed: int | None) -> tuple[list[list[int]], list[list[float]]]:
        """(completion ids, log-probs) of each prompt: the ids cut after the first of
        ``spec.end_token_ids`` (inclusive; all ``max_new_tokens`` when none), and each sampled
        token's log-prob under the processed distribution it was drawn from (temperature, top-k,
        top-p, min-p applied and renormalised; NaN where the engine cannot score one). ``seed``:
        the call's sampling key (``agentrl.sampling.keys``): the same key and weights give the same
        tokens; None draws from the process's random state."""
        ...

    def submit(self, prompts: list[list[int]], spec: SamplingSpec, seeds: list[int | None] | None = None) -> list[int]:
        """Start one request per prompt without waiting for it; the requests' ids. ``seeds``: each
        request's sampling key (``agentrl.sampling.keys``; None: the process's random state)."""
        ...

    def poll(self, timeout: float | None = 0.0) -> list[Finished]:
        """The submitted requests that finished since the last poll, in no fixed order; while
        requests are in flight and none has finished, wait up to ``timeout`` seconds for one
        (None: until one finishes)."""
        ...

    def unfinished(self) -> int:
        """Requests submitted and not yet returned by ``poll``."""
        ...
