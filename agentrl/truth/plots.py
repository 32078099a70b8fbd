"""The plots of ``agentrl truth``, per policy: ``cos_vs_G{suffix}.png`` (gradient cosine by group
size, one panel per condition) and ``race{suffix}.png`` (learning curves with +-1 s.e. bands);
the suffix is empty for the tabular policy, ``_loglinear`` for the log-linear one."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def suffix(policy: str) -> str:
    return "" if policy == "tabular" else f"_{policy}"


def plot(res: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    for policy, sc in res["scores"].items():
        plot_cos(sc, res["settings"], out / f"cos_vs_G{suffix(policy)}.png")
        if res["race"].get(policy):
            plot_race(res["race"][policy], out / f"race{suffix(policy)}.png")


def plot_cos(sc: dict[str, Any], s: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fams = list(sc)
    cols = min(3, len(fams))
    rows = -(-len(fams) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols + 2.6, 3.2 * rows), squeeze=False, sharey=True)
    for ax in axes.ravel()[len(fams):]:
        ax.set_visible(False)
    for ax, f in zip(axes.ravel(), fams, strict=False):
        for i, lab in enumerate(s["estimators"]):
            ys = [sc[f]["by_G"][str(g)][lab]["cos"] for g in s["Gs"]]
            ax.errorbar(s["Gs"], [y["mean"] for y in ys], yerr=[y["se"] or 0 for y in ys], marker="o", ms=3,
                        label=lab, color=f"C{i % 10}", ls="-" if i < 10 else "--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(s["Gs"], [str(g) for g in s["Gs"]])
        ax.set_title(f, fontsize=8)
        ax.set_xlabel("group size G")
    for row in axes:
        row[0].set_ylabel("cosine with exact dJ/dθ")
    handles, labs = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labs, fontsize=6, loc="center right")
    fig.tight_layout(rect=(0, 0, 1 - 2.4 / (3.6 * cols + 2.6), 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_race(race: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(race), figsize=(3.4 * len(race), 3.6), squeeze=False, sharey=True)
    for ax, (f, r) in zip(axes[0], race.items(), strict=True):
        for i, (lab, e) in enumerate(r["estimators"].items()):
            m, se = e["curve_mean"], e["curve_se"]
            xs = list(range(len(m)))
            ax.plot(xs, m, label=lab, color=f"C{i % 10}", marker="o" if len(xs) == 1 else None)
            ax.fill_between(xs, [a - b for a, b in zip(m, se, strict=True)], [a + b for a, b in zip(m, se, strict=True)],
                            alpha=0.15, color=f"C{i % 10}")
        ax.axhline(0.9, color="grey", ls="--", lw=1)
        ax.set_title(f"{f} ({r['seeds']} seeds)", fontsize=8)
        ax.set_xlabel("update")
    axes[0][0].set_ylabel("gap to J* closed (mean ± s.e.)")
    axes[0][-1].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
