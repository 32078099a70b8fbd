"""``agentrl report RUN_DIR... [--out DIR]``: plots from training logs.

Reads each run's ``trainer_state.json`` (the run folder's own, else its newest checkpoint's):
the Trainer's ``log_history`` holds the metrics AgentGRPOTrainer logs (``env/success``,
``credit/singleton_frac``, ...). Writes

* ``learning_curves.png``: success vs training step, one line per run;
* ``steps_to_threshold.png`` (+ JSON): the first step whose success reaches each threshold
  (bipace.md Fig. 1 bottom; lower is better; a run that never reaches one is marked);
* ``singleton_fraction.png``: ``credit/singleton_frac`` vs step, where logged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SUCCESS_KEY = "env/success"
SINGLETON_KEY = "credit/singleton_frac"


class ReportError(Exception):
    pass


def load_log_history(run_dir: str | Path) -> list[dict]:
    run = Path(run_dir)
    if not run.is_dir():
        raise ReportError(f"run folder not found: {run_dir}")
    state = run / "trainer_state.json"
    if not state.is_file():
        ckpts = sorted(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]) if p.name.split("-")[-1].isdigit() else -1)
        state = ckpts[-1] / "trainer_state.json" if ckpts else state
    if not state.is_file():
        raise ReportError(f"{run_dir}: no trainer_state.json in the folder or its checkpoints")
    return json.loads(state.read_text()).get("log_history", [])


def series(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for row in history:
        if key in row and "step" in row:
            xs.append(int(row["step"]))
            ys.append(float(row[key]))
    return xs, ys


def smooth(ys: list[float], window: int) -> list[float]:
    """Trailing moving average (window 1 = raw values)."""
    w = max(int(window), 1)
    return [sum(ys[max(0, i - w + 1): i + 1]) / len(ys[max(0, i - w + 1): i + 1]) for i in range(len(ys))]


def steps_to_threshold(xs: list[int], ys: list[float], threshold: float) -> int | None:
    """First step whose (smoothed) success is >= threshold; None if never reached."""
    for x, y in zip(xs, ys, strict=True):
        if y >= threshold:
            return x
    return None


def make_report(run_dirs: list[str], out: str | Path, thresholds: list[float], window: int = 1,
                labels: list[str] | None = None) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    labels = labels or [Path(r).name for r in run_dirs]
    histories = [load_log_history(r) for r in run_dirs]
    summary: dict = {"runs": {}, "thresholds": thresholds}

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, hist in zip(labels, histories, strict=True):
        xs, ys = series(hist, SUCCESS_KEY)
        ys = smooth(ys, window)
        if xs:
            ax.plot(xs, ys, label=label)
        summary["runs"][label] = {
            "points": len(xs),
            "final_success": ys[-1] if ys else None,
            "peak_success": max(ys) if ys else None,
            "steps_to_threshold": {str(t): steps_to_threshold(xs, ys, t) for t in thresholds},
        }
    ax.set_xlabel("training step")
    ax.set_ylabel("success (train rollouts)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend()
    ax.set_title("learning curves")
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        st = summary["runs"][label]["steps_to_threshold"]
        for j, t in enumerate(thresholds):
            v = st[str(t)]
            x = j + i * width
            if v is None:
                ax.bar(x, 0, width, hatch="//", edgecolor="gray", fill=False)
                ax.text(x, 0, "never", rotation=90, ha="center", va="bottom", fontsize=7)
            else:
                ax.bar(x, v, width, label=label if j == 0 else None)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(thresholds))])
    ax.set_xticklabels([f"{t:.0%}" for t in thresholds])
    ax.set_ylabel("steps to threshold (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "steps_to_threshold.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    any_sf = False
    for label, hist in zip(labels, histories, strict=True):
        xs, ys = series(hist, SINGLETON_KEY)
        if xs:
            any_sf = True
            ax.plot(xs, ys, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("singleton fraction")
    ax.set_title("credit/singleton_frac" + ("" if any_sf else " (not logged by these runs)"))
    if any_sf:
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "singleton_fraction.png", dpi=120)
    plt.close(fig)

    (out / "report.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="agentrl report", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run folders (training output_dir)")
    p.add_argument("--out", default="runs/report", help="folder for the PNGs and report.json")
    p.add_argument("--thresholds", default="0.5,0.7,0.9", help="comma-separated success thresholds")
    p.add_argument("--smooth", type=int, default=1, help="moving-average window over logged points")
    p.add_argument("--labels", default=None, help="comma-separated labels, one per run")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        thresholds = [float(t) for t in args.thresholds.split(",")]
        labels = args.labels.split(",") if args.labels else None
        if labels and len(labels) != len(args.runs):
            raise ReportError("--labels needs one label per run")
        summary = make_report(args.runs, args.out, thresholds, args.smooth, labels)
    except (ReportError, ValueError) as e:
        print(f"agentrl report: {e}", file=sys.stderr)
        return 2
    for label, r in summary["runs"].items():
        st = ", ".join(f"{k}: {v if v is not None else 'never'}" for k, v in r["steps_to_threshold"].items())
        print(f"{label}: final={r['final_success']} peak={r['peak_success']} steps-to-threshold {st}")
    print(f"report: wrote {args.out}/learning_curves.png, steps_to_threshold.png, singleton_fraction.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
