"""The ``branch`` context: an episode that resumes another one from a token inside its step k.

APPO (arXiv:2606.12384, Sec. 3 "Procedural Rollout Branching") resamples a continuation from a
chosen token t of an initial rollout: the branch sees the parent's prompt and its completion up
to and including t, and plays on through the whole tool loop. A branch is an ordinary episode of
``run_episodes`` played by this context, so the turn loop needs no flag for it:

* the task carries a ``BranchStart`` under ``"branch"`` (plus the parent's ``seed`` and
  ``options``, a ``group_id`` and a ``traj_id`` of its own);
* ``after_reset`` puts the freshly reset env back where the parent was when step k began by
  replaying the parent's responses of steps 0..k-1, one ``envs.step_many`` per replayed step for
  all branches at once. This relies on the env being deterministic given its seed (every agentrl
  env is; ToolReason re-runs the parent's Python cells in the sandbox, which costs one tool call
  per replayed call). A replay that fails or ends the episode early ends the branch as an error;
* ``first_prompt`` returns the parent's prompt + ``completion[:t+1]``, so the model resumes
  mid-action; ``response_text`` gives the env the whole step-k response (the part already in the
  prompt + the continuation, decoded together so that no multi-byte character is split);
* later turns grow like ``trajectory`` (``TrajectoryContext``: env turns masked);
* ``rows`` returns ``[]``: branches carry no loss, they only inform the advantages of their
  parent (Eq. 6).

The branch's records start at ``t = k`` and carry the rewards it collects from step k on. Its
return also counts the parent's rewards of steps 0..k-1 (step shaping pays those): the APPO
algorithm writes them into the records' info (``agentrl.algorithms.appo.inherit_prefix_rewards``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrl_envs.actions import parse_action

from agentrl.rollout.contexts import Row, TrajectoryContext, TrajectoryTokens, register_context
from agentrl.rollout.env_batch import EnvFailure
from agentrl.rollout.prompts import decode_response

if TYPE_CHECKING:
    from agentrl.rollout.env_batch import EnvBatch
    from agentrl.rollout.episodes import Episode, Slot

NAN = float("nan")


@dataclass
class BranchStart:
    """Where a branch starts: what the task dict carries under ``"branch"``."""

    parent: str
    """traj_id of the initial rollout it continues."""
    pos: int
    """The chosen token: an index into the parent's ``completion_ids`` (kept in the branch)."""
    step: int
    """k, the parent's step whose model tokens hold ``pos``."""
    actions: list[str]
    """The parent's responses of steps 0..k-1, as the env received them (replayed in order)."""
    prompt_ids: list[int]
    """The parent's first prompt."""
    completion_ids: list[int]
    """The parent's ``completion_ids[:pos + 1]`` (model and env tokens)."""
    env_mask: list[int]
    """The parent's ``env_mask[:pos + 1]``."""
    step_spans: list[tuple[int, int]]
    """The parent's spans of steps 0..k-1."""
    step_start: int
    """Where step k's model tokens start in ``completion_ids``."""
    behaviour_logps: list[float] | None = None
    """The parent's ``behaviour_logps[:pos + 1]`` (its sampler's log-probs of those tokens; None: NaN)."""

    def __post_init__(self):
        if not (0 <= self.step_start <= self.pos and len(self.completion_ids) == self.pos + 1):
            raise ValueError(f"branch position {self.pos} is not inside step {self.step} (which starts at "
                             f"{self.step_start}) or completion_ids is not the parent's cut after it")
        if self.behaviour_logps is not None and len(self.behaviour_logps) != len(self.completion_ids):
            raise ValueError(f"a branch's behaviour_logps ({len(self.behaviour_logps)}) must align with its "
                             f"completion_ids ({len(self.completion_ids)})")
        if len(self.actions) != self.step or len(self.step_spans) != self.step:
            raise ValueError(f"a branch from step {self.step} needs {self.step} replayed actions and spans, "
                             f"got {len(self.actions)} and {len(self.step_spans)}")


def branch_start(parent: Episode, pos: int) -> BranchStart:
    """The ``BranchStart`` of a branch from token ``pos`` of ``parent`` (a trajectory-mode episode).
    ValueError if ``pos`` is not one of the parent's model tokens."""
    st = parent.tokens
    k = next((j for j, (s, e) in enumerate(st.step_spans) if s <= pos < e), None)
    if k is None:
        raise ValueError(f"token {pos} of {parent.traj_id} is not a model token of any step")
    s = st.step_spans[k][0]
    return BranchStart(parent=parent.traj_id, pos=int(pos), step=k,
                       actions=[str(r.info.get("response", r.action)) for r in parent.steps[:k]],
                       prompt_ids=list(st.prompt_ids), completion_ids=list(st.completion_ids[:pos + 1]),
                       env_mask=list(st.env_mask[:pos + 1]), step_spans=[tuple(x) for x in st.step_spans[:k]],
                       step_start=s, behaviour_logps=list(st.behaviour_logps[:pos + 1]))


def branch_task(parent: Episode, pos: int, index: int, suffix: str = "#branch") -> dict[str, Any]:
    """A ``run_episodes`` task for the branch of ``parent`` at token ``pos``: the parent's seed
    and options, group id ``parent.group_id + suffix`` (Eq. 6 compares branches in their own group),
    traj id ``{parent.traj_id}#b{index}``."""
    return {"seed": parent.seed, "options": dict(parent.options), "group_id": parent.group_id + suffix,
            "traj_id": f"{parent.traj_id}#b{index}", "branch": branch_start(parent, pos)}


@dataclass
class BranchTokens(TrajectoryTokens):
    """Per-episode state of ``branch``: a trajectory that starts as the parent's, cut after t."""

    start: BranchStart | None = None
    """Where the branch starts."""
    resumed: list[int] = field(default_factory=list)
    """Step k's tokens already in the first prompt (``completion_ids[step_start:pos + 1]``)."""


@register_context("branch")
class BranchContext(TrajectoryContext):
    """Resume the parent at its chosen token, then play on like ``trajectory`` (module docstring)."""

    def new_state(self, task: dict[str, Any]) -> BranchTokens:
        b = task.get("branch")
        if not isinstance(b, BranchStart):
            raise ValueError("a 'branch' task needs a BranchStart under 'branch' (see branch_task)")
        logps = list(b.behaviour_logps) if b.behaviour_logps is not None else [NAN] * len(b.completion_ids)
        return BranchTokens(prompt_ids=list(b.prompt_ids), completion_ids=list(b.completion_ids),
                            env_mask=list(b.env_mask), step_spans=list(b.step_spans), start=b,
                            resumed=list(b.completion_ids[b.step_start:]), behaviour_logps=logps)

    def after_reset(self, envs: EnvBatch, slots: list[Slot]) -> None:
        """Replay each branch's parent actions: one ``step_many`` per replayed step, all slots at once."""
        depth = max((s.ep.tokens.start.step for s in slots), default=0)
        for r in range(depth):
            live = [s for s in slots if s.active and s.ep.tokens.start.step > r]
            results = envs.step_many([(s.i, s.ep.tokens.start.actions[r]) for s in live])
            for s, res in zip(live, results, strict=True):
                self._replayed(s, r, res)

    @staticmethod
    def _replayed(s: Slot, r: int, res) -> None:
        if isinstance(res, EnvFailure):
            return _stop(s, f"replay of step {r}: {res.reason}")
        obs, _reward, terminated, truncated, info = res
        if terminated or truncated:  # a deterministic env cannot end here: the parent went on
            return _stop(s, f"replay of step {r} ended the episode (is the env deterministic?)")
        response = s.ep.tokens.start.actions[r]
        s.history.append((s.obs, info.get("action") or parse_action(response) or response))
        s.obs, s.info = obs, info
        s.t += 1

    def first_prompt(self, envs: EnvBatch, slot: Slot) -> list[int] | None:
        return self._fitting(slot.ep.tokens)

    def response_text(self, slot: Slot, completion: list[int]) -> str:
        head = slot.ep.tokens.resumed if slot.turns == 0 else []
        return self.settings.prefill + decode_response(self.tokenizer, head + list(completion))

    def append_turn(self, slot: Slot, prompt: list[int], completion: list[int], logprobs: list[float]) -> None:
        st = slot.ep.tokens
        if slot.turns > 0:
            return super().append_turn(slot, prompt, completion, logprobs)
        st.completion_ids.extend(completion)  # the resumed part (and its parent's log-probs) is already there
        st.env_mask.extend([1] * len(completion))
        st.behaviour_logps.extend(logprobs)
        st.step_spans.append((st.start.step_start, len(st.completion_ids)))

    def rows(self, episode: Episode, advantages) -> list[Row]:
        return []  # branches inform their parents' advantages and carry no loss


def _stop(s: Slot, reason: str) -> None:
    """End a slot before its first turn (no records yet) as an error."""
    s.active = False
    s.ep.error = reason
    s.ep.truncated = True
    s.ep.won = False
