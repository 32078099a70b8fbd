"""An episode and the rollout's view of one in progress: the data that ``run_episodes``
(``agentrl.rollout.episodes``) fills and the contexts (``agentrl.rollout.contexts``) read, in a
module of its own so that neither of those two imports the other's types from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.records import StepRecord


@dataclass
class Episode:
    """One rollout. ``steps`` are the StepRecords credit modules consume."""

    group_id: str
    traj_id: str
    steps: list[StepRecord] = field(default_factory=list)
    won: bool = False
    return_: float = 0.0
    length: int = 0
    truncated: bool = False
    task_family: str | None = None
    n_invalid: int = 0
    error: str | None = None
    """Why an env call or a prompt builder failed (the episode then ended failed + truncated)."""
    seed: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    context: Any = field(default=None, repr=False, compare=False)
    """The context that played it (an ``agentrl.rollout.contexts.Context``);
    ``context.rows(episode, advantages)`` gives its training rows."""
    tokens: Any = None
    """The context's per-episode state (``WindowTokens``, ``TrajectoryTokens``, ...)."""
    policy_version: int | None = None
    """The policy version (optimizer steps applied) whose weights played it; set by the rollout source."""


@dataclass
class Slot:
    """The rollout's view of one episode in progress (what contexts read and update)."""

    i: int
    """Index of the env in the env batch (= the task's index)."""
    ep: Episode
    obs: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    history: list[tuple[str, str]] = field(default_factory=list)
    """(observation, action) pairs of the steps taken."""
    t: int = 0
    """Step index of the next action."""
    turns: int = 0
    """Turns generated for this slot in this call (0 = its first prompt is next)."""
    active: bool = True
    prompt: list[int] | None = None
    """The prompt sent this turn."""
