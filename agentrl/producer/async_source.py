"""The asynchronous rollout source: a producer process per rank plays ahead while the learner updates.

``rollout_mode: async`` with ``max_staleness: k``. Each training process starts one producer
process (``agentrl.producer.worker``) with its own copy of the policy. The producer plays iteration
b with the weights of policy version ``max(0, b - k)``: at k = 1 it plays iteration s + 1 on the
weights of step s while the learner trains step s, and every batch the learner takes is exactly k
versions old (fewer in the first k iterations). Since a given (weights, iteration) pair always
gives the same episodes (keyed sampling, ``agentrl.producer.generation``), a run is reproducible,
k = 0 is the synchronous run bit for bit, and a resume is exact.

The learner side:

* ``publish(version)`` after every optimizer step: the policy's weights (all of them, or only the
  trainable ones under LoRA; gathered once under ZeRO-3, by every rank together) as one flat
  tensor per dtype through shared memory to the producer; the last k + 1 versions are kept, so a
  producer that has to be restarted can replay the iterations it owes.
* ``next(rows, step)`` waits for iteration ``step``'s batch, checks its tasks against the rows
  TRL's loader gave (``TaskPlan``), drops groups older than k (``async/dropped_groups``; none at
  a fixed lag, the check guards the version tagging), and logs the staleness, the learner's wait
  and the producer's idle share. Evaluation rollouts play synchronously on the learner's weights.
* A producer that dies is restarted (``async_max_restarts`` times) and replays from the first
  iteration the learner has not received; one whose heartbeat is older than
  ``async_heartbeat_s`` is killed and restarted; an exception inside it, or restarts used up,
  stops the run on every rank with one line (``ProducerStop``), never a hang: the newest
  checkpoint resumes it.
* A checkpoint at step s holds the batches of iterations s .. s + k - 1 (played with weights older
  than the checkpoint's, so they cannot be replayed from it); a resumed producer starts at s + k
  with the checkpoint's weights. In ``producer_mode: continuous`` it also holds the episodes in
  flight (asked of the producer after those batches: ``agentrl.producer.continuous``) and every
  batch delivered before them; the resumed producer goes on with those episodes.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from agentrl.producer.batch import RolloutBatch
from agentrl.producer.plan import same_rows
from agentrl.producer.wire import unpack_episodes
from agentrl.producer.worker import ProducerSpec, producer_main
from agentrl.rollout.episode import span_versions
from agentrl.rollout.ranks import Ranks

STARTUP_S = 300.0
"""Seconds a producer may take from its spawn to its first heartbeat (imports, loading the model)."""

CHECKPOINT_FILE = "async_producer_rank{rank}.pkl"
"""A checkpoint's batches owed to the learner (this rank's)."""


class ProducerStop(RuntimeError):
    """The asynchronous producer cannot go on; the message is one line."""


@dataclass(frozen=True)
class AsyncSettings:
    """The recipe's asynchronous keys, read from the config (``of``): no default here, the recipe's
    keys declare them (``agentrl.recipe_keys``)."""

    max_staleness: int
    """``max_staleness``."""
    heartbeat_s: float
    """``async_heartbeat_s``."""
    max_restarts: int
    """``async_max_restarts``."""
    threads: int
    """``async_producer_threads``."""
    last_iteration: int | None
    """The last iteration the run trains on (``max_steps - 1``); None: no end known."""

    @classmethod
    def of(cls, config) -> AsyncSettings:
        """The settings of a run's config."""
        return cls(max_staleness=config.max_staleness, heartbeat_s=config.async_heartbeat_s,
                   max_restarts=config.async_max_restarts, threads=config.async_producer_threads,
                   last_iteration=config.max_steps - 1 if config.max_steps > 0 else None)


class AsyncSource:
    """The asynchronous source (module docstring).

    Args:
        spec: the producer's spec (its ``first_iteration`` is set when it starts).
        settings: the recipe's asynchronous keys.
        ranks: the training processes.
        weights: the policy's weights to ship, as ``flat_weights`` gives them (a collective under
            ZeRO-3: every rank calls it).
        tokenizer, context_settings: what arriving episodes' contexts are made with.
        evaluation: the source evaluation rollouts are played by (the learner's own, synchronous).
    """

    kind = "async"

    def __init__(self, spec: ProducerSpec, settings: AsyncSettings, ranks: Ranks,
                 weights: Callable[[], dict[str, Any]], tokenizer, context_settings: Callable,
                 evaluation):
        self.spec, self.settings, self.ranks = spec, settings, ranks
        self.weights, self.tokenizer, self.context_settings = weights, tokenizer, context_settings
        self.evaluation = evaluation
        self.versions: dict[int, dict[str, Any]] = {}
        self.received: dict[int, dict[str, Any]] = {}
        """Iteration -> the producer's payload, not yet taken by the learner."""
        self.next_iteration = 0
        """The first iteration the learner has not taken."""
        self.proc = None
        self.restarts = 0
        self._cmd = self._out = self._beat = None
        self.inflight: dict[str, Any] | None = None
        """Continuous mode: the episodes in flight, from the producer (a save) or a checkpoint (a resume)."""

    @property
    def k(self) -> int:
        return self.settings.max_staleness

    # ------------------------------------------------------------------ the learner's calls
    def publish(self, version: int) -> None:
        """Ship the weights of ``version`` (every rank calls it after every optimizer step)."""
        flat = self.weights()
        self.versions[version] = flat
        for v in [v for v in self.versions if v < version - self.k]:
            del self.versions[v]
        if self.proc is not None:
            self._cmd.put(("weights", version, flat))

    def next(self, rows: list[dict[str, Any]], step: int, training: bool = True) -> RolloutBatch:
        if not training:
            return self.evaluation.next(rows, step, training=False)
        t0 = time.perf_counter()
        self._ensure_started(step)
        payload, why = self._take(step)
        if self.ranks.max(int(why is not None)):  # one rank's producer failed: every rank stops
            raise ProducerStop(why or "async producer: another rank's producer stopped (see its log)")
        if not same_rows(self.spec.plan.rows(step, self.ranks.rank), rows):
            raise ProducerStop(f"async producer: iteration {step}'s tasks differ from the ones TRL's loader gave "
                               "(the task plan does not match this run's sampler)")
        episodes = unpack_episodes(payload["episodes"], self.tokenizer, self.context_settings())
        kept, dropped = staleness_filter(episodes, step, self.k)
        if not kept:
            raise ProducerStop(f"async producer: every group of iteration {step} is more than max_staleness "
                               f"{self.k} versions old")
        wait = time.perf_counter() - t0
        busy, idle = payload["busy_s"], payload["waited_s"]
        metrics = {**staleness_metrics(kept, step),
                   "async/dropped_groups": float(dropped), "time/learner_wait_s": wait,
                   "time/producer_busy_s": busy, "time/producer_idle_frac": idle / max(busy + idle, 1e-9),
                   "async/restarts": float(self.restarts)}
        if "carried_groups" in payload:  # producer_mode continuous: groups in flight past this iteration
            metrics["async/carried_groups"] = float(payload["carried_groups"])
        metrics.update(payload.get("metrics", {}))  # the play mode's own (continuous on vLLM: turn requests)
        times = payload["times"]
        # older weights, or a sampler of another precision: the learner corrects with the
        # episodes' behaviour log-probs; at staleness 0 the producer's weights are the learner's
        differs = payload["version"] < step or payload["sampler_differs"]
        return RolloutBatch(episodes=kept, version=payload["version"], times=times, wait_s=wait, metrics=metrics,
                            sampler_differs=differs)

    # ------------------------------------------------------------------ the producer process
    def _ensure_started(self, step: int) -> None:
        """At the learner's first iteration (fresh or resumed): the weights as they are are version
        ``step``; the producer starts after the batches a checkpoint brought."""
        if self.proc is not None:
            return
        if step not in self.versions:
            self.publish(step)
        self._start(step)

    def _start(self, first: int) -> None:
        """Start a producer at iteration ``first`` (after the batches already received), with every
        kept version it may need."""
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._cmd, self._out = ctx.Queue(), ctx.Queue()
        self._beat = ctx.Value("d", 0.0)  # 0: starting (imports, the model), until its first beat
        self._started_at = time.time()
        first = max([first] + [b + 1 for b in self.received])
        # a checkpoint's episodes in flight go to the first producer only (a restarted one replays)
        inflight, self.inflight = self.inflight, None
        spec = replace(self.spec, first_iteration=first, inflight=inflight)
        self.proc = ctx.Process(target=producer_main, args=(spec, self._cmd, self._out, self._beat), daemon=True,
                                name=f"agentrl-producer-r{self.ranks.rank}")
        with _main_not_rerun():
            self.proc.start()
        for v in sorted(self.versions):
            if v >= max(0, first - self.k):
                self._cmd.put(("weights", v, self.versions[v]))

    def _take(self, step: int) -> tuple[dict[str, Any] | None, str | None]:
        """Iteration ``step``'s payload (the ones before it are dropped: the learner is past them),
        or (None, why) when the producer cannot deliver it."""
        why = self._receive(step)
        if why is not None:
            return None, why
        self.next_iteration = step + 1
        for b in [b for b in self.received if b < step]:
            del self.received[b]
        return self.received.pop(step), None

    def _receive(self, b: int) -> str | None:
        """Take the producer's messages until iteration ``b``'s batch is in; why not, if it cannot be."""
        while b not in self.received:
            try:
                msg = self._out.get(timeout=1.0)
            except queue.Empty:
                why = self._check_alive()
                if why is not None:
                    return why
                continue
            if msg[0] == "batch":
                self.received[msg[1]] = msg[2]
            elif msg[0] == "error":
                last = [line for line in msg[1].strip().splitlines() if line.strip()][-1]
                self._kill()
                return f"async producer (rank {self.ranks.rank}) failed: {last}"
        return None

    def _check_alive(self) -> str | None:
        """None while the producer lives and beats; restarts it when it died or hung, or says why not."""
        dead = not self.proc.is_alive()
        beat = self._beat.value
        hung = (time.time() - self._started_at > STARTUP_S) if beat == 0.0 else (
            time.time() - beat > self.settings.heartbeat_s)
        if not (dead or hung):
            return None
        what = (f"died (exit code {self.proc.exitcode})" if dead
                else f"sent no heartbeat for {self.settings.heartbeat_s:g} s")
        self._kill()
        if self.restarts >= self.settings.max_restarts:
            return (f"async producer (rank {self.ranks.rank}) {what}, after {self.restarts} restarts "
                    "(async_max_restarts); the newest checkpoint resumes the run")
        self.restarts += 1
        print(f"agentrl train: warning: async producer (rank {self.ranks.rank}) {what}; restarting it "
              f"({self.restarts} of {self.settings.max_restarts})", flush=True)
        self._start(self.next_iteration)
        return None

    def _kill(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(timeout=10)
            self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self._cmd.put(("stop",))
            self.proc.join(timeout=10)
        self._kill()
        self.evaluation.close()

    # ------------------------------------------------------------------ checkpoints
    def checkpointed(self, step: int) -> list[OwedBatches]:
        """This rank's checkpoint part at the learner's optimizer step ``step``
        (``agentrl.checkpoints.Checkpointed``: the trainer writes and reads it with its other parts)."""
        return [OwedBatches(self, step)]

    def owed(self, step: int) -> dict[str, Any]:
        """What a checkpoint at ``step`` owes the learner: the batches of iterations ``step`` ..
        ``step + k - 1`` (waited for) and, continuous, the episodes in flight."""
        owed = [b for b in range(step, step + self.k)
                if self.settings.last_iteration is None or b <= self.settings.last_iteration]
        if owed and self.proc is None:
            self._ensure_started(step)
        for b in owed:
            why = self._receive(b)
            if why is not None:
                raise ProducerStop(why)
        data = {"step": step, "max_staleness": self.k, "batches": {b: self.received[b] for b in owed}}
        if self.spec.config.get("producer_mode") == "continuous":
            inflight = self._inflight() if self.proc is not None else self.inflight
            if inflight is not None:  # every batch sent before the episodes in flight is owed too
                data["inflight"] = inflight
                data["batches"] = {b: p for b, p in self.received.items() if step <= b < inflight["next_batch"]}
        return data

    def _inflight(self) -> dict[str, Any]:
        """The producer's episodes in flight, asked for now (the batches it sent before them are
        then in ``received``); asked again of a producer restarted meanwhile."""
        self.inflight, proc = None, None
        while self.inflight is None:
            if self.proc is not proc:
                proc = self.proc
                self._cmd.put(("snapshot",))
            try:
                msg = self._out.get(timeout=1.0)
            except queue.Empty:
                why = self._check_alive()
                if why is not None:
                    raise ProducerStop(why) from None
                continue
            if msg[0] == "batch":
                self.received[msg[1]] = msg[2]
            elif msg[0] == "inflight":
                self.inflight = msg[1]
            elif msg[0] == "error":
                self._kill()
                raise ProducerStop(f"async producer (rank {self.ranks.rank}) failed: {msg[1].strip().splitlines()[-1]}")
        inflight, self.inflight = self.inflight, None
        return inflight

    def restore(self, data: dict[str, Any]) -> None:
        """Back to what a checkpoint owed the learner (``owed``)."""
        self.received = dict(data["batches"])
        self.next_iteration = int(data["step"])
        self.inflight = data.get("inflight")


class OwedBatches:
    """The asynchronous source's checkpoint part (``async_producer_rank{r}.pkl``; a checkpoint of a
    synchronous run has none, and a resumed run starts its producer afresh)."""

    file = CHECKPOINT_FILE

    def __init__(self, source: AsyncSource, step: int):
        self.source, self.step = source, step

    def state_dict(self) -> dict[str, Any]:
        return self.source.owed(self.step)

    def load_state_dict(self, data: dict[str, Any]) -> None:
        self.source.restore(data)


@contextlib.contextmanager
def _main_not_rerun():
    """A spawned child runs the parent's main script again unless it has no file to run: a user's
    training script without an ``if __name__ == "__main__":`` guard would train again inside the
    producer. The producer needs nothing from it (its entry point is a module function)."""
    main = sys.modules["__main__"]
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if hasattr(main, k)}
    for k in saved:
        setattr(main, k, None) if k == "__spec__" else delattr(main, k)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


def staleness_filter(episodes, step: int, k: int) -> tuple[list, int]:
    """The episodes of the groups whose oldest span (generated turn) is at most ``k`` policy versions
    older than ``step``, and the number of groups dropped. An episode that spans versions (a partial
    rollout) is as old as its oldest span: ``max_staleness`` bounds every token the learner trains on."""
    oldest: dict[str, int] = {}
    for ep in episodes:
        v = min(span_versions(ep), default=ep.policy_version)
        oldest[ep.group_id] = min(oldest.get(ep.group_id, v), v)
    stale = {g for g, v in oldest.items() if step - v > k}
    return [ep for ep in episodes if ep.group_id not in stale], len(stale)


SPAN_BINS = 4
"""``async/span_staleness_frac/{d}`` for d = 0 .. SPAN_BINS - 1, and ``.../{SPAN_BINS}+`` for the rest."""


def staleness_metrics(episodes, step: int) -> dict[str, float]:
    """Staleness counted per span (each generated turn: the learner's ``step`` minus the version that
    generated it): mean and max over spans, the share of spans at each staleness, the mean of each
    episode's oldest span, and the share of episodes whose spans come from more than one version."""
    spans = [step - v for ep in episodes for v in span_versions(ep)]
    if not spans:  # episodes that ended before their first turn: their own version
        spans = [step - ep.policy_version for ep in episodes]
    out = {"async/staleness_mean": sum(spans) / len(spans), "async/staleness_max": float(max(spans))}
    for d in range(SPAN_BINS):
        out[f"async/span_staleness_frac/{d}"] = sum(x == d for x in spans) / len(spans)
    out[f"async/span_staleness_frac/{SPAN_BINS}+"] = sum(x >= SPAN_BINS for x in spans) / len(spans)
    oldest = [step - min(span_versions(ep), default=ep.policy_version) for ep in episodes]
    out["async/episode_staleness_mean"] = sum(oldest) / len(oldest)
    out["async/mixed_version_episodes_frac"] = sum(len(set(span_versions(ep))) > 1 for ep in episodes) / len(episodes)
    return out
