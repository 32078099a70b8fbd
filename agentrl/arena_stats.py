"""Statistics and outputs of ``agentrl arena``: pure functions over per-run held-out curves.

A run's curve is a list of ``{"step", "success", "wins"}`` points (success in %, ``wins`` the
per-task outcomes on the shared held-out tasks); step 0 is the shared warm start. Seeds are the
independent replicates: every "mean +- s.e." here is over seeds (sample std, ddof 1, / sqrt(n)).
The difference to the baseline is paired twice over: by seed (same seed, same task order) and,
for its second s.e., by (seed, task), which is what is left when there is a single seed.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from agentrl.evaluation.heldout import paired_difference
from agentrl.report import mean_band, steps_to_threshold


def mean_se(xs: list[float]) -> tuple[float, float | None]:
    """Mean and its standard error (sample std / sqrt(n)); the s.e. is None for one value."""
    if not xs:
        return float("nan"), None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None
    return m, statistics.stdev(xs) / math.sqrt(len(xs))


def auc(curve: list[tuple[int, float]], last_step: int) -> float:
    """Mean success over steps 0..last_step: the trapezoid area under the curve / last_step.

    The curve is held flat after its last point (a run that stopped early keeps its last value).
    """
    pts = sorted(curve)
    if not pts or last_step <= 0:
        return float("nan")
    if pts[-1][0] < last_step:
        pts.append((last_step, pts[-1][1]))
    area = sum((s1 - s0) * (y0 + y1) / 2 for (s0, y0), (s1, y1) in zip(pts, pts[1:], strict=False))
    return area / last_step


def steps_to(curve: list[tuple[int, float]], threshold: float) -> int | None:
    """First step whose success is >= threshold (None: never reached)."""
    pts = sorted(curve)
    return steps_to_threshold([x for x, _ in pts], [y for _, y in pts], threshold)


def median_steps(values: list[int | None]) -> float | None:
    """Median with never-reached runs counted as infinitely slow; None when the median run never
    reached the threshold."""
    xs = sorted(math.inf if v is None else float(v) for v in values)
    if not xs:
        return None
    m = statistics.median(xs)
    return None if math.isinf(m) else m


def _curve(run: dict[str, Any], warm: dict[str, Any]) -> list[tuple[int, float]]:
    return [(0, warm["success"])] + [(p["step"], p["success"]) for p in run["curve"]]


def estimator_row(runs: list[dict[str, Any]], base_runs: dict[int, dict[str, Any]], warm: dict[str, Any],
                  threshold: float, last_step: int) -> dict[str, Any]:
    """One estimator's numbers over its seeds (``runs``), against the baseline's runs by seed."""
    finals = [r["curve"][-1]["success"] for r in runs if r["curve"]]
    bests = [max(p["success"] for p in r["curve"]) for r in runs if r["curve"]]
    curves = [_curve(r, warm) for r in runs]
    reach = [steps_to(c[1:], threshold) for c in curves]
    row: dict[str, Any] = {"seeds": [r["seed"] for r in runs]}
    row["final"], row["final_se"] = mean_se(finals)
    row["best"], row["best_se"] = mean_se(bests)
    row["auc"], row["auc_se"] = mean_se([auc(c, last_step) for c in curves])
    row["steps_to_threshold"] = reach
    row["median_steps_to_threshold"] = median_steps(reach)
    diffs, auc_diffs, win_pairs_b, win_pairs_e = [], [], [], []
    for r in runs:
        b = base_runs.get(r["seed"])
        if not (b and b["curve"] and r["curve"]):
            continue
        diffs.append(r["curve"][-1]["success"] - b["curve"][-1]["success"])
        auc_diffs.append(auc(_curve(r, warm), last_step) - auc(_curve(b, warm), last_step))
        win_pairs_b += b["curve"][-1]["wins"]
        win_pairs_e += r["curve"][-1]["wins"]
    row["diff_to_baseline"], row["diff_se_seeds"] = mean_se(diffs)
    row["auc_diff"], row["auc_diff_se"] = mean_se(auc_diffs)
    row["paired_seeds"] = len(diffs)
    row["diff_se_tasks"] = paired_difference(win_pairs_b, win_pairs_e)[1] if win_pairs_b else None
    diag_keys = sorted({k for r in runs for k in r.get("train_log", {})})
    row["train"] = {k: mean_se([r["train_log"][k] for r in runs if k in r.get("train_log", {})])[0]
                    for k in diag_keys}
    t = row["train"]
    row["s_per_step"] = sum(t.get(k, 0.0) for k in ("time/rollout_s", "time/update_s")) or None
    return row


def verdicts(rows: dict[str, dict[str, Any]], baseline: str, alpha: float = 0.05) -> None:
    """Set each row's ``verdict`` (final success) and ``auc_verdict`` against the baseline, Holm-
    corrected over the estimators compared (each metric one family): ``better``/``worse`` when the
    adjusted two-sided p is below ``alpha``, else ``not resolved``; ``n/a`` without an s.e. The
    p-value is Student's t over seeds (n - 1 degrees of freedom) or, with one seed, normal over
    (seed, task) pairs (final success only)."""
    others = [lab for lab in rows if lab != baseline]
    for key, (d_key, se_key) in {"verdict": ("diff_to_baseline", "diff_se_seeds"),
                                 "auc_verdict": ("auc_diff", "auc_diff_se")}.items():
        diffs, dfs = {}, {}
        for lab in others:
            r = rows[lab]
            se, df = r[se_key], r["paired_seeds"] - 1
            if se is None and key == "verdict":
                se, df = r["diff_se_tasks"], None
            diffs[lab], dfs[lab] = (r[d_key], se), df
        for lab, (v, p) in holm_verdicts(diffs, alpha, dfs).items():
            rows[lab][key], rows[lab][f"{key}_p_holm"] = v, p
        if baseline in rows:
            rows[baseline][key], rows[baseline][f"{key}_p_holm"] = "baseline", None


def visit_rates(rows) -> dict[str, list[float]]:
    """Per task, the share of its training episodes won at each visit: ``rows`` are (group id,
    trajectory id, won) in the order the run wrote them; a group id is ``s<step>:t<task>`` (one
    visit of one task), so a task's visits are its groups in order."""
    groups: dict[str, dict[str, bool]] = {}
    for gid, traj, won in rows:
        groups.setdefault(gid, {})[traj] = bool(won)
    out: dict[str, list[float]] = {}
    for gid, wins in groups.items():
        out.setdefault(gid.split(":", 1)[1], []).append(sum(wins.values()) / len(wins))
    return out


def visit_gain(runs: list[dict[str, list[float]]]) -> dict[str, Any] | None:
    """Over an estimator's runs (``visit_rates`` each): mean success (%) at each visit that every
    task had, and the last of those minus the first, paired over (run, task), with its s.e."""
    pairs = [v for run in runs for v in run.values()]
    n = min((len(v) for v in pairs), default=0)
    if n < 2:
        return None
    per_visit = [100 * statistics.fmean(v[i] for v in pairs) for i in range(n)]
    gain, se = paired_difference([v[0] for v in pairs], [v[n - 1] for v in pairs])
    return {"per_visit": per_visit, "gain": gain, "gain_se": se, "pairs": len(pairs), "visits": n}


def summarize(results: list[dict[str, Any]], warm: dict[str, Any], labels: list[str], seeds: list[int],
              baseline: str, threshold: float, last_step: int) -> dict[str, Any]:
    """Every number of the arena, by estimator (in ``labels`` order)."""
    by = {lab: sorted((r for r in results if r["label"] == lab), key=lambda r: r["seed"]) for lab in labels}
    base_runs = {r["seed"]: r for r in by[baseline]}
    rows = {}
    for lab in labels:
        row = estimator_row(by[lab], base_runs, warm, threshold, last_step)
        row["curves"] = {r["seed"]: _curve(r, warm) for r in by[lab]}
        row["visits"] = visit_gain([r["visits"] for r in by[lab] if r.get("visits")])
        row["per_run"] = {r["seed"]: visit_gain([r["visits"]]) if r.get("visits") else None for r in by[lab]}
        rows[lab] = row
    verdicts(rows, baseline)
    return {"estimators": rows, "baseline": baseline, "threshold": threshold, "seeds": seeds,
            "steps": last_step, "warm_start_success": warm["success"]}


def _fmt(m: float | None, se: float | None, nd: int = 1) -> str:
    if m is None or (isinstance(m, float) and math.isnan(m)):
        return "-"
    return f"{m:.{nd}f}" + (f" ± {se:.{nd}f}" if se is not None else "")


def _p(p: float | None) -> str:
    return "" if p is None or math.isnan(p) else f" (p {p:.3f})"


def markdown(summary: dict[str, Any]) -> str:
    """``arena.md``: one row per estimator, then what the verdicts mean."""
    n = len(summary["seeds"])
    thr = summary["threshold"]
    what = summary.get("eval_set", "held-out tasks")
    lines = [f"Success (%) on {what}, mean ± s.e. over {n} seed(s); warm start {summary['warm_start_success']:.1f}; "
             f"threshold {thr:.1f}; baseline `{summary['baseline']}`; {summary['steps']} RL steps.", "",
             "| estimator | final | best | AUC | median steps to threshold (never) | final diff to baseline "
             "(s.e. seeds / tasks) | verdict (Holm p) | AUC diff (s.e.) | verdict (Holm p) | singleton frac "
             "| step-signal frac | PACE branch frac | s/step |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lab, r in summary["estimators"].items():
        never = sum(v is None for v in r["steps_to_threshold"])
        med = r["median_steps_to_threshold"]
        med_s = f"{med:.0f}" if med is not None else f"never in {summary['steps']}"
        se_t = f"{r['diff_se_tasks']:.1f}" if r["diff_se_tasks"] is not None else "-"
        se_s = f"{r['diff_se_seeds']:.1f}" if r["diff_se_seeds"] is not None else "-"
        se_a = f"{r['auc_diff_se']:.1f}" if r["auc_diff_se"] is not None else "-"
        t = r["train"]
        diag = [f"{t[k]:.3f}" if k in t else "-" for k in
                ("credit/singleton_frac", "credit/step_signal_frac", "credit/pace_branch_frac")]
        sps = f"{r['s_per_step']:.1f}" if r["s_per_step"] else "-"
        lines.append(f"| {lab} | {_fmt(r['final'], r['final_se'])} | {_fmt(r['best'], r['best_se'])} | "
                     f"{_fmt(r['auc'], r['auc_se'])} | {med_s} ({never}/{len(r['steps_to_threshold'])}) | "
                     f"{r['diff_to_baseline']:+.1f} ({se_s} / {se_t}) | {r['verdict']}{_p(r.get('verdict_p_holm'))} | "
                     f"{r['auc_diff']:+.1f} ({se_a}) | {r['auc_verdict']}{_p(r.get('auc_verdict_p_holm'))} | "
                     + " | ".join(diag) + f" | {sps} |")
    visits = {lab: r["visits"] for lab, r in summary["estimators"].items() if r.get("visits")}
    if visits:
        lines += ["", "Success (%) of the training episodes on each practised task at each visit (every group of "
                  "rollouts of a task is one visit; the runs' saved rollouts), pooled over seeds; last minus first "
                  "visit paired over (seed, task):", "",
                  "| estimator | per visit | last - first (s.e.) | (seed, task) pairs |", "|---|---|---|---|"]
        for lab, v in visits.items():
            lines.append(f"| {lab} | {' -> '.join(f'{x:.1f}' for x in v['per_visit'])} | "
                         f"{v['gain']:+.1f} ({v['gain_se']:.1f}) | {v['pairs']} |")
    lines += _per_run_lines(summary)
    m = len(summary["estimators"]) - 1
    lines += ["", f"Verdicts compare each estimator with the baseline, paired by seed: `better`/`worse` when the "
              f"two-sided p-value, Holm-adjusted over the {m} estimators compared (final success and AUC each one "
              "family), is below 0.05; otherwise `not resolved` (a difference the data cannot tell from zero). "
              "p: Student's t over seeds (n - 1 degrees of freedom); with one seed, the final's p is normal over "
              "(seed, task) pairs and AUC has none (`n/a`). AUC: mean success over steps 0..budget (trapezoid)."]
    return "\n".join(lines) + "\n"


def _per_run_lines(summary: dict[str, Any]) -> list[str]:
    """Each run's curve (the evaluation at every checkpoint, step 0 the warm start) and, where its
    rollouts were saved, its training episodes' success per visit with last minus first paired over
    its tasks: the curves in numbers, and which seed carries an estimator's mean."""
    lines = ["", "Per run: success (%) at each evaluated step (0 is the warm start); the training episodes' "
             "success at each visit, mean over tasks, and last minus first visit (s.e. over tasks):", "",
             "| estimator | seed | evaluated, by step | training episodes, by visit | last - first visit (s.e.) |",
             "|---|---|---|---|---|"]
    for lab, r in summary["estimators"].items():
        for seed, curve in r["curves"].items():
            pts = " / ".join(f"{s}: {x:.1f}" for s, x in curve)
            v = r["per_run"].get(seed)
            by_visit = " -> ".join(f"{x:.1f}" for x in v["per_visit"]) if v else "-"
            gain = f"{v['gain']:+.1f} ({v['gain_se']:.1f})" if v else "-"
            lines.append(f"| {lab} | {seed} | {pts} | {by_visit} | {gain} |")
    return lines


def plot(summary: dict[str, Any], out: Path) -> None:
    """``curves.png`` (mean and ±1 s.e. band per estimator) and ``steps_to_threshold.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for lab, r in summary["estimators"].items():
        steps, ms, ses = mean_band([([x for x, _ in c], [y for _, y in c]) for c in r["curves"].values()])
        ax.plot(steps, ms, marker="o", label=lab)
        ax.fill_between(steps, [m - e for m, e in zip(ms, ses, strict=True)],
                        [m + e for m, e in zip(ms, ses, strict=True)], alpha=0.15)
    ax.axhline(summary["threshold"], color="grey", ls="--", lw=1, label=f"threshold {summary['threshold']:.0f}%")
    ax.set_xlabel("RL step")
    what = summary.get("eval_set", "held-out tasks")
    ax.set_ylabel("success (%)")
    # two lines: the practised-goals description alone fills the figure's width
    ax.set_title(f"agentrl arena: success on {what}\nmean ± s.e. over {len(summary['seeds'])} seed(s)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    labs = list(summary["estimators"])
    cap = summary["steps"] * 1.1
    for i, lab in enumerate(labs):
        r = summary["estimators"][lab]
        vals = [cap if v is None else v for v in r["steps_to_threshold"]]
        med = r["median_steps_to_threshold"]
        if med is None:  # never reached: a hatched bar at the budget, labelled, not a zero bar
            ax.bar(i, cap, color="white", edgecolor="grey", hatch="//")
            ax.text(i, cap / 2, "never reached", rotation=90, ha="center", va="center", fontsize=7)
        else:
            ax.bar(i, med, color="C0", alpha=0.6)
        ax.scatter([i] * len(vals), vals, color="k", s=12, zorder=3)
    ax.axhline(cap, color="grey", ls=":", lw=1)
    ax.text(len(labs) - 0.5, cap, "never reached", va="bottom", ha="right", fontsize=7)
    ax.set_xticks(range(len(labs)), labs, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(f"steps to {summary['threshold']:.0f}% success")
    ax.set_title("median steps to threshold (bars) and each seed (dots)")
    fig.tight_layout()
    fig.savefig(out / "steps_to_threshold.png", dpi=110)
    plt.close(fig)


def write_outputs(summary: dict[str, Any], out: Path) -> None:
    out = Path(out)
    (out / "arena.json").write_text(json.dumps(summary, indent=2, default=lambda x: None))
    (out / "arena.md").write_text(markdown(summary))
    plot(summary, out)


def normal_p(d: float, se: float | None, df: int | None = None) -> float:
    """Two-sided p-value of a difference ``d`` with standard error ``se``: normal, or Student's t
    with ``df`` degrees of freedom (a mean over df + 1 seeds); 1.0 where the s.e. is 0 and d is 0,
    0.0 where the s.e. is 0 and d is not; NaN without an s.e."""
    if se is None or math.isnan(d) or (df is not None and df < 1):
        return float("nan")
    if se == 0:
        return 1.0 if d == 0 else 0.0
    if df is not None:
        from scipy.stats import t

        return float(2 * t.sf(abs(d / se), df))
    return math.erfc(abs(d / se) / math.sqrt(2))


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values of m simultaneous comparisons: sorted ascending, the
    i-th smallest (1-based) becomes max over j <= i of min(1, (m - j + 1) p_(j)). NaN stays NaN
    and is not counted in m."""
    valid = sorted((p, k) for k, p in pvalues.items() if not math.isnan(p))
    m, out, running = len(valid), {k: float("nan") for k in pvalues}, 0.0
    for i, (p, k) in enumerate(valid):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out


def holm_verdicts(diffs: dict[str, tuple[float, float | None]], alpha: float = 0.05,
                  dfs: dict[str, int | None] | None = None) -> dict[str, tuple[str, float]]:
    """``{label: (difference, s.e.)}`` -> ``{label: (verdict, Holm-adjusted p)}``: ``better`` or
    ``worse`` when the adjusted p is below ``alpha``, else ``not resolved`` (``n/a`` without an
    s.e.). ``dfs``: per label, the t degrees of freedom of its p-value (None: normal)."""
    dfs = dfs or {}
    adj = holm({k: normal_p(d, se, dfs.get(k)) for k, (d, se) in diffs.items()})
    out = {}
    for k, (d, _) in diffs.items():
        p = adj[k]
        if math.isnan(p):
            out[k] = ("n/a", p)
        elif p < alpha:
            out[k] = ("better" if d > 0 else "worse", p)
        else:
            out[k] = ("not resolved", p)
    return out
