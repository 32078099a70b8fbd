"""What ``agentrl truth`` writes: ``truth.md`` (tables), ``truth.json`` (every number),
``cos_vs_G.png`` and ``race.png`` (learning curves with +-1 s.e. bands)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _f(x: dict[str, Any] | float | None, nd: int = 2) -> str:
    if isinstance(x, dict):
        m, se = x["mean"], x["se"]
        if m is None or (isinstance(m, float) and math.isnan(m)):
            return "-"
        return f"{m:.{nd}f}" + (f" ± {se:.{nd}f}" if se is not None else "")
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{nd}f}"


def _equiv(x: float | None, top: int) -> str:
    if x is None:
        return f"> {top}x"
    if x == 0.0:
        return "< 1x"
    return f"{x:.1f}x"


def _table(title: str, families: list[str], labels: list[str], cell) -> list[str]:
    lines = [f"### {title}", "", "| estimator | " + " | ".join(families) + " |",
             "|---|" + "---|" * len(families)]
    lines += [f"| {lab} | " + " | ".join(cell(f, lab) for f in families) + " |" for lab in labels]
    return lines + [""]


def markdown(res: dict[str, Any]) -> str:
    s = res["settings"]
    fams, labels, G = list(res["scores"]), list(s["estimators"]), s["G"]
    sc = res["scores"]
    top = max(int(m) for m in next(iter(sc.values()))["grpo_cos_by_multiple"]) if sc else 0
    lines = [
        "# Credit against the truth", "",
        f"Scores: {s['seeds']} MDP instances per family x {s['batches']} batches of B={s['B']} tasks x G rollouts; "
        f"mean ± s.e. over MDP instances; headline columns at G={G}. Race: {s['race_seeds']} seeds x "
        f"{s['steps']} Adam updates (lr {s['lr']}), J exact after every update. Timings: scores "
        f"{res['time_s']['scores']:.0f} s, race {res['time_s']['race']:.0f} s.", "",
    ]
    lines += _table(f"GRPO batch needed to match the estimator's gradient cosine (G={G}; x GRPO's batch)",
                    fams, labels, lambda f, lab: _equiv(sc[f]["grpo_equivalent"][lab], top))
    for key, title in (("cos", "Cosine of the batch gradient with the exact dJ/dtheta"),
                       ("bias", "Cosine of the mean gradient (over batches) with dJ/dtheta: 1 = unbiased direction"),
                       ("corr", "Correlation of per-step advantages with A^pi_t(s, a)"),
                       ("sign", "Sign agreement with A^pi_t(s, a) (records with A^pi != 0)")):
        lines += _table(f"{title} (G={G})", fams, labels, lambda f, lab, k=key: _f(_by_g(sc[f], G)[lab][k]))
    lines += ["### Gradient cosine by group size G", "", "| estimator | " + " | ".join(
        f"{f} G={g}" for f in fams for g in s["Gs"]) + " |", "|---|" + "---|" * (len(fams) * len(s["Gs"]))]
    for lab in labels:
        lines.append(f"| {lab} | " + " | ".join(_f(_by_g(sc[f], g)[lab]["cos"]) for f in fams for g in s["Gs"]) + " |")
    lines += [""]
    for f, r in res["race"].items():
        lines += [f"### Race on `{f}`: gap to J* closed (0 = initial policy, 1 = optimal)", "",
                  f"J* = {_f(r['J_opt'])}, initial J = {_f(r['J_init'])}, {r['seeds']} seeds.", "",
                  "| estimator | final | AUC | median updates to 90% (never) | AUC diff to grpo | verdict (Holm) "
                  "| final diff to grpo | verdict (Holm) |", "|---|---|---|---|---|---|---|---|"]
        for lab, e in r["estimators"].items():
            med = "-" if e["median_steps"] is None else f"{e['median_steps']:.0f}"
            ad, fd = e.get("auc_diff"), e.get("final_diff")
            lines.append(f"| {lab} | {_f(e['final'])} | {_f(e['auc'])} | {med} ({e['never']}) | "
                         f"{_signed(ad)} | {e['auc_verdict']} | {_signed(fd)} | {e['final_verdict']} |")
        lines += [""]
    if res["not_runnable"]:
        lines += ["Not run on step records: " + "; ".join(f"`{k}` ({v})" for k, v in res["not_runnable"].items()), ""]
    lines += ["Verdicts: paired by seed, two-sided normal p-values, Holm-adjusted over the estimators of a "
              "family; `better`/`worse` when the adjusted p < 0.05, otherwise `not resolved`. "
              "GRPO batch: `< 1x` means GRPO's own batch already does better, `> Nx` that N batches do not reach it."]
    return "\n".join(lines) + "\n"


def _by_g(fam: dict[str, Any], g: int) -> dict[str, Any]:
    return fam["by_G"][str(g)]  # JSON keys: the results are written, then read back


def _signed(d: dict[str, Any] | None) -> str:
    if not d or d["mean"] is None:
        return "-"
    return f"{d['mean']:+.3f}" + (f" ± {d['se']:.3f}" if d["se"] is not None else "")


def plot(res: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, sc = res["settings"], res["scores"]
    fams = list(sc)
    cols = min(3, len(fams))
    rows = -(-len(fams) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols + 2.6, 3.2 * rows), squeeze=False, sharey=True)
    for ax in axes.ravel()[len(fams):]:
        ax.set_visible(False)
    for ax, f in zip(axes.ravel(), fams, strict=False):
        for i, lab in enumerate(s["estimators"]):
            ys = [_by_g(sc[f], g)[lab]["cos"] for g in s["Gs"]]
            ax.errorbar(s["Gs"], [y["mean"] for y in ys], yerr=[y["se"] or 0 for y in ys], marker="o", ms=3,
                        label=lab, color=f"C{i % 10}", ls="-" if i < 10 else "--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(s["Gs"], [str(g) for g in s["Gs"]])
        ax.set_title(f, fontsize=9)
        ax.set_xlabel("group size G")
    for row in axes:
        row[0].set_ylabel("cosine with exact dJ/dθ")
    handles, labs = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labs, fontsize=6, loc="center right")
    fig.tight_layout(rect=(0, 0, 1 - 2.4 / (3.6 * cols + 2.6), 1))
    fig.savefig(out / "cos_vs_G.png", dpi=110)
    plt.close(fig)
    race = res["race"]
    if not race:
        return
    fig, axes = plt.subplots(1, len(race), figsize=(3.4 * len(race), 3.6), squeeze=False, sharey=True)
    for ax, (f, r) in zip(axes[0], race.items(), strict=True):
        for i, (lab, e) in enumerate(r["estimators"].items()):
            m, se = e["curve_mean"], e["curve_se"]
            xs = list(range(len(m)))
            ax.plot(xs, m, label=lab, color=f"C{i % 10}", marker="o" if len(xs) == 1 else None)
            ax.fill_between(xs, [a - b for a, b in zip(m, se, strict=True)], [a + b for a, b in zip(m, se, strict=True)],
                            alpha=0.15, color=f"C{i % 10}")
        ax.axhline(0.9, color="grey", ls="--", lw=1)
        ax.set_title(f"{f} ({r['seeds']} seeds)", fontsize=9)
        ax.set_xlabel("update")
    axes[0][0].set_ylabel("gap to J* closed (mean ± s.e.)")
    axes[0][-1].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "race.png", dpi=110)
    plt.close(fig)


def write(res: dict[str, Any], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(res, indent=1, default=lambda x: None)
    res = json.loads(text)  # one form (string keys) for the tables and the plots
    (out / "truth.json").write_text(text)
    md = markdown(res)
    (out / "truth.md").write_text(md)
    plot(res, out)
    return md
