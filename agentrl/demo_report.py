"""The demo's seeds side by side: one table from the ``demo_summary.json`` of each seed's folder.

    python -m agentrl.demo_report runs/demo_alfworld_seed0 runs/demo_alfworld_seed1 ...
    make demo-report DESIGN=alfworld          # every runs/demo_alfworld_seed*/ there is

Per seed: the practised games' gain, greedy (one episode a game) and sampled (the share of the
sampled episodes won a game), each with its paired s.e. and its ratio to it; the unseen games and
the held-out split; wall time, CPU time and peak memory. Then two ways to put the seeds together,
because they answer different questions:

* **over seeds**: the mean of the seeds' gains and its s.e. across seeds (n - 1 in the variance):
  does the pipeline, rerun from scratch, gain? Seeds are the independent replicates.
* **pooled**: every practised game of every seed as one paired unit (``paired_difference`` over
  the concatenated outcomes): the seeds' games are different draws from the same training set, so
  this is the per-game gain with the seed's RL run folded into the game's noise.

The verdict against a target (``--target-points``, ``--target-se``: issue 55's 15 points and
3 s.e.) is printed per seed and measure, never decided here for the reader.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentrl.arena_stats import mean_se
from agentrl.evaluation.heldout import paired_difference


class ReportError(ValueError):
    """A folder that is not a finished demo seed."""


def load_summary(folder: str | Path) -> dict[str, Any]:
    """The seed's ``demo_summary.json``; one clear error when it is missing or not the demo's."""
    path = Path(folder) / "demo_summary.json"
    if not path.is_file():
        raise ReportError(f"{folder}: no demo_summary.json (the seed has not finished, or this is not a demo folder)")
    try:
        s = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(s, dict) or "practised" not in s or "seed" not in s:
        raise ReportError(f"{path}: not a demo summary (no 'seed' or 'practised')")
    return s


def _peak(s: dict[str, Any]) -> tuple[float | None, str]:
    """Peak memory (GiB) over the run's phases and the phase that reached it."""
    mem = s.get("memory") or {}
    key = f"{mem.get('gauge', 'rss')}_peak_gib"
    phases = [p for p in mem.get("phases", []) if p.get(key) is not None]
    if not phases:
        return None, ""
    top = max(phases, key=lambda p: p[key])
    return top[key], top["phase"]


def seed_row(s: dict[str, Any]) -> dict[str, Any]:
    """One seed's figures: per measure (before, after, gain, paired s.e.), time and memory."""
    row: dict[str, Any] = {"seed": s["seed"], "design": s.get("design", "")}
    for name in ("practised", "unseen", "heldout"):
        if name in s:
            m = s[name]
            row[name] = (m["before"]["success"], m["after"]["success"], m["gain"], m["gain_paired_se"])
    sp = s.get("practised_sampled")
    if sp:
        # the success from the per-game rates (summaries written before success_before/after existed)
        rate = [100 * sum(sp[w]) / len(sp[w]) for w in ("before", "after")]
        row["sampled"] = (rate[0], rate[1], sp["gain"], sp["gain_paired_se"])
    mem = (s.get("memory") or {}).get("phases", [])
    row["wall_min"] = s.get("timings", {}).get("total_s", float("nan")) / 60
    row["cpu_min"] = sum(p.get("cpu_seconds", 0.0) for p in mem) / 60 if mem else float("nan")
    row["peak_gib"], row["peak_phase"] = _peak(s)
    return row


def pooled(summaries: list[dict[str, Any]], measure: str) -> tuple[float, float, int]:
    """The paired gain over every practised game of every seed, its s.e. and the number of games.

    ``measure`` is ``greedy`` (each game's greedy win) or ``sampled`` (each game's share won)."""
    before: list[float] = []
    after: list[float] = []
    for s in summaries:
        if measure == "greedy":
            b, a = s["practised"]["before"]["wins"], s["practised"]["after"]["wins"]
        elif measure == "sampled":
            if not s.get("practised_sampled"):
                raise ReportError(f"seed {s['seed']}: no sampled measure (practised_samples was 0)")
            b, a = s["practised_sampled"]["before"], s["practised_sampled"]["after"]
        else:
            raise ReportError(f"unknown measure {measure!r} (greedy, sampled)")
        before += [float(x) for x in b]
        after += [float(x) for x in a]
    gain, se = paired_difference(before, after)
    return gain, se, len(before)


def meets(gain: float, se: float, points: float, ratio: float) -> bool:
    """The target: a gain of at least ``points`` that is more than ``ratio`` paired s.e."""
    return gain >= points and (se == 0.0 and gain > 0 or se > 0 and gain > ratio * se)


def _cell(v: tuple[float, float, float, float] | None) -> str:
    if v is None:
        return "-"
    b, a, g, se = v
    return f"{b:.1f} -> {a:.1f} ({g:+.1f}, s.e. {se:.1f})"


def report(summaries: list[dict[str, Any]], points: float = 15.0, ratio: float = 3.0) -> str:
    """The markdown table, the two aggregates and the verdict per seed."""
    rows = [seed_row(s) for s in sorted(summaries, key=lambda s: s["seed"])]
    lines = ["| seed | practised, greedy | practised, sampled | unseen games | held-out split | wall min | "
             "CPU min | peak GiB (phase) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        peak = f"{r['peak_gib']:.2f} ({r['peak_phase']})" if r["peak_gib"] is not None else "-"
        lines.append(f"| {r['seed']} | {_cell(r.get('practised'))} | {_cell(r.get('sampled'))} | "
                     f"{_cell(r.get('unseen'))} | {_cell(r.get('heldout'))} | {r['wall_min']:.1f} | "
                     f"{r['cpu_min']:.1f} | {peak} |")
    lines.append("")
    for key, label in (("practised", "greedy"), ("sampled", "sampled"), ("unseen", "unseen"), ("heldout", "held-out")):
        gains = [r[key][2] for r in rows if key in r]
        if gains:  # the arena's mean +- s.e. over seeds (sample std, n - 1)
            mean, se = mean_se(gains)
            lines.append(f"over {len(gains)} seeds, {label}: {mean:+.1f} (s.e. across seeds "
                         + (f"{se:.1f})" if se is not None else "-: one seed)"))
    for measure in ("greedy", "sampled"):
        if measure == "sampled" and not all(s.get("practised_sampled") for s in summaries):
            continue
        g, se, n = pooled(summaries, measure)
        lines.append(f"pooled, {measure}: {g:+.1f} (paired s.e. {se:.1f}, {n} games of {len(rows)} seeds; "
                     + (f"{g / se:.1f} s.e.)" if se else "no spread)"))
    lines.append("")
    for r in rows:
        verdicts = []
        for key, label in (("practised", "greedy"), ("sampled", "sampled")):
            if key in r:
                _, _, g, se = r[key]
                ok = meets(g, se, points, ratio)
                spread = f" = {g / se:.1f} s.e. (" if se else " (every game moved alike; " if g else " (no game moved; "
                verdicts.append(f"{label} {g:+.1f}{spread}{'meets' if ok else 'misses'} >= {points:g} points and "
                                f"> {ratio:g} s.e.)")
        lines.append(f"seed {r['seed']}: " + "; ".join(verdicts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrl.demo_report", description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="*", help="each seed's output folder (its demo_summary.json)")
    ap.add_argument("--target-points", type=float, default=15.0, help="the gain a seed should reach (default 15)")
    ap.add_argument("--target-se", type=float, default=3.0, help="in paired s.e. (default 3)")
    a = ap.parse_args(argv)
    try:
        if not a.folders:  # make demo-report with no finished seed
            raise ReportError("no seed folders given (a finished seed's folder holds demo_summary.json)")
        summaries = [load_summary(f) for f in a.folders]
        seeds = [s["seed"] for s in summaries]
        if len(set(seeds)) != len(seeds):
            raise ReportError(f"a seed given twice: {sorted(seeds)}")
        print(report(summaries, a.target_points, a.target_se))
    except ReportError as e:
        print(f"demo_report: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
