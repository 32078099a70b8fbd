"""Requests batched onto one engine for ``agentrl serve`` (``agentrl.serve_openai``).

``BatchedEngine`` puts the server's concurrent requests onto an engine that batches: with
``submit`` / ``poll`` (agentrl's vLLM engine) each request joins those in flight, and a streamed
one's tokens are read every ``POLL_S``; on an engine with a blocking ``generate`` only, requests
that arrive while a call runs go into the next call. ``SharedLock`` lets the HF engine run
unseeded requests side by side and a seeded one alone.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # agentrl.sampling imports torch: `agentrl serve --help` must not wait for it
    from agentrl.sampling import SamplingSpec

class SharedLock:
    """Held by any number of holders at once, or by one exclusive holder."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextmanager
    def hold(self, exclusive: bool) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not (exclusive and self._shared))
            if exclusive:
                self._exclusive = True
            else:
                self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                if exclusive:
                    self._exclusive = False
                else:
                    self._shared -= 1
                self._cond.notify_all()


class _Job:
    """One request's prompts in ``BatchedEngine``: its rows' tokens reach ``stream`` through
    ``updates`` as (row, ids so far, their log-probs, finished, each position's top tokens or None),
    or the exception the engine raised."""

    def __init__(self, prompts: list[list[int]], spec: SamplingSpec, seed: int | None, top: int = 0):
        self.prompts, self.spec, self.seed, self.top = prompts, spec, seed, top
        self.updates: queue.Queue = queue.Queue()

    def key(self) -> tuple:
        """Jobs with equal keys share a call: the same spec and, when sampled with a seed, only
        themselves (the engine keys a call's rows from one seed)."""
        return (self.spec, None if self.seed is None or self.spec.greedy else ("seed", id(self)))


class BatchedEngine:
    """``ChatModel``'s engine over agentrl's ``VLLMEngine`` (or any engine of the ``Engine``
    protocol). One thread talks to it. With the engine's ``submit`` / ``poll`` (requests that
    finish on their own: vLLM's continuous batching) each request is submitted as it arrives and
    joins those in flight, and where the engine reports requests' tokens while they generate
    (``progress``: the vLLM engine's) ``stream`` hands them over as they are drawn; without them
    (``generate`` only) the thread takes every request waiting when it is free, so requests that
    arrive while a call runs are batched into the next (one call per ``_Job.key``), and a reply is
    handed over once its call returns."""

    own_random_stream = True
    """A seed keys the engine's own generators, not the process's: seeded requests need not run alone."""
    POLL_S = 0.05
    """How long a poll waits for a finished request before the tokens so far are read and new
    requests submitted (while tokens are drawn, a streamed reply's chunks are about this far apart)."""

    def __init__(self, engine: Any, continuous: bool | None = None):
        self.engine = engine
        self.continuous = hasattr(engine, "submit") and hasattr(engine, "poll") if continuous is None else continuous
        """Whether requests go through ``submit`` / ``poll`` (default: when the engine has them)."""
        self.live = self.continuous and hasattr(engine, "progress")
        """Whether tokens are handed over while their request generates (and ``top_logprobs``
        served: the engine's ``progress`` reports the likeliest tokens)."""
        self.batches: list[int] = []
        """How many requests the engine held together: per ``generate`` call, or per round of
        submissions, those then in flight (how concurrent requests were batched)."""
        self.busy = False
        """Whether the engine is generating."""
        self.aborted = 0
        """Requests the engine stopped because their reader had gone (a stop string written, a
        client gone) while it still generated them."""
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._gone: queue.Queue[_Job] = queue.Queue()
        self._thread = threading.Thread(target=self._requests if self.continuous else self._calls,
                                        name="serve_batches", daemon=True)
        self._thread.start()

    @property
    def serves_top_logprobs(self) -> bool:
        return self.live

    def _calls(self) -> None:
        while (job := self._jobs.get()) is not None:
            waiting = [job]
            while True:
                try:
                    waiting.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            groups: dict[tuple, list[_Job]] = {}
            for j in waiting:
                if j is not None:
                    groups.setdefault(j.key(), []).append(j)
            for group in groups.values():
                self._call(group)
            if None in waiting:
                return

    def _call(self, group: list[_Job]) -> None:
        self.busy = True
        try:
            ids, logps = self.engine.generate([p for j in group for p in j.prompts], group[0].spec, group[0].seed)
        except BaseException as e:  # each waiting request raises it
            for j in group:
                j.updates.put(e)
            return
        finally:
            self.busy = False
            self.batches.append(len(group))
        at = 0
        for j in group:
            for row in range(len(j.prompts)):
                j.updates.put((row, ids[at], logps[at], True, None))
                at += 1

    def _requests(self) -> None:
        from agentrl.sampling import sampling_seed

        rows: dict[int, tuple[_Job, int]] = {}  # the engine's request id -> (its job, its row)
        closing = False
        while rows or not closing:
            taken: list[_Job | None] = []
            try:  # wait for a request only while none is in flight
                taken.append(self._jobs.get(block=not rows))
                while True:
                    taken.append(self._jobs.get_nowait())
            except queue.Empty:
                pass
            for job in taken:
                if job is None:
                    closing = True
                    continue
                # the same keys as VLLMEngine.generate's: row i of a request seeded s is keyed (s, i)
                seeds = None if job.seed is None else [sampling_seed(job.seed, i) for i in range(len(job.prompts))]
                try:
                    ids = (self.engine.submit(job.prompts, job.spec, seeds, streamed=True, top=job.top) if self.live
                           else self.engine.submit(job.prompts, job.spec, seeds))
                except BaseException as e:
                    job.updates.put(e)
                    continue
                rows.update((r, (job, i)) for i, r in enumerate(ids))
            if any(j is not None for j in taken):
                self.batches.append(len({id(j) for j, _ in rows.values()}))
            self._drop_gone(rows)
            self.busy = bool(rows)
            if rows:
                self._collect(rows)
                self.busy = bool(rows)

    def _drop_gone(self, rows: dict[int, tuple[_Job, int]]) -> None:
        """Stop generating the requests whose reader has gone (the engine's ``abort`` where it has
        one; else their results are dropped when they come)."""
        while True:
            try:
                job = self._gone.get_nowait()
            except queue.Empty:
                return
            ids = [r for r, (j, _) in rows.items() if j is job]
            for r in ids:
                del rows[r]
            if ids and hasattr(self.engine, "abort"):
                self.aborted += self.engine.abort(ids)

    def _collect(self, rows: dict[int, tuple[_Job, int]]) -> None:
        """The tokens drawn since the last look (``live``) and the finished requests' into their
        jobs."""
        try:
            finished = self.engine.poll(timeout=self.POLL_S)
            drawn = self.engine.progress() if self.live else {}
        except BaseException as e:  # every request in flight raises it
            for job in {id(j): j for j, _ in rows.values()}.values():
                job.updates.put(e)
            rows.clear()
            return
        # the tokens so far first: a request's last report (its last tokens' top tokens) can come
        # in the same round as its completion
        for r, (ids, logps, tops) in drawn.items():
            if r in rows:
                job, i = rows[r]
                job.updates.put((i, ids, logps, False, tops))
        for f in finished:
            if f.request_id in rows:  # else its reader has gone
                job, i = rows.pop(f.request_id)
                job.updates.put((i, f.completion_ids, f.logprobs, True, None))

    def stream(self, prompts: list[list[int]], spec: SamplingSpec, seed: int | None = None,
               top_logprobs: int = 0) -> Iterator[list[Any]]:
        """The rows' tokens step by step (``HFEngine.stream``'s shape: a ``Drawn`` per row, None
        for a row that already ended), each step as soon as every row still generating has drawn
        its token (``live``), else once the reply is done."""
        from agentrl.sampling import Drawn

        job = _Job(prompts, spec, seed, top_logprobs)
        self._jobs.put(job)
        n = len(prompts)
        ids: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        tops: list[list] = [[] for _ in range(n)]
        ended = [False] * n

        def drawn(r: int, k: int) -> Any:
            top = tuple(tuple(x) for x in tops[r][k]) if k < len(tops[r]) else ()
            return Drawn(ids[r][k], logps[r][k], top)

        k = 0
        try:
            while True:
                while k < max(map(len, ids)) and all(k < len(ids[r]) or ended[r] for r in range(n)):
                    yield [drawn(r, k) if k < len(ids[r]) else None for r in range(n)]
                    k += 1
                if all(ended):
                    return
                update = job.updates.get()
                if isinstance(update, BaseException):
                    raise update
                r, ids[r], logps[r], ended[r], top = update
                tops[r] = tops[r] if top is None else top
        finally:
            if not all(ended):  # closed early: a stop string was written, or the client has gone
                self._gone.put(job)

    def close(self) -> None:
        """Stop the calling thread (after the calls waiting) and the engine."""
        self._jobs.put(None)
        self._thread.join()
        self.engine.close()


def sizing_refusal(args) -> str | None:
    """Why ``agentrl serve``'s sizing options (``--max-model-len``, ``--kv-cache-gib``,
    ``--threads``) cannot be served, read from the command line and the model's config.json
    alone; None when they can."""
    for flag, value in (("--max-model-len", args.max_model_len), ("--kv-cache-gib", args.kv_cache_gib),
                        ("--threads", args.threads)):
        if value is not None and value < 1:
            return f"{flag} must be >= 1, got {value}"
    if args.kv_cache_gib is not None and args.engine != "vllm":
        return "--kv-cache-gib sizes the vllm engine's KV cache; the hf engine has none (drop it or add --engine vllm)"
    context = json.loads((Path(args.checkpoint) / "config.json").read_text()).get("max_position_embeddings")
    if args.max_model_len is not None and context and args.max_model_len > context:
        return f"--max-model-len must be in 1..{context} (the model's context), got {args.max_model_len}"
    return None
