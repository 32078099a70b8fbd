"""``producer_mode: continuous``: the producer's episodes run on their own across iterations.

The lock-step mode (``Producer.run``) plays iteration b from its first reset to its last episode's
end on version ``max(0, b - k)``, then starts b + 1. Here one ``ContinuousPlay``
(``agentrl.rollout.continuous``) holds the episodes of iterations b .. b + ``producer_overprovision``
at once, in an env batch of that many iterations' slots:

* iteration b's tasks (the ``TaskPlan``'s rows, grouped as the lock-step source groups them) are
  submitted once a version of at least ``max(0, b - k)`` is loaded, up to ``producer_overprovision``
  iterations ahead of the one being delivered;
* before every tick the newest version the learner has shipped is loaded: episodes in flight go
  on with it (a partial rollout), each turn tagged with the version that generated it (on vLLM's
  engine each turn is a request of its own, ``PolicyGeneration.submit``: the engine takes the new
  version between requests, once those in flight have finished); the oldest
  turn of an iteration is never older than ``b - k``, so the learner's ``max_staleness`` check holds
  per span;
* iteration b's batch leaves as soon as all its groups are complete (groups of later iterations
  may complete first: they wait, in flight or done, never dropped).

The learner side is unchanged (``AsyncSource``): batches arrive per iteration, with the same task
rows; ``version`` of a batch is its oldest span's. Only algorithms whose ``roll_out`` is plain play
run here (``async_refusal``).

A checkpoint holds the episodes in flight too: at a save the learner asks for them (``("snapshot",)``)
and the producer answers between two ticks (or while it waits for weights) with ``("inflight",
state)``: the next iteration it will deliver, the next it will submit, the group ids of the
iterations submitted, and ``ContinuousPlay.checkpoint()`` (every episode's records so far, with
tokens, behaviour log-probs and per-span versions, and its env's snapshot or resume kind). The
learner saves it with the batches delivered before it; a resumed producer starts from it
(``ContinuousPlay.resume``: each episode goes on from its last turn, its env restored by snapshot
or replay, or played again from its reset where the env can do neither), so no episode is lost
or played twice.
"""

from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace
from typing import Any

from agentrl.algorithms.base import check_shaped_rewards, shaped
from agentrl.producer.player import shape_rewards
from agentrl.producer.sync import build_tasks
from agentrl.producer.wire import pack_episodes
from agentrl.rollout.continuous import ContinuousPlay
from agentrl.rollout.episode import tag_versions
from agentrl.rollout.episodes import RolloutTiming


class ContinuousMode:
    """The continuous play strategy of a ``Producer`` (module docstring)."""

    def __init__(self, producer):
        self.p = producer
        s = producer.spec
        self.player = producer.source.player
        self.k = s.max_staleness
        self.ahead = int(producer.config.producer_overprovision)
        per_rank = len(s.plan.rows(s.first_iteration, s.rank))
        settings = self.player.settings()
        envs = self.player._env_batch(settings, per_rank * (1 + self.ahead))
        g = self.player.generation
        # vLLM's engine: each turn a request of its own (continuous batching, env steps while the
        # others generate); the HF engine: per-tick batches
        requests = (SimpleNamespace(submit=producer._beating(g.submit), poll=producer._beating(g.poll), abort=g.abort)
                    if g.submits else None)
        self.play = ContinuousPlay(self._generate, self.player.tokenizer, settings, envs, per_rank * (1 + self.ahead),
                                   version=lambda: self.p.loaded or 0, before_tick=self._newest,
                                   timing=self.player.timing, requests=requests)
        self.groups: dict[int, list[str]] = {}
        """Submitted iteration -> its group ids in task order."""
        self.b = self.nxt = s.first_iteration
        """The next iteration to deliver, the next to submit."""
        self.resumed: dict[str, int] | None = None
        """How the episodes of a checkpoint's play were resumed (``ContinuousPlay.resume``), if any."""
        if s.inflight is not None and s.inflight["next_batch"] == s.first_iteration:
            self.nxt, self.groups = s.inflight["next_submit"], dict(s.inflight["groups"])
            self.resumed = self.play.resume(s.inflight["play"])
            print(f"agentrl producer (rank {s.rank}): resumed the episodes in flight at the checkpoint "
                  f"({', '.join(f'{n} by {k}' for k, n in self.resumed.items())})", flush=True)
        producer.answer_snapshot = self._answer_snapshot

    def _answer_snapshot(self) -> None:
        """The learner's save asked for the episodes in flight: sent between two ticks (see the module
        docstring), after every batch already sent."""
        self.p.snapshot_asked = False
        self.p.out.put(("inflight", {"next_batch": self.b, "next_submit": self.nxt,
                                     "groups": {b: list(g) for b, g in self.groups.items()},
                                     "play": self.play.checkpoint()}))

    def _generate(self, prompts: list[list[int]]):
        g = self.player.generation
        g.begin_play(self.play.ticks, True, 0)  # a key per tick (not the lock-step run's draws)
        self.p.heartbeat.value = time.time()
        return g(prompts)

    def _newest(self) -> None:
        """Load the newest version shipped (between ticks: the episodes in flight go on with it)."""
        self.p._drain(block=False)
        if self.p.versions:
            newest = max(self.p.versions)
            if self.p.loaded is None or newest > self.p.loaded:
                self.p._load(newest)

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        p = self.p
        waited, t0 = 0.0, time.perf_counter()
        if self.groups:  # resumed with episodes in flight: weights at least as new as the ones they started on
            if not p._wait_for(max(0, max(self.groups) - self.k)):
                return
            p._load(max(p.versions))
        while not p.stopped:
            if p.snapshot_asked:
                self._answer_snapshot()
            waited += self._submit()
            b = self.b
            if p.stopped or b not in self.groups:
                break
            with self._cast():
                self.play.tick()
            groups = self.play.pop_groups(self.groups[b])
            if groups is not None:
                busy = time.perf_counter() - t0 - waited
                p.out.put(("batch", b, self._payload(b, [ep for g in groups for ep in g], busy, waited)))
                p.heartbeat.value = time.time()
                del self.groups[b]
                self.b, waited, t0 = b + 1, 0.0, time.perf_counter()

    def _submit(self) -> float:
        """Submit iterations ``nxt`` .. ``b + ahead`` whose weights are here; for iteration ``b``
        itself wait for them. Returns the seconds waited."""
        p, waited, b = self.p, 0.0, self.b
        while self.nxt <= b + self.ahead and not p.stopped:
            nxt = self.nxt
            need = max(0, nxt - self.k)
            self._newest()
            if p.loaded is None or p.loaded < need:
                if nxt > b:
                    break  # a later iteration's weights: play what is in flight meanwhile
                t0 = time.perf_counter()
                if not p._wait_for(need):
                    break
                waited += time.perf_counter() - t0
                p._load(max(p.versions))
            tasks = build_tasks(p.spec.plan.rows(nxt, p.spec.rank), nxt, p.spec.rank)
            self.groups[nxt] = list(dict.fromkeys(t["group_id"] for t in tasks))
            self.play.submit(tasks)
            self.nxt = nxt + 1
        return waited

    def _payload(self, b: int, episodes: list, busy: float, waited: float) -> dict[str, Any]:
        """Iteration ``b``'s batch as the learner receives it (``Producer._play``'s payload)."""
        src = self.p.source
        shape_rewards(episodes, src.valid_action_reward)
        check_shaped_rewards(src.algorithm, episodes, shaped(src.algorithm, episodes))
        for ep in episodes:
            tag_versions(ep, self.p.loaded or 0)
        version = min(ep.policy_version for ep in episodes)
        g, last = self.player.generation, getattr(self, "_requests", 0)
        self._requests = g.requests
        metrics = {"async/turn_requests": float(g.requests - last)} if g.submits else {}
        return {"episodes": pack_episodes(episodes), "version": version, "times": self._times(busy), "metrics": metrics,
                "sampler_differs": self.player.generation.differs_from_learner, "busy_s": busy, "waited_s": waited,
                "carried_groups": sum(len(g) for g in self.groups.values()) - len(self.groups.get(b, []))}

    def _times(self, busy: float) -> RolloutTiming:
        """What the ticks since the last batch cost (env, generate, tokens, ticks): the counters'
        growth since then, shared with the iterations in flight beside this one."""
        g, t = self.player.generation, self.play.timing
        now = (t.env_s, g.seconds, g.tokens, self.play.ticks)
        last = getattr(self, "_last", (0.0, 0.0, 0, 0))
        self._last = now
        return RolloutTiming(wall_s=busy, env_s=now[0] - last[0], generate_s=now[1] - last[1],
                             tokens=now[2] - last[2], turns=now[3] - last[3])

    def _cast(self):
        import torch

        a = self.p.spec.autocast
        return torch.autocast("cpu", dtype=getattr(torch, a)) if a else contextlib.nullcontext()
