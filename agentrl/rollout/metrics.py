"""Episode metrics, computed in one place for training logs and ``agentrl eval``.

``episode_metrics`` takes Episodes or their ``episode_summary`` dicts (what the trainer gathers
across ranks) and returns the numbers under the names the trainer logs:

* ``env/success``: fraction of episodes won (the env's ``won`` flag), and ``env/success_se``
  its binomial standard error sqrt(p (1 - p) / n);
* ``env/episodes``; ``env/episode_len``: mean steps per episode;
* ``env/invalid_action_rate``: invalid steps / all steps (pooled over episodes);
* ``env/error_episodes``: episodes an env or prompt error ended (counted as failures);
* ``env/return``: mean summed reward; ``env/score``: mean final-step reward (WebShop's score);
* ``env/truncated_frac``; ``env/success/<family>`` per task family.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def episode_summary(ep: Any) -> dict[str, Any]:
    """The few numbers of an Episode that the metrics need (small enough to gather across ranks)."""
    if isinstance(ep, dict):
        return ep
    return {"won": bool(ep.won), "length": int(ep.length), "invalid": int(ep.n_invalid),
            "error": getattr(ep, "error", None) is not None, "truncated": bool(getattr(ep, "truncated", False)),
            "family": getattr(ep, "task_family", None), "ret": float(getattr(ep, "return_", 0.0)),
            "final_reward": float(ep.steps[-1].reward) if getattr(ep, "steps", None) else 0.0}


def success_se(p: float, n: int) -> float:
    """Binomial standard error of a success rate p over n episodes (0 for n = 0)."""
    return math.sqrt(p * (1 - p) / n) if n > 0 else 0.0


def episode_metrics(episodes: Iterable[Any]) -> dict[str, float]:
    """Success, its s.e., length, invalid-action rate, errors, return, score, truncation and
    per-family success of ``episodes`` (Episodes or ``episode_summary`` dicts). Rates are
    fractions in [0, 1]; an empty input gives zeros."""
    summ = [episode_summary(e) for e in episodes]
    n = len(summ)
    if n == 0:
        return {"env/episodes": 0, "env/success": 0.0, "env/success_se": 0.0, "env/episode_len": 0.0,
                "env/invalid_action_rate": 0.0, "env/error_episodes": 0, "env/return": 0.0, "env/score": 0.0,
                "env/truncated_frac": 0.0}
    p = sum(s["won"] for s in summ) / n
    steps = sum(s["length"] for s in summ)
    out: dict[str, float] = {
        "env/episodes": n,
        "env/success": p,
        "env/success_se": success_se(p, n),
        "env/episode_len": steps / n,
        "env/invalid_action_rate": sum(s["invalid"] for s in summ) / max(steps, 1),
        "env/error_episodes": sum(bool(s["error"]) for s in summ),
        "env/return": sum(s["ret"] for s in summ) / n,
        "env/score": sum(s.get("final_reward", 0.0) for s in summ) / n,
        "env/truncated_frac": sum(bool(s["truncated"]) for s in summ) / n,
    }
    for fam in sorted({s["family"] for s in summ if s["family"]}):
        won = [s["won"] for s in summ if s["family"] == fam]
        out[f"env/success/{fam}"] = sum(won) / len(won)
    return out
