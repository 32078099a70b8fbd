"""vLLM's engine in a process of its own, run by the vLLM venv's Python (``make vllm-venv``).

Started by ``agentrl.sampling.vllm_engine.VLLMEngine`` as a script, not as a module: it imports
only the standard library, torch, safetensors and vLLM (the vLLM venv has no agentrl, and its
transformers is not ours), and only plain Python values cross the socket, so the two sides may run
different library versions.

The protocol, over one ``multiprocessing.connection`` on a Unix socket (pickled messages,
authenticated with the key in ``AGENTRL_VLLM_AUTHKEY``): the server sends ``("ready", info)``
once the model is loaded (or ``("error", text)``), then answers each request with
``("ok", value)`` or ``("error", text)``:

``("generate", prompts, params, seeds)``  completions of token-id prompts: (ids, log-probs), each
    sampled token's log-prob under the processed distribution (``logprobs_mode='processed_logprobs'``:
    after temperature, min-p, top-k, top-p); ``params`` are ``vllm.SamplingParams`` keywords,
    ``seeds`` one per prompt (or None).
``("submit", ids, prompts, params, seeds[, streamed, top])``  requests added to the engine
    without waiting (ids: the client's integers); the engine steps them between messages, so they
    generate while the client does other work, each finishing on its own (continuous batching).
    Answers None. ``streamed``: their tokens so far are kept after each step, for ``progress``,
    with each position's ``top`` most likely tokens when ``top`` > 0.
``("progress",)``  the streamed requests that drew tokens since the last progress: id -> (ids so
    far, their log-probs, each position's top tokens as (id, log-prob) pairs or None, finished);
    a finished request's last report has all its tokens.
``("poll", timeout)``  the submitted requests finished since the last poll: (id, ids, log-probs,
    version at submission) each; while some are in flight and none has finished, the answer waits
    for one, up to ``timeout`` seconds (None: no limit).
``("abort", ids)``  the submitted requests ``ids`` dropped, in flight or finished and not polled
    (None: all of them); the number that were in flight.
``("load", path, version)``  the weights in the safetensors file ``path`` (HF parameter names, the
    whole model) loaded in place through the model's own ``load_weights``; the version is recorded.
``("version",)``  the version of the weights loaded last (None: the checkpoint's own).
``("stop",)``  the server exits (without an answer).

A blocking ``generate`` and a ``load`` are refused while submitted requests are in flight: the
one would step them and drop their outputs, the other would change the weights under tokens
already drawn (a request's tokens are then all of one version, the one it records).

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the model is then
reachable for ``load_weights``, and nothing is spawned.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", required=True, help="the Unix socket to listen on")
    p.add_argument("--model", required=True, help="an HF model folder")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-model-len", type=int, default=None, help="default: the model's own context length")
    p.add_argument("--kv-cache-gib", type=int, default=1, help="CPU memory for the KV cache (VLLM_CPU_KVCACHE_SPACE)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _engine(args: argparse.Namespace):
    """The model loaded into vLLM's offline engine, in this process."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.kv_cache_gib))
    from vllm import LLM

    # token ids in, token ids out: no tokenizer (the checkpoint's may need a newer transformers);
    # no prefix cache (a cached prefix would outlive a weight update); no chunked prefill: a prompt
    # split across engine steps makes vLLM rewind the request's seeded generator, which a CPU
    # generator refuses ("CPU Generator does not use offset"), so every prompt is prefilled whole
    # (the step's token budget is then at least the context length)
    return LLM(model=args.model, dtype=args.dtype, max_model_len=args.max_model_len, seed=args.seed,
               enforce_eager=True, enable_prefix_caching=False, enable_chunked_prefill=False,
               skip_tokenizer_init=True, logprobs_mode="processed_logprobs")


def _tops(output, k: int) -> list[list[tuple[int, float]]]:
    """Each position's ``k`` most likely tokens and their (processed) log-probs, likeliest first."""
    return [sorted(((t, float(lp.logprob)) for t, lp in (d or {}).items()), key=lambda x: -x[1])[:k]
            for d in output.outputs[0].logprobs or []]


def _completion(output) -> tuple[list[int], list[float]]:
    """A finished (or, reported cumulatively, unfinished) ``RequestOutput``'s token ids and their
    log-probs."""
    c = output.outputs[0]
    # logprobs=0: each position's dict holds the sampled token (and nothing else); logprobs=k:
    # the k most likely too
    logps = [float(d[t].logprob) if d and t in d else float("nan")
             for t, d in zip(c.token_ids, c.logprobs or [None] * len(c.token_ids), strict=True)]
    return list(c.token_ids), logps


class Server:
    """The requests' handlers over one loaded engine (module docstring)."""

    def __init__(self, llm):
        self.llm = llm
        self.version: int | None = None
        self.running: dict[str, int | None] = {}
        """Submitted requests in flight: vLLM's request id -> the version loaded at submission."""
        self.done: list[tuple[int, list[int], list[float], int | None]] = []
        """Finished requests not yet polled."""
        self.streamed: dict[str, int] = {}
        """Submitted requests in flight whose tokens so far are reported (``progress``) -> how many
        top tokens per position."""
        self.progress: dict[int, tuple] = {}
        """Streamed requests' tokens so far, since the last ``progress`` request."""

    def _idle(self, what: str) -> None:
        if self.running:
            raise ValueError(f"{what} while {len(self.running)} submitted requests are in flight (poll them first)")

    def generate(self, prompts: list[list[int]], params: dict, seeds: list[int] | None):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._idle("a blocking generate")
        sps = [SamplingParams(**params, seed=None if seeds is None else seeds[i]) for i in range(len(prompts))]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sps, use_tqdm=False)
        done = [_completion(o) for o in outs]
        return [d[0] for d in done], [d[1] for d in done]

    # ------------------------------------------------------------------ continuous batching
    def submit(self, ids: list[int], prompts: list[list[int]], params: dict, seeds: list[int | None] | None,
               streamed: bool = False, top: int = 0) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        if top:
            params = {**params, "logprobs": int(top)}
        for j, (i, p) in enumerate(zip(ids, prompts, strict=True)):
            rid = f"agentrl-{int(i)}"
            if rid in self.running:
                raise ValueError(f"request {i} is already in flight")
            # FINAL_ONLY: step() reports a request once, when it has finished; CUMULATIVE (streamed):
            # after every step, with all its tokens so far
            kind = RequestOutputKind.CUMULATIVE if streamed else RequestOutputKind.FINAL_ONLY
            sp = SamplingParams(**params, seed=None if seeds is None else seeds[j], output_kind=kind)
            self.llm.llm_engine.add_request(rid, TokensPrompt(prompt_token_ids=list(p)), sp)
            self.running[rid] = self.version
            if streamed:
                self.streamed[rid] = int(top)

    def step(self) -> None:
        """One engine step over the requests in flight; the finished ones move to ``done``."""
        for o in self.llm.llm_engine.step():
            if o.request_id not in self.running:
                continue
            i = int(o.request_id.rsplit("-", 1)[1])
            top = self.streamed.get(o.request_id)
            if top is not None:
                self.progress[i] = (*_completion(o), _tops(o, top) if top else None, o.finished)
            if o.finished:
                ids, logps = _completion(o)
                self.done.append((i, ids, logps, self.running.pop(o.request_id)))
                self.streamed.pop(o.request_id, None)

    def take_progress(self) -> dict[int, tuple]:
        progress, self.progress = self.progress, {}
        return progress

    def take(self) -> list[tuple[int, list[int], list[float], int | None]]:
        done, self.done = self.done, []
        return done

    def abort(self, ids: list[int] | None) -> int:
        rids = list(self.running) if ids is None else [f"agentrl-{int(i)}" for i in ids if f"agentrl-{int(i)}" in self.running]
        if rids:
            self.llm.llm_engine.abort_request(rids)
        for r in rids:
            del self.running[r]
            self.streamed.pop(r, None)
            self.progress.pop(int(r.rsplit("-", 1)[1]), None)
        # finished and not polled: dropped too (the client has forgotten them)
        self.done = [d for d in self.done if ids is not None and d[0] not in set(map(int, ids))]
        return len(rids)

    def load(self, path: str, version: int) -> int:
        from safetensors.torch import load_file

        self._idle("a weight load")

        weights = load_file(path)
        # the worker's in-place reload, not the model's bare load_weights: on the CPU the linear
        # layers' weights are repacked for its kernels after loading (the parameters the
        # checkpoint names are then empty); the reload restores them, loads, and repacks again
        tied = self.llm.apply_model(_tied_groups)[0]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights.items())})
        # a tied output layer (tie_word_embeddings) is not in the checkpoint, so the reload leaves
        # it alone: on the CPU its matmul reads a packed copy of the embedding made at load time
        # (the old weights); every tie is made again and the packed copy rebuilt
        self.llm.apply_model(lambda model: _retie(model, tied, set(weights)))
        self.version = int(version)
        return len(weights)

    def handle(self, msg: tuple):
        kind = msg[0]
        if kind == "generate":
            return self.generate(*msg[1:])
        if kind == "submit":
            return self.submit(*msg[1:])
        if kind == "abort":
            return self.abort(*msg[1:])
        if kind == "progress":
            return self.take_progress()
        if kind == "load":
            return self.load(*msg[1:])
        if kind == "version":
            return self.version
        raise ValueError(f"unknown request {kind!r}")


def _tied_groups(model) -> list[list[str]]:
    """The names of the parameters that share one storage (a tied embedding and output layer)."""
    by_ptr: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.numel():
            by_ptr.setdefault(p.data_ptr(), []).append(name)
    return [names for names in by_ptr.values() if len(names) > 1]


def _retie(model, groups: list[list[str]], loaded: set[str]) -> None:
    """Each group's parameters made one again, the loaded one's (the first, if none was), and
    the other modules' kernel-format copies rebuilt from it (``process_weights_after_loading``)."""
    for names in groups:
        source = next((n for n in names if n in loaded), names[0])
        param = model.get_parameter(source)
        for name in names:
            if name != source:
                owner, _, attr = name.rpartition(".")
                module = model.get_submodule(owner)
                setattr(module, attr, param)
                method = getattr(module, "quant_method", None)
                if method is not None:
                    method.process_weights_after_loading(module)


def main(argv: list[str] | None = None) -> int:
    from multiprocessing.connection import Listener

    args = _parse(sys.argv[1:] if argv is None else argv)
    key = os.environ.pop("AGENTRL_VLLM_AUTHKEY", "").encode()
    with Listener(args.socket, family="AF_UNIX", authkey=key) as listener, listener.accept() as conn:
        try:
            server = Server(_engine(args))
        except Exception:
            conn.send(("error", traceback.format_exc(limit=6)))
            return 1
        import vllm

        conn.send(("ready", {"vllm": vllm.__version__, "pid": os.getpid()}))
        return _serve(server, conn)


def _serve(server: Server, conn) -> int:
    """Answer requests; between them, step the submitted requests in flight (module docstring).
    A poll that must wait is answered after the step that finishes a request (or at its deadline)."""
    import time

    poll_until: float | None = None  # a poll not answered yet: its deadline
    failed: str | None = None  # a step that raised: the answer to the next request (or waiting poll)
    while True:
        if poll_until is not None and (failed or server.done or not server.running or time.monotonic() >= poll_until):
            conn.send(("error", failed) if failed else ("ok", server.take()))
            poll_until = failed = None
            continue
        if server.running and not failed and (poll_until is not None or not conn.poll(0)):
            try:
                server.step()
            except Exception:
                failed = traceback.format_exc(limit=6)
            continue
        try:
            msg = conn.recv()
        except EOFError:  # the client is gone
            return 0
        if msg[0] == "stop":  # no answer: the client has closed its end
            return 0
        if failed:
            conn.send(("error", failed))
            failed = None
            continue
        if msg[0] == "poll":
            timeout = msg[1]
            poll_until = time.monotonic() + (float("inf") if timeout is None else max(0.0, float(timeout)))
            continue
        try:
            conn.send(("ok", server.handle(msg)))
        except Exception:
            conn.send(("error", traceback.format_exc(limit=6)))


if __name__ == "__main__":
    sys.exit(main())
