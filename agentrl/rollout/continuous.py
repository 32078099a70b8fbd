"""Continuous episodes: each episode goes on at its own pace, groups come out as they complete.

The lock-step rollout (``run_episodes``) plays one set of tasks to the end: every turn is one
generate over every live episode, and the call returns when its slowest episode ends. Here the
episodes live in a scheduler that outlives any one iteration:

* ``submit(tasks)`` queues tasks (whole groups); a queued task starts (its env reset) as soon as an
  env slot is free, so a finished episode's slot is taken by the next task at once;
* ``tick()`` is one step of the scheduler: start queued tasks, call ``before_tick`` (where a newer
  policy version is loaded: the episodes in flight go on with it, a partial rollout), one batched
  generate over every episode whose env step has returned, one ``step_many`` (the pool's workers
  step in parallel), then every ended episode leaves its slot;
* ``take(n)`` ticks until ``n`` groups are complete and returns them in completion order. Groups
  started beyond that (over-provisioning) stay in flight and are carried into the next ``take``:
  nothing is dropped; ``close()`` returns the unfinished ones.

Each generated turn records the version that drew it (``GenerateOutput.version``, else
``version()`` at the tick): a group's episodes may span versions. Framework-free, like
``run_episodes``. Two ways to generate:

* **per-tick batches** (``generate``; the HF engine): a tick's generate covers every episode whose
  env step has returned; env steps do not overlap the generate of the same tick (a pool takes no
  other call while a ``step_many_start`` is in flight, and the next tick's prompts need the env's
  prompt builders);
* **requests** (``requests``: an engine that generates while this process does other work, vLLM's
  continuous batching, ``agentrl.sampling.Engine.submit`` / ``poll``): a tick submits the next
  turn of every episode whose env step has returned, as one request each, then polls; the
  requests that finished have their envs stepped (one ``step_many``: in the pool's workers when
  there are some, else here) while the others go on generating in the engine, and their next turns
  are submitted at the next tick. An episode never waits for another's turn. Each request is keyed
  by its episode and turn (``request_key``), not by the tick, and records the version the engine
  says drew it (``Finished.version``).

Fingerprints that are computed after generation (``settings.fingerprints_after``) are filled when
a group completes.
"""

from __future__ import annotations

import hashlib
import pickle
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from agentrl.rollout.env_batch import EnvBatch, EnvFailure, TimedEnvs
from agentrl.rollout.episode import Episode, Slot
from agentrl.rollout.episodes import GenerateFn, RolloutTiming, _Rollout
from agentrl.rollout.prompts import cut_at_stop
from agentrl.rollout.settings import RolloutSettings
from agentrl.sampling.keys import sampling_seed
from agentrl.sampling.spec import Finished, SamplingSpec

POLL_S = 0.5
"""The longest a tick waits for a request to finish (the caller's loop then sees its messages)."""


def request_key(traj_id: str) -> int:
    """A stable non-negative integer of an episode's id: with the turn, a request's key (the same
    episode's turn t is keyed the same way in any process, before and after a resume)."""
    return int.from_bytes(hashlib.blake2b(traj_id.encode(), digest_size=8).digest(), "big")


class TurnRequests(Protocol):
    """Turns as requests that finish on their own (``ContinuousPlay``'s ``requests``)."""

    def submit(self, prompts: list[list[int]], keys: list[tuple[int, ...]]) -> list[int]:
        """Start one request per prompt, keyed by ``keys`` (episode, turn); their ids."""
        ...

    def poll(self, timeout: float | None) -> list[Finished]:
        """The requests finished since the last poll (waiting up to ``timeout`` s for one)."""
        ...


class EngineRequests:
    """``TurnRequests`` over an ``agentrl.sampling.Engine``: every request under ``spec``, its
    sampling seed ``sampling_seed(seed, *key)``."""

    def __init__(self, engine, spec: SamplingSpec, seed: int = 0):
        self.engine, self.spec, self.seed = engine, spec, int(seed)

    def submit(self, prompts: list[list[int]], keys: list[tuple[int, ...]]) -> list[int]:
        return self.engine.submit(prompts, self.spec, [sampling_seed(self.seed, *k) for k in keys])

    def poll(self, timeout: float | None) -> list[Finished]:
        return self.engine.poll(timeout)

    def abort(self) -> None:
        if hasattr(self.engine, "abort"):
            self.engine.abort()
        else:  # an engine whose queue only runs when polled: drain it
            self.engine.poll(0.0)


class ContinuousPlay(_Rollout):
    """The scheduler (module docstring).

    Args:
        generate: prompts -> completions or a ``GenerateOutput`` (its ``version`` tags the spans).
        tokenizer, settings: as ``run_episodes``'s.
        envs: an env batch of at least ``slots`` slots, owned by the caller.
        slots: episodes in flight at most.
        version: the policy version now, for spans whose generate gave none (None: untagged).
        before_tick: called at the start of every tick (load a newly published version there).
        timing: a ``RolloutTiming`` the ticks add to.
    """

    def __init__(self, generate: GenerateFn, tokenizer, settings: RolloutSettings, envs: EnvBatch, slots: int,
                 version: Callable[[], int] | None = None, before_tick: Callable[[], None] | None = None,
                 timing: RolloutTiming | None = None, requests: TurnRequests | None = None):
        timing = timing if timing is not None else RolloutTiming()
        super().__init__([], generate, tokenizer, settings, TimedEnvs(envs, timing), timing)
        self.version_of, self.before_tick = version, before_tick
        self.requests = requests
        """Where turns are submitted as requests that finish on their own (None: per-tick batches)."""
        self.waiting: dict[int, Slot] = {}
        """Request id -> the slot whose turn it generates (the request path)."""
        self.free = list(range(slots))
        """Env slots without an episode."""
        self.queue: deque[dict[str, Any]] = deque()
        """Submitted tasks not started yet."""
        self.size: dict[str, int] = {}
        """Group id -> its submitted tasks."""
        self.ended: dict[str, list[tuple[int, Episode]]] = {}
        """Group id -> its ended episodes (with their submission order)."""
        self.complete: deque[list[Episode]] = deque()
        """Complete groups not taken yet, in completion order."""
        self.order: dict[str, int] = {}
        self.submitted = 0
        self.ticks = 0
        self.max_turns = settings.max_turns or envs.max_episode_steps() or 30

    # ------------------------------------------------------------------ the caller's
    def submit(self, tasks: list[dict[str, Any]]) -> None:
        """Queue ``tasks`` (each ``run_episodes``'s task dict; equal ``group_id`` = one group, all
        of a group submitted together)."""
        for task in tasks:
            gid = str(task["group_id"])
            self.size[gid] = self.size.get(gid, 0) + 1
            task = {**task, "traj_id": str(task.get("traj_id", f"{gid}/{self.size[gid] - 1}"))}
            self.order[task["traj_id"]] = self.submitted
            self.submitted += 1
            self.queue.append(task)

    def take(self, n_groups: int) -> list[list[Episode]]:
        """The first ``n_groups`` groups to complete (ticking until they have), each group's episodes
        in submission order; the rest stay in flight."""
        while len(self.complete) < n_groups:
            if not (self.slots or self.queue):
                raise RuntimeError(f"{n_groups} groups asked, only {len(self.complete)} submitted groups left")
            self.tick()
        return [self.complete.popleft() for _ in range(n_groups)]

    def pop_groups(self, group_ids: list[str]) -> list[list[Episode]] | None:
        """The groups ``group_ids`` in that order, taken out, once every one of them is complete; None
        (nothing taken) while one is not."""
        done = {g[0].group_id: i for i, g in enumerate(self.complete)}
        if any(gid not in done for gid in group_ids):
            return None
        out = [self.complete[done[gid]] for gid in group_ids]
        keep = set(group_ids)
        self.complete = deque(g for g in self.complete if g[0].group_id not in keep)
        return out

    @property
    def groups_in_flight(self) -> int:
        """Submitted groups not complete yet (started or queued): what a ``take`` carries over."""
        return len(self.size)

    def close(self) -> list[dict[str, Any]]:
        """Stop: the tasks of every group not complete (their episodes so far are dropped here, so the
        caller can submit them again; none is lost silently), then the complete groups not taken are
        still in ``complete``."""
        if self.waiting and self.requests is not None and hasattr(self.requests, "abort"):
            self.requests.abort()  # their episodes are returned as tasks below: the turns are not needed
        self.waiting.clear()
        left = sorted(set(self.size))
        tasks = [t for t in self.queue] + [self._task_of(s) for s in self.slots]
        tasks += [self._task_of_ep(ep) for g in left for _, ep in self.ended.get(g, [])]
        self.queue.clear()
        self.slots = []
        return sorted(tasks, key=lambda t: self.order[t["traj_id"]])

    # ------------------------------------------------------------------ one tick
    def tick(self) -> None:
        """Start queued tasks, ``before_tick``, one generate over the ready episodes, one step of
        their envs, then the ended episodes leave (module docstring)."""
        self._admit()
        if self.before_tick is not None:
            self.before_tick()
        if self.requests is not None:
            self._request_turns()
            self._leave()
            self.ticks += 1
            return
        ready = self._prompts()
        if ready:
            comps, fps, lps = self._generate(ready, len(ready))
            if self.version is None and self.version_of is not None:
                self.version = self.version_of()
            self._step(ready, comps, fps, lps, self.version)
        self._leave()
        self.ticks += 1

    def _admit(self) -> None:
        """Queued tasks into the free env slots: one reset_many for them, then the context's after_reset."""
        new = []
        while self.free and self.queue:
            task = self.queue.popleft()
            ep = Episode(group_id=str(task["group_id"]), traj_id=task["traj_id"], seed=task.get("seed"),
                         options=dict(task.get("options") or {}), context=self.context,
                         tokens=self.context.new_state(task))
            new.append(Slot(i=self.free.pop(0), ep=ep))
        if not new:
            return
        self.slots.extend(new)
        results = self.envs.reset_many([(s.i, s.ep.seed, s.ep.options) for s in new])
        for s, res in zip(new, results, strict=True):
            if isinstance(res, EnvFailure):
                self._end(s, truncated=True, error=res.reason)
            else:
                s.obs, s.info = res
                s.ep.task_family = s.info.get("task_family")
        self.context.after_reset(self.envs, [s for s in new if s.active])

    def _request_turns(self) -> None:
        """The request path (module docstring): the next turn of every episode not waiting for one
        submitted, then the requests finished by now (waiting up to ``POLL_S`` for one) stepped."""
        busy = {id(w) for w in self.waiting.values()}
        ready = self._prompts([s for s in self.slots if id(s) not in busy])
        t0 = time.perf_counter()
        if ready:
            ids = self.requests.submit([s.prompt for s in ready], [(request_key(s.ep.traj_id), s.turns) for s in ready])
            self.waiting.update(zip(ids, ready, strict=True))
            self.timing.turns += 1
        done = self.requests.poll(POLL_S) if self.waiting else []
        self.timing.generate_s += time.perf_counter() - t0
        if done:
            self._step_finished(done)

    def _step_finished(self, done: list[Finished]) -> None:
        """One step_many over the envs of the finished requests (the others still generate), each
        result applied with its request's tokens, log-probs and version (as ``_generate`` and
        ``_step`` do for a tick's batch)."""
        slots = [self.waiting.pop(f.request_id) for f in done]
        comps = [list(f.completion_ids) for f in done]
        if self.settings.stop_strings:
            comps = [cut_at_stop(c, self.tokenizer, self.settings.stop_strings) for c in comps]
        lps = [list(f.logprobs[:len(c)]) for f, c in zip(done, comps, strict=True)]
        now = self.version_of() if self.version_of is not None else None
        versions = [now if f.version is None else f.version for f in done]
        self._step(slots, comps, None, lps, versions)

    def _leave(self) -> None:
        """Ended episodes free their slots; a group whose episodes have all ended is complete (its
        fingerprints filled first, where they come after generation)."""
        for s in [s for s in self.slots if not s.active]:
            self.slots.remove(s)
            self.free.append(s.i)
            g = s.ep.group_id
            self.ended.setdefault(g, []).append((self.order[s.ep.traj_id], s.ep))
            if len(self.ended[g]) == self.size[g]:
                self._fingerprints_after()
                self.complete.append([ep for _, ep in sorted(self.ended.pop(g), key=lambda x: x[0])])
                del self.size[g]

    # ------------------------------------------------------------------ checkpoint and resume
    def checkpoint(self) -> bytes:
        """Everything in flight, between two ticks, pickled now (the caller may send it on while the
        play goes on): each running episode (its records: tokens, behaviour log-probs, per-span
        versions; the context's tokens; the slot's observation, info and history) with its env's
        resume kind and snapshot (``TextEnv.resume_kind``), the queued tasks, the ended episodes of
        incomplete groups, the complete groups not taken, the records still owed a fingerprint
        (``settings.fingerprints_after``), and the tick count (the key of the next generate). A
        turn whose request is still generating (the request path) is not in it: the resumed play
        submits it again, under the same key (episode, turn). ``resume`` on a fresh play continues
        from it."""
        live = [s for s in self.slots if s.active]
        snaps = (self.envs.snapshot_many([s.i for s in live])
                 if live and hasattr(self.envs, "snapshot_many") else [("restart", None)] * len(live))
        slots = []
        for s, snap in zip(live, snaps, strict=True):
            kind, state = ("restart", None) if isinstance(snap, EnvFailure) else snap
            slots.append((replace(s, ep=_bare(s.ep), prompt=None), kind, state))
        return pickle.dumps({
            "slots": slots, "queue": list(self.queue), "size": dict(self.size), "order": dict(self.order),
            "ended": {g: [(o, _bare(ep)) for o, ep in eps] for g, eps in self.ended.items()},
            "complete": [[_bare(ep) for ep in g] for g in self.complete],
            "fingerprints_owed": [(r.traj_id, r.t, list(p)) for r, p in self.fp_pending],
            "submitted": self.submitted, "ticks": self.ticks, "version": self.version})

    def resume(self, data: bytes) -> dict[str, int]:
        """Continue from ``checkpoint``'s bytes on this fresh play (nothing submitted yet): every
        episode in flight goes on from its last turn, its env restored by its resume kind:
        ``snapshot`` (reset with the episode's seed and options, the snapshot set), ``replay`` (reset,
        the episode's responses stepped again; each reward and the last observation must come out
        as recorded) or ``restart``, and any restore that fails or differs: the episode is played
        again from its reset (its task first in the queue). Returns how many episodes took each way."""
        if self.slots or self.queue or self.size:
            raise RuntimeError("resume needs a fresh ContinuousPlay (tasks were already submitted)")
        st = pickle.loads(data)  # noqa: S301  (our own checkpoint)
        self.size, self.order, self.submitted = dict(st["size"]), dict(st["order"]), int(st["submitted"])
        self.ticks, self.version = int(st["ticks"]), st["version"]
        self.ended = {g: [(o, self._own(ep)) for o, ep in eps] for g, eps in st["ended"].items()}
        self.complete = deque([self._own(ep) for ep in g] for g in st["complete"])
        self.queue = deque(st["queue"])
        by_kind: dict[str, list[Slot]] = {"snapshot": [], "replay": [], "restart": []}
        snaps: dict[str, Any] = {}
        for slot, kind, state in st["slots"]:
            slot.ep = self._own(slot.ep)
            slot.i = slot.i if slot.i in self.free else self.free[0]
            self.free.remove(slot.i)
            by_kind[kind if kind in by_kind else "restart"].append(slot)
            snaps[slot.ep.traj_id] = state
        restart = list(by_kind["restart"])
        done = self._restore(by_kind["snapshot"], snaps, restart) + self._replay(by_kind["replay"], restart)
        for s in sorted(restart, key=lambda s: self.order[s.ep.traj_id], reverse=True):
            self.free.append(s.i)
            self.queue.appendleft(self._task_of(s))
        live = {id(s) for s in done}
        self.slots = [slot for slot, _, _ in st["slots"] if id(slot) in live]
        records = {(r.traj_id, r.t): r for ep in [s.ep for s in self.slots] + [ep for eps in self.ended.values()
                                                                              for _, ep in eps] for r in ep.steps}
        self.fp_pending = [(records[(tid, t)], p) for tid, t, p in st.get("fingerprints_owed", [])
                           if (tid, t) in records]
        return {"snapshot": len([s for s in by_kind["snapshot"] if id(s) in live]),
                "replay": len([s for s in by_kind["replay"] if id(s) in live]), "restart": len(restart)}

    def _own(self, ep: Episode) -> Episode:
        ep.context = self.context
        return ep

    def _restore(self, slots: list[Slot], snaps: dict[str, Any], failed: list[Slot]) -> list[Slot]:
        """Snapshot envs: reset and set; the slots restored (the others into ``failed``)."""
        if not slots:
            return []
        res = self.envs.restore_many([(s.i, s.ep.seed, s.ep.options, snaps[s.ep.traj_id]) for s in slots])
        failed += [s for s, r in zip(slots, res, strict=True) if isinstance(r, EnvFailure)]
        return [s for s, r in zip(slots, res, strict=True) if not isinstance(r, EnvFailure)]

    def _replay(self, slots: list[Slot], failed: list[Slot]) -> list[Slot]:
        """Replay envs: reset, then one step_many per recorded turn over the slots that have it; a
        failure, a reward or a last observation other than recorded sends the slot to ``failed``."""
        if not slots:
            return []
        ok = {id(s): True for s in slots}
        last: dict[int, str] = {}
        for s, r in zip(slots, self.envs.reset_many([(s.i, s.ep.seed, s.ep.options) for s in slots]), strict=True):
            ok[id(s)] = not isinstance(r, EnvFailure)
            if ok[id(s)]:
                last[id(s)] = r[0]
        for t in range(max(len(s.ep.steps) for s in slots)):
            todo = [s for s in slots if ok[id(s)] and t < len(s.ep.steps)]
            res = self.envs.step_many([(s.i, str(s.ep.steps[t].info.get("response", s.ep.steps[t].action)))
                                       for s in todo]) if todo else []
            for s, r in zip(todo, res, strict=True):
                if isinstance(r, EnvFailure) or float(r[1]) != s.ep.steps[t].reward:
                    ok[id(s)] = False
                else:
                    last[id(s)] = r[0]
        for s in slots:
            if ok[id(s)] and last.get(id(s)) != s.obs:
                ok[id(s)] = False
        failed += [s for s in slots if not ok[id(s)]]
        return [s for s in slots if ok[id(s)]]

    @staticmethod
    def _task_of_ep(ep: Episode) -> dict[str, Any]:
        return {"seed": ep.seed, "options": dict(ep.options), "group_id": ep.group_id, "traj_id": ep.traj_id}

    def _task_of(self, s: Slot) -> dict[str, Any]:
        return self._task_of_ep(s.ep)


def _bare(ep: Episode) -> Episode:
    """``ep`` without its context (a tokenizer and the rollout's callables: it is made again on resume)."""
    return replace(ep, context=None)
