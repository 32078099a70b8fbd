"""Generation helpers: a plain HF ``generate`` callable, the sampler's own log-probs of what HF
``generate`` drew (``sample_with_logprobs``) and the fingerprint capture hook.

Behaviour log-probs: the log-prob of each sampled token under the distribution ``generate`` drew
it from, i.e. after every logits processor (repetition penalty, temperature, top-k, top-p): the
``scores`` that ``generate(output_scores=True, return_dict_in_generate=True)`` returns are exactly
the processed logits it softmaxes and samples from. Asking for them draws the same tokens (the
random stream is untouched; a stop check that undoes steps drops their scores too). The cost:
``generate`` holds one (B, V) float32 tensor per step until it returns, B x V x steps x 4 bytes,
dropped right after: 8 x 49,152 x 64 = 100 MB for SmolLM2 at the CPU recipes' sizes, 32 x 151,936
x 512 = 10 GB for a Qwen2.5 body at 512 new tokens (vLLM, the production path, holds none).

Fingerprint (BiPACE Sec. 3.4): f_theta(s_t) = the actor's hidden state at the final prompt token
at a fixed late layer. The paper runs a *dedicated* forward pass for it (11.3% of a step). We
capture it for free during generation instead: a forward hook on decoder block
``model.model.layers[L]`` records that block's output at the last position of the *prefill*
call (the first forward of ``generate``, which sees the whole left-padded prompt; later calls see
one new token each). With left padding the last position is every row's last prompt token.
When generation happens elsewhere (vLLM), ``truncated_forward_fingerprints`` runs only the first
L+1 blocks under no_grad (no LM head, no logits).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator

import torch

from agentrl.rollout.episodes import GenerateOutput


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder block list of an HF causal LM (also through PEFT / DDP wrappers)."""
    m = model
    for _ in range(6):
        if hasattr(m, "layers") and isinstance(m.layers, torch.nn.ModuleList):
            return m.layers
        for attr in ("module", "base_model", "model"):
            nxt = getattr(m, attr, None)
            if nxt is not None and nxt is not m:
                m = nxt
                break
        else:
            break
    raise ValueError(f"cannot find the decoder layers of {type(model).__name__} for fingerprint_layer")


class FingerprintCapture:
    """Context manager: while active, each generate call's prefill hidden state at layer L is kept.

    ``take()`` returns the rows captured by the last prefill (list of float lists) and resets.
    """

    def __init__(self, model, layer: int):
        layers = decoder_layers(model)
        n = len(layers)
        if not -n <= layer < n:
            raise ValueError(f"fingerprint_layer {layer} out of range for a model with {n} decoder layers")
        self.layer_module = layers[layer]
        self._handle = None
        self._captured: torch.Tensor | None = None
        self._armed = False
        self.elapsed = 0.0
        """Seconds spent inside the hook (the whole cost of capturing fingerprints)."""

    def _hook(self, module, args, output):
        if not self._armed:
            return
        t0 = time.perf_counter()
        hs = output[0] if isinstance(output, tuple) else output
        if hs.dim() == 3:
            self._captured = hs[:, -1, :].detach().float().cpu()
            self._armed = False  # later decode steps are not the prefill
        self.elapsed += time.perf_counter() - t0

    def arm(self) -> None:
        self._armed = True
        self._captured = None

    def take(self) -> list[list[float]] | None:
        c, self._captured = self._captured, None
        self._armed = False
        return None if c is None else c.tolist()

    def __enter__(self):
        self._handle = self.layer_module.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc):
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._armed = False


@contextlib.contextmanager
def maybe_capture(model, layer: int | None) -> Iterator[FingerprintCapture | None]:
    if layer is None:
        yield None
        return
    with FingerprintCapture(model, layer) as cap:
        yield cap


@torch.no_grad()
def truncated_forward_fingerprints(model, prompt_ids: list[list[int]], layer: int, pad_id: int) -> list[list[float]]:
    """Hidden state of each prompt's last token after block ``layer``, running only the blocks
    up to it (used when generation does not run this model, e.g. vLLM). Stops the forward with
    an exception raised from a hook, so blocks after L and the LM head never run."""

    class _Stop(Exception):
        pass

    cap = FingerprintCapture(model, layer)
    box: dict[str, torch.Tensor] = {}

    def hook(module, args, output):
        hs = output[0] if isinstance(output, tuple) else output
        box["h"] = hs[:, -1, :].detach().float().cpu()
        raise _Stop

    ids, att = left_pad(prompt_ids, pad_id, next(model.parameters()).device)
    h = cap.layer_module.register_forward_hook(hook)
    try:
        model(input_ids=ids, attention_mask=att, use_cache=False)
    except _Stop:
        pass
    finally:
        h.remove()
    return box["h"].tolist()


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of ``prompts`` left-padded to one width: every row's last
    prompt token sits in the last column (where generation and fingerprints read it)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        if p:
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            att[i, width - len(p):] = 1
    return ids.to(device), att.to(device)


def strip_after_eos(row: list[int], eos_ids: set[int]) -> list[int]:
    """Keep tokens up to and including the first EOS (as TRL's completion mask does)."""
    for i, t in enumerate(row):
        if t in eos_ids:
            return row[: i + 1]
    return row


def sample_with_logprobs(model, **generate_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """``model.generate(**generate_kwargs)`` -> (new tokens (B, n), their log-probs (B, n) float32)
    under the distribution each was drawn from (module docstring). Rows that ended early are padded
    by ``generate``; their log-probs there mean nothing (callers cut both after the first EOS)."""
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
    """Each row of ``tokens`` (B, T) up to and including its first EOS (all of it when none), and
    ``logps`` cut to the same lengths (None stays None)."""
    eos = sorted(e for e in eos_ids if e is not None)
    is_eos = torch.isin(tokens, torch.tensor(eos, device=tokens.device, dtype=tokens.dtype))
    width = tokens.shape[1]
    ends = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, torch.full_like(is_eos[:, 0], width, dtype=torch.long))
    ends = ends.tolist()
    ids = [row[:e] for row, e in zip(tokens.tolist(), ends, strict=True)]
    if logps is None:
        return ids, None
    return ids, [row[:e] for row, e in zip(logps.tolist(), ends, strict=True)]


def end_token_ids(model, tokenizer) -> set[int]:
    """The tokens that end a turn: the tokenizer's end token and every one the model's generation
    config names (instruct checkpoints list the chat template's end-of-turn token there)."""
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        eos_ids.add(tokenizer.eos_token_id)
    return eos_ids


def hf_generate_fn(model, tokenizer, max_new_tokens: int = 32, temperature: float = 1.0,
                   do_sample: bool = True, fingerprint_layer: int | None = None, top_p: float = 1.0,
                   top_k: int | None = None):
    """A ``generate`` callable for ``run_episodes`` using ``model.generate`` with left padding.

    Returns completion ids up to and including the first EOS. With ``fingerprint_layer`` set it
    returns a ``GenerateOutput`` carrying the prefill hidden state of each prompt. ``top_k``: None
    leaves the generation config's (its default is 50); 0 turns top-k off.
    """
    eos_ids = end_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_id is None and eos_ids:  # generate() wants one even for a single unpadded row
        pad_id = min(eos_ids)

    def generate(prompts: list[list[int]]):
        device = next(model.parameters()).device
        ids, att = left_pad(prompts, pad_id, device)
        kw = dict(max_new_tokens=max_new_tokens, do_sample=do_sample, pad_token_id=pad_id,
                  eos_token_id=sorted(eos_ids) or None)
        if do_sample:
            kw.update(temperature=temperature, top_p=top_p, **({} if top_k is None else {"top_k": top_k}))
        else:  # the generation config may ask for sampling; greedy takes no knobs
            kw.update(temperature=None, top_p=None, top_k=None)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad(), maybe_capture(model, fingerprint_layer) as cap:
                if cap is not None:
                    cap.arm()
                out = model.generate(input_ids=ids, attention_mask=att, **kw)
                fps = cap.take() if cap is not None else None
        finally:
            model.train(was_training)
        comps = [strip_after_eos(r, eos_ids) for r in out[:, ids.shape[1]:].tolist()]
        if fingerprint_layer is None:
            return comps
        return GenerateOutput(completion_ids=comps, fingerprints=fps)

    return generate
