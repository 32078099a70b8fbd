"""Multi-turn rollouts: many text envs stepped in lock-step, one batched generate call per turn.

Framework-free (no TRL): the trainer, eval, the demo and SFT all drive ``run_episodes`` through a
``generate`` callable (one call per turn with the prompts of all active episodes), an env batch
(``agentrl.rollout.env_batch``: resets, steps, the env's prompt builders) and a context
(``agentrl.rollout.contexts``: each turn's prompt and what an accepted turn adds). Nothing here
raises on model output: a malformed response goes to the env (its penalty; the episode goes on),
a prompt over ``max_prompt_tokens`` ends the episode ``truncated``, and a failed env call or
prompt builder ends it failed + truncated with ``error`` set. A ``RolloutTiming`` collects wall,
env and generation seconds (``time/rollout_s``, ``time/env_s``; env time is every call into the
env batch, a round trip to a worker process when there are env workers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentrl_envs.actions import parse_action
from agentrl_envs.prompts import history_entry

from agentrl.records import StepRecord
from agentrl.rollout.contexts import make_context
from agentrl.rollout.env_batch import EnvBatch, EnvFailure, InProcessEnvs, TimedEnvs
from agentrl.rollout.episode import Episode, Slot
from agentrl.rollout.prompts import chat_text, cut_at_stop, encode
from agentrl.rollout.settings import RolloutSettings

NAN = float("nan")


@dataclass
class GenerateOutput:
    """What a ``generate`` callable may return instead of a bare list of completions.

    ``fingerprints[i]`` is the hidden state of prompt i's last token (see ``fingerprint_layer``
    in ``AgentRLConfig``), or None when the generator does not capture it. ``logprobs[i][k]`` is
    the sampler's own log-prob of ``completion_ids[i][k]`` under the distribution it was drawn from
    (the behaviour log-prob; NaN where the sampler could not score it), or None when the generator
    gives none (every token NaN). ``version`` is the policy version whose weights drew the call's
    tokens, recorded on each turn's ``StepRecord.policy_version`` (a span), or None where the caller
    tags the episode's records afterwards (the lock-step source: one version per iteration).
    """

    completion_ids: list[list[int]]
    fingerprints: list[list[float]] | None = None
    logprobs: list[list[float]] | None = None
    version: int | None = None


GenerateFn = Callable[[list[list[int]]], "list[list[int]] | GenerateOutput"]


@dataclass
class RolloutTiming:
    """Seconds spent by ``run_episodes`` calls (each call adds to the fields)."""

    wall_s: float = 0.0
    """Wall time of the calls, from the first reset to the last episode's end."""
    env_s: float = 0.0
    """Time inside the env batch: ``reset_many``, ``step_many`` and the prompt builders."""
    generate_s: float = 0.0
    """Time inside the ``generate`` callable (filler rows included)."""
    fingerprint_s: float = 0.0
    """Time inside ``settings.fingerprints_after`` (0 when fingerprints come with generate)."""
    turns: int = 0
    """Generate calls made."""
    tokens: int = 0
    """Completion tokens generated, where the caller counts them (the producer's policy does)."""

    @property
    def env_share(self) -> float:
        """Env time over wall time (0 before any call)."""
        return self.env_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens over generate time (0 before any call)."""
        return self.tokens / self.generate_s if self.generate_s > 0 else 0.0


def _state_key(info: dict[str, Any]) -> str | None:
    """The env's ``info["state_key"]`` of the state an action is taken in (the info of the reset or
    step that showed it), as text; None where the env does not know its state."""
    key = info.get("state_key")
    return None if key is None else str(key)


def _record_info(info: dict[str, Any]) -> dict[str, Any]:
    """The env's ``info["record_info"]``: a small dict it wants kept on the StepRecord (metrics)."""
    extra = info.get("record_info")
    return dict(extra) if isinstance(extra, dict) else {}


def run_episodes(tasks: Sequence[dict[str, Any]], generate: GenerateFn, tokenizer, settings: RolloutSettings,
                 envs: EnvBatch | None = None, timing: RolloutTiming | None = None) -> list[Episode]:
    """Play one episode per task; return them in task order.

    Args:
        tasks: each ``{"seed": int, "options": dict, "group_id": str}`` (``traj_id`` optional;
            a context may read more keys in ``new_state``).
        generate: batch of prompt token ids -> completion token ids (or a ``GenerateOutput``).
            Called exactly once per turn with the prompts of all active envs.
        tokenizer: HF tokenizer with a chat template.
        settings: what to play and how (``RolloutSettings``).
        envs: an env batch with at least ``len(tasks)`` slots (e.g. a worker pool); the caller
            owns and closes it. Default: ``InProcessEnvs`` made and closed here.
        timing: a ``RolloutTiming`` this call adds its seconds to (making the default env batch
            is not counted: a caller that times it keeps its envs).
    """
    own = envs is None
    if envs is None:
        envs = InProcessEnvs(settings.env_id, settings.env_kwargs, len(tasks))
    timing = timing if timing is not None else RolloutTiming()
    t0 = time.perf_counter()
    try:
        return _Rollout(tasks, generate, tokenizer, settings, TimedEnvs(envs, timing), timing).run()
    finally:
        timing.wall_s += time.perf_counter() - t0
        if own:
            envs.close()


class _Rollout:
    """One ``run_episodes`` call: the slots, the turn loop and the end-of-episode rules."""

    def __init__(self, tasks, generate: GenerateFn, tokenizer, settings: RolloutSettings, envs: EnvBatch,
                 timing: RolloutTiming):
        self.tasks, self.generate, self.tokenizer = list(tasks), generate, tokenizer
        self.settings, self.envs, self.timing = settings, envs, timing
        self.context = make_context(settings.context_mode, tokenizer, settings)
        self.dummy = settings.dummy_prompt
        self.slots: list[Slot] = []
        self.max_turns = 0
        self.version: int | None = None
        """The policy version of the last generate call (``GenerateOutput.version``)."""
        self.fp_pending: list[tuple[StepRecord, list[int]]] = []
        """(record, its prompt) pairs whose fingerprint ``settings.fingerprints_after`` fills."""

    def run(self) -> list[Episode]:
        self._start()
        bar = None
        if self.settings.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.max_turns, desc="rollout turns", leave=False)
        while True:
            active = self._prompts()
            sync = self.settings.sync
            n_max = sync(len(active)) if sync is not None else len(active)
            if n_max == 0:
                break
            completions, fps, logprobs = self._generate(active, n_max)
            self._step(active, completions, fps, logprobs, self.version)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(active=len(active))
        if bar is not None:
            bar.close()
        for s in self.slots:
            if s.active:
                self._end(s, truncated=True)
        self._fingerprints_after()
        return [s.ep for s in self.slots]

    def _fingerprints_after(self) -> None:
        """One ``settings.fingerprints_after`` call on every step's prompt (when it is set)."""
        fn = self.settings.fingerprints_after
        if fn is None or not self.fp_pending:
            return
        t0 = time.perf_counter()
        fps = fn([p for _, p in self.fp_pending])
        for (rec, _), fp in zip(self.fp_pending, fps, strict=True):
            rec.fingerprint = [float(x) for x in fp]
        self.fp_pending = []
        self.timing.fingerprint_s += time.perf_counter() - t0

    def _start(self) -> None:
        """Episodes for the tasks, one reset_many for all slots, then the context's after_reset."""
        for i, task in enumerate(self.tasks):
            gid = str(task.get("group_id", f"g{i}"))
            ep = Episode(group_id=gid, traj_id=str(task.get("traj_id", f"{gid}/{i}")), seed=task.get("seed"),
                         options=dict(task.get("options") or {}), context=self.context,
                         tokens=self.context.new_state(task))
            self.slots.append(Slot(i=i, ep=ep))
        results = self.envs.reset_many([(s.i, s.ep.seed, s.ep.options) for s in self.slots]) if self.slots else []
        for s, res in zip(self.slots, results, strict=True):
            if isinstance(res, EnvFailure):
                self._end(s, truncated=True, error=res.reason)
            else:
                s.obs, s.info = res
                s.ep.task_family = s.info.get("task_family")
        self.context.after_reset(self.envs, [s for s in self.slots if s.active])
        self.max_turns = self.settings.max_turns or self.envs.max_episode_steps() or 30

    def _prompts(self, slots: list[Slot] | None = None) -> list[Slot]:
        """This turn's prompt of every active slot (of ``slots``, default all); slots out of turns
        or out of budget end."""
        active = []
        for s in self.slots if slots is None else slots:
            if not s.active:
                continue
            if s.t >= self.max_turns:
                self._end(s, truncated=True)
                continue
            build = self.context.first_prompt if s.turns == 0 else self.context.next_prompt
            try:
                s.prompt = build(self.envs, s)
            except Exception as e:  # the env's prompt builder failed: this episode ends, training goes on
                self._end(s, truncated=True, error=f"prompt: {type(e).__name__}: {e}")
                continue
            if s.prompt is None:
                self._end(s, truncated=True)
                continue
            active.append(s)
        return active

    def _generate(self, active: list[Slot], n_max: int) -> tuple[list[list[int]], list | None, list[list[float]]]:
        """One generate call: the active slots' prompts, plus filler prompts up to ``n_max`` (the
        most active slots of any rank) where ranks must pass equal lengths (``pad_batch``), or one
        filler when this rank has none left (its ranks' collectives still need a call). Finished
        slots are never generated for beyond that. Returns (completions, fingerprints or None,
        behaviour log-probs: NaN where the generator gave none), each cut at a stop string."""
        prompts = [s.prompt for s in active]
        if self.dummy is None:
            self.dummy = prompts[0] if prompts else encode(
                self.tokenizer, chat_text(self.tokenizer, "") + self.settings.prefill)
        if self.settings.pad_batch:
            prompts = prompts + [self.dummy] * (n_max - len(prompts))
        elif not prompts:
            prompts = [self.dummy]
        t0 = time.perf_counter()
        out = self.generate(prompts)
        self.timing.generate_s += time.perf_counter() - t0
        self.timing.turns += 1
        comps, fps, lps = ((out.completion_ids, out.fingerprints, out.logprobs) if isinstance(out, GenerateOutput)
                           else (out, None, None))
        self.version = out.version if isinstance(out, GenerateOutput) else None
        if lps is None:
            lps = [[NAN] * len(c) for c in comps]
        if self.settings.stop_strings:
            comps = [cut_at_stop(list(c), self.tokenizer, self.settings.stop_strings) for c in comps]
        return comps, fps, [list(lp[:len(c)]) for c, lp in zip(comps, lps, strict=True)]

    def _step(self, active: list[Slot], completions, fps, logprobs,
              version: int | list[int | None] | None = None) -> None:
        """One step_many for all active slots, then each result applied to its episode (``version``:
        the one that generated every completion, or each slot's own)."""
        comps = [list(completions[j]) for j in range(len(active))]
        versions = version if isinstance(version, list) else [version] * len(active)
        responses = [self.context.response_text(s, c) for s, c in zip(active, comps, strict=True)]
        results = self.envs.step_many([(s.i, r) for s, r in zip(active, responses, strict=True)])
        for j, (s, res) in enumerate(zip(active, results, strict=True)):
            if isinstance(res, EnvFailure):
                # The step that failed is not recorded (there is no reward for it); the episode ends.
                self._end(s, truncated=True, error=res.reason)
            else:
                self._apply(s, comps[j], logprobs[j], fps[j] if fps is not None else None, responses[j], res,
                            versions[j])

    def _apply(self, s: Slot, comp: list[int], logprobs: list[float], fp, response: str, result,
               version: int | None = None) -> None:
        obs, reward, terminated, truncated, info = result
        ep = s.ep
        action = history_entry(info, response)  # the same rule the OpenEnv server's prompts use
        valid = bool(info.get("action_valid", parse_action(response) is not None))
        rec = StepRecord(
            group_id=ep.group_id, traj_id=ep.traj_id, t=s.t, obs=s.obs, action=action,
            reward=float(reward), done=False, action_token_ids=list(comp), behaviour_logps=list(logprobs),
            fingerprint=[float(x) for x in fp] if fp is not None else None,
            state_sig=s.info.get("state_sig"), action_sig=info.get("action_sig"),
            state_key=_state_key(s.info),
            task_family=ep.task_family, valid=valid,
            # the raw response too: what the model wrote, even when the action parsed (agentrl show)
            # plus the env's ``record_info`` (small scalars for metrics, e.g. ToolReason's tool/score)
            info={"prompt_tokens": len(s.prompt or []), "response": response, **_record_info(info)},
            # the env's invalid-action penalty, already inside ``reward`` (credit's penalty="step")
            penalty=float(info.get("penalty", 0.0)),
            policy_version=version,
        )
        ep.steps.append(rec)
        if self.settings.fingerprints_after is not None:
            self.fp_pending.append((rec, list(s.prompt or [])))
        ep.return_ += float(reward)
        ep.length += 1
        ep.n_invalid += int(not valid)
        ep.won = bool(info.get("won", ep.won))
        self.context.append_turn(s, s.prompt, comp, logprobs)
        s.history.append((s.obs, action))
        s.obs, s.info = obs, info
        s.t += 1
        s.turns += 1
        if terminated or truncated:
            self._end(s, truncated=bool(truncated and not terminated))

    @staticmethod
    def _end(slot: Slot, truncated: bool, error: str | None = None) -> None:
        slot.active = False
        ep = slot.ep
        ep.truncated = ep.truncated or truncated
        if error is not None:
            ep.error = error
            ep.won = False
            ep.truncated = True
        if ep.steps:
            last = ep.steps[-1]
            last.done = True
            last.truncated = ep.truncated
            if ep.error:
                last.info["error"] = ep.error
        for r in ep.steps:
            r.won = ep.won


def episodes_to_records(episodes: Sequence[Episode]) -> list[StepRecord]:
    """All step records of ``episodes`` in order (episode by episode, t ascending)."""
    return [r for ep in episodes for r in ep.steps]
