"""What one demo run writes (``demo_summary.json``) and prints (its per-seed line and its last line).

Pure functions of the run's measurements: the evaluations before and after RL (wins per episode),
the sampled measure, the curves, the memory meter and the timings. ``agentrl.demo`` runs the
phases and calls these; ``agentrl.demo_report`` reads the summaries of several seeds back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrl.demo_goals import goal_level_se
from agentrl.evaluation.heldout import paired_difference


def set_summaries(sets: dict[str, Any], before: dict[str, dict], after: dict[str, dict],
                  curves: dict[str, list]) -> dict[str, dict[str, Any]]:
    """Per evaluation set: before and after RL, the gain with its paired s.e. (the same episodes
    played by both models), the curve over checkpoints and the settings it was played with."""
    out = {}
    for name in sets:
        gain, se = paired_difference(before[name]["wins"], after[name]["wins"])
        out[name] = {"before": before[name], "after": after[name], "gain": gain, "gain_paired_se": se,
                     "curve": curves[name], "settings": sets[name].to_dict()}
    return out


def sampled_summary(sampled: dict[str, list[float]], samples: int, temperature: float,
                    n_goals: int) -> dict[str, Any]:
    """The sampled measure: each practised game's share won before and after RL (the game is the
    unit of the paired s.e.), and the mean success in percent."""
    gain, se = paired_difference(sampled["before"], sampled["after"])
    return {**sampled, "samples": samples, "temperature": temperature, "gain": gain, "gain_paired_se": se,
            **{f"success_{w}": 100 * sum(sampled[w]) / n_goals for w in ("before", "after")}}


def memory_summary(meter, rl_dir: Path) -> dict[str, Any]:
    """Peak memory (GiB) per demo phase (``sft``, ``select``, ``eval``, ``rl``) and, inside RL, per
    training phase (the highest ``mem/<phase>_gib`` any step logged in ``metrics.jsonl``)."""
    if meter is None:
        return {}
    out: dict[str, Any] = {"gauge": meter.main, "phases": meter.table(["sft", "select", "eval", "rl"]),
                           "overall_gib": round(meter.overall[meter.main] / 2**30, 3)}
    metrics = rl_dir / "metrics.jsonl"
    rl: dict[str, float] = {}
    for line in metrics.read_text().splitlines() if metrics.is_file() else []:
        for k, v in json.loads(line).items():
            if k.startswith("mem/") and v is not None:  # null: a value that was not finite
                rl[k[4:-4]] = max(rl.get(k[4:-4], 0.0), round(float(v), 3))
    out["rl_steps"] = rl
    return out


def add_goal_level_se(summary: dict[str, Any], practised_seeds: list[int], pool: int) -> None:
    """The practised gain's s.e. with the goal (not the episode) as unit: a goal's fresh draws
    share its difficulty, so the episode-level s.e. is too small where a goal has several."""
    pr = summary["practised"]
    pr["gain_goal_se"] = goal_level_se(pr["before"]["wins"], pr["after"]["wins"], practised_seeds, pool)


def memory_line(memory: dict[str, Any]) -> str | None:
    """``peak memory (GiB, rss): sft 5.40, select ...``; None without a meter."""
    if not memory:
        return None
    g = memory["gauge"]
    return f"peak memory (GiB, {g}): " + ", ".join(f"{r['phase']} {r[g + '_peak_gib']:.2f}" for r in memory["phases"])


def seed_line(summary: dict[str, Any], curve_png: Path) -> str:
    """The run's figures in one log line: gains with both s.e., transfer, timings."""
    pr, ho, un = summary["practised"], summary["heldout"], summary.get("unseen")
    return (f"seed {summary['seed']}: practised goals {pr['gain']:+.1f} points (paired s.e. "
            f"{pr['gain_paired_se']:.1f}; {pr['gain_goal_se']:.1f} with the goal as unit; "
            f"{pr['before']['episodes']} fresh episodes of {len(summary['practised_goals'])} goals); transfer to "
            f"unseen goals {ho['gain']:+.1f} (paired s.e. {ho['gain_paired_se']:.1f}, {ho['before']['episodes']} "
            "episodes); "
            + (f"unseen games of the practised types {un['gain']:+.1f} (paired s.e. {un['gain_paired_se']:.1f}); "
               if un else "")
            + "timings (s) " + ", ".join(f"{k} {v:.0f}" for k, v in summary["timings"].items())
            + f"; curve {curve_png}")


def report_line(summary: dict[str, Any]) -> str:
    """The demo's last line: the practised goals first (RL's question), held-out transfer second."""
    pr, ho = summary["practised"], summary["heldout"]
    un, sp = summary.get("unseen"), summary.get("practised_sampled")
    return (f"demo: practised goals before={pr['before']['success']:.1f} after={pr['after']['success']:.1f} "
            f"(paired s.e. {pr['gain_paired_se']:.1f}); "
            + (f"sampled before={sp['success_before']:.1f} after={sp['success_after']:.1f} "
               f"(paired s.e. {sp['gain_paired_se']:.1f}); " if sp else "")
            + (f"unseen games before={un['before']['success']:.1f} after={un['after']['success']:.1f}; " if un else "")
            + f"held-out before={ho['before']['success']:.1f} after={ho['after']['success']:.1f}")
