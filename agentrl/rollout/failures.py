"""Env failures said out loud: one iteration's count and first reason, a warning when an iteration
trained on nothing, and a stop when that keeps happening.

An env call that raises ends only its episode (``run_episodes``: failed + truncated,
``Episode.error``), so a broken env used to train "successfully": every episode an error, no
real row, loss 0, the exception's text nowhere. ``EnvFailureWatch`` closes that hole. Per
training iteration it takes every rank's ``failure_summary`` (gathered: every rank reaches the
same verdict) and

* prints the count and the first failure: env id, task seed, turn, and the call's exception
  (``reset`` / ``step`` / ``prompt``: its type and message);
* counts the iteration as *failed* when the share of failed episodes reaches
  ``max_env_failure_rate`` (default 1.0: every episode) or when it left no real training row,
  with a warning line;
* stops the run (``EnvFailureStop``: one line, exit 2) after ``max_env_failure_iterations`` failed
  iterations in a row, and at the end of a run none of whose iterations trained on anything.

An episode that failed before its first step has no step record; ``failed_start_records`` gives it
one (``info.error``, ``info.no_step``), so the saved rollouts and ``agentrl show`` say what
happened. Credit readers skip such records (``agentrl.records.is_step_record``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.records import NO_STEP


class EnvFailureStop(RuntimeError):
    """Raised when env failures leave nothing to train on, run after run; the message is one line."""


def _first(ep, env_id: str) -> dict[str, Any]:
    return {"env_id": env_id, "seed": ep.seed, "turn": int(ep.length), "traj_id": ep.traj_id, "reason": ep.error}


def failure_summary(episodes: Sequence[Any], env_id: str, real_rows: int) -> dict[str, Any]:
    """What one rank contributes (small enough to gather): episodes, failed ones, the first
    failure, the records of episodes that failed before any step, and its real training rows."""
    failed = [ep for ep in episodes if ep.error is not None]
    return {"episodes": len(episodes), "failed": len(failed), "rows": int(real_rows),
            "first": _first(failed[0], env_id) if failed else None,
            "no_step": failed_start_records(failed)}


def merge(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' summaries as one (counts summed; the first failure of the lowest rank)."""
    return {"episodes": sum(s["episodes"] for s in summaries), "failed": sum(s["failed"] for s in summaries),
            "rows": sum(s["rows"] for s in summaries),
            "first": next((s["first"] for s in summaries if s["first"] is not None), None),
            "no_step": [r for s in summaries for r in s["no_step"]]}


def failed_iteration(failed: int, episodes: int, real_rows: int, max_rate: float) -> bool:
    """Whether an iteration failed: it left no real training row, or at least ``max_rate`` of its
    episodes (and at least one) ended on an env error."""
    return real_rows == 0 or (failed > 0 and failed >= max_rate * episodes - 1e-9)


def describe(first: dict[str, Any]) -> str:
    """``env agentrl/X-v0, task seed 5, turn 0: step: RuntimeError: boom``."""
    return f"env {first['env_id']}, task seed {first['seed']}, turn {first['turn']}: {first['reason']}"


def failed_start_records(episodes: Sequence[Any]) -> list[dict[str, Any]]:
    """A step-record dict for every episode that ended on an error before its first step: t 0,
    no action, reward 0, done and truncated, ``info.error`` and ``info.no_step``."""
    return [{"group_id": ep.group_id, "traj_id": ep.traj_id, "t": 0, "obs": "", "action": "", "reward": 0.0,
             "done": True, "truncated": True, "task_family": ep.task_family,
             "info": {"error": ep.error, NO_STEP: True, "seed": ep.seed}}
            for ep in episodes if ep.error is not None and not ep.steps]


@dataclass
class EnvFailureWatch:
    """The run's account of env failures (see the module docstring)."""

    env_id: str
    max_rate: float = 1.0
    """Share of an iteration's episodes that, failed, make it a failed iteration (``max_env_failure_rate``)."""
    max_iterations: int = 3
    """Failed iterations in a row that stop the run (``max_env_failure_iterations``; 0: never)."""
    iterations: int = 0
    """Training iterations seen."""
    failed_iterations: int = 0
    """Iterations that counted as failed."""
    in_a_row: int = 0
    last: str = ""
    """The latest failure, described (``describe``)."""
    records: list[dict[str, Any]] = field(default_factory=list)
    """This iteration's records of episodes that failed before any step (for the saved rollouts)."""

    def observe(self, episodes: Sequence[Any], real_rows: int, step: int,
                gather: Callable[[Any], list[Any]] = lambda x: [x],
                say: Callable[[str], None] | None = print) -> dict[str, float]:
        """Account the training iteration that feeds optimizer step ``step`` (``gather`` returns
        every rank's value; ``say`` prints a line, None on the other ranks); the metrics to log.
        ``check_stop`` decides whether the run stops."""
        s = merge(gather(failure_summary(episodes, self.env_id, real_rows)))
        self.iterations += 1
        self.records = s["no_step"]
        failed = failed_iteration(s["failed"], s["episodes"], s["rows"], self.max_rate)
        self.failed_iterations += int(failed)
        self.in_a_row = self.in_a_row + 1 if failed else 0
        if s["first"] is not None:
            self.last = describe(s["first"])
        if say and s["first"] is not None:
            say(f"agentrl train: env failures in the iteration of step {step}: {s['failed']}/{s['episodes']} "
                f"episodes; first: {self.last}")
        if say and failed:
            what = "left no real training row" if s["rows"] == 0 else f"failed (max_env_failure_rate {self.max_rate:g})"
            say(f"agentrl train: warning: the iteration of step {step} {what}: {s['failed']}/{s['episodes']} "
                f"episodes ended on an env error{self._countdown()}")
        return {"env/failed_iterations": float(self.failed_iterations)}

    def _countdown(self) -> str:
        if not self.max_iterations:
            return ""
        return f" ({self.in_a_row} in a row; max_env_failure_iterations {self.max_iterations} stop the run)"

    def state_dict(self) -> dict[str, Any]:
        """The counts a checkpoint keeps: a resumed run stops where the uninterrupted one would."""
        return {"iterations": self.iterations, "failed_iterations": self.failed_iterations,
                "in_a_row": self.in_a_row, "last": self.last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iterations, self.failed_iterations = int(state["iterations"]), int(state["failed_iterations"])
        self.in_a_row, self.last = int(state["in_a_row"]), str(state["last"])

    def take_records(self) -> list[dict[str, Any]]:
        """The latest iteration's records of episodes that never stepped, once (the rollouts file)."""
        out, self.records = self.records, []
        return out

    def check_stop(self) -> None:
        """``EnvFailureStop`` after ``max_iterations`` failed iterations in a row (called after the
        optimizer step, so the iteration's rollouts are saved first)."""
        if self.max_iterations and self.in_a_row >= self.max_iterations:
            raise EnvFailureStop(f"{self.in_a_row} iterations in a row {self._what()} (max_env_failure_iterations "
                                 f"{self.max_iterations}): stopping" + self._last())

    def check_end(self) -> None:
        """At the end of training: ``EnvFailureStop`` when every iteration of the run failed."""
        if self.max_iterations and self.iterations and self.failed_iterations == self.iterations:
            raise EnvFailureStop(f"every iteration of the run ({self.iterations}) {self._what()}" + self._last())

    def _what(self) -> str:
        share = "every" if self.max_rate >= 1 else f"{self.max_rate:g} of the"
        return f"failed ({share} episode(s) ended on an env error, or no real training row was left)"

    def _last(self) -> str:
        return f"; last failure: {self.last}" if self.last else ""
