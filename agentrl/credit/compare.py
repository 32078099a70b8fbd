"""``agentrl credit compare ROLLOUTS [--estimators a,b,...] [--dump FILE] [--plot PNG]``

Runs several credit estimators on the same saved rollouts (a JSONL of step records, the trainer's
``save_rollouts`` output, or a folder of them: a whole run's ``rollouts/``) and prints, per
estimator, the share of steps with a nonzero step-level signal, the share of that signal that
comes from position alone and its diagnostics; then, for every pair, the Spearman rank
correlation and the sign agreement of their advantages; then the steps on which they disagree
most. ``--dump`` writes every record's advantages (JSONL, or CSV by extension), ``--plot`` a
figure. Estimators whose optional record fields are missing are skipped with a note.
``position_only_frac``: README.md, ``agentrl credit compare``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..cli_args import add_env_modules
from ..plugins import import_for
from ..records import is_step_record
from . import available, compute, describe, requirements, validate
from .batch import Batch, sorted_rank

POSITION_FLAG = 0.5
"""position_only_frac above which the table flags an estimator."""


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import rankdata

    ra, rb = rankdata(a), rankdata(b)
    sa, sb = ra.std(), rb.std()
    if sa == 0 or sb == 0:
        return float("nan")
    return float(np.mean((ra - ra.mean()) * (rb - rb.mean())) / (sa * sb))


def sign_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Share of records whose advantages have the same sign (-, 0 or +) under both estimators."""
    return float(np.mean(np.sign(a) == np.sign(b))) if len(a) else float("nan")


def position_only_frac(batch: Batch, step_term_canonical: np.ndarray) -> float:
    """Share of the nonzero step-term records that lie in groups whose rollouts all have the same
    episode return (0 when no record has a step signal). ``step_term_canonical``: Batch order."""
    R = batch.episode_return()
    lo = np.full(batch.n_groups, np.inf)
    hi = np.full(batch.n_groups, -np.inf)
    np.minimum.at(lo, batch.traj_group, R)
    np.maximum.at(hi, batch.traj_group, R)
    flat = (lo == hi)[batch.group]
    signal = np.abs(step_term_canonical) > 1e-12
    return float(np.mean(flat[signal])) if signal.any() else 0.0


def disagreements(records: list[dict], adv: dict[str, np.ndarray], top: int) -> list[dict[str, Any]]:
    """The ``top`` records with the largest spread (max - min) of advantages across estimators."""
    if len(adv) < 2 or top <= 0:
        return []
    A = np.stack(list(adv.values()))
    spread = A.max(axis=0) - A.min(axis=0)
    order = np.argsort(-spread, kind="stable")[:top]
    out = []
    for i in order.tolist():
        r = records[i]
        out.append(
            {
                "group_id": r["group_id"],
                "traj_id": r["traj_id"],
                "t": r["t"],
                "obs": str(r["obs"])[:60],
                "action": str(r["action"])[:40],
                "spread": float(spread[i]),
                "advantages": {n: float(a[i]) for n, a in adv.items()},
            }
        )
    return out


_NOT_ROLLOUTS = ("metrics.jsonl",)
"""JSONL files of a run folder that hold no step records."""


def _is_run_folder(p: Path) -> bool:
    """A training run's output folder (or a checkpoint's parent): what ``agentrl train`` writes there."""
    marks = ("rollouts", "recipe.yaml", "run_info.json", "metrics.jsonl", "trainer_state.json")
    return any((p / m).exists() for m in marks) or any(p.glob("checkpoint-*"))


def load_rollouts(path: str | Path) -> list[dict[str, Any]]:
    """Records of one JSONL file, or of every ``*.jsonl`` in a folder (a run's output folder:
    its ``rollouts/``), files in natural order; the markers of episodes that failed before their
    first step are left out (they have no step to credit). With several files each one is a training batch:
    its group and trajectory ids are prefixed with the file's name, so groups of different
    iterations never mix (credit compares only inside a group)."""
    from ..records import read_jsonl

    p = Path(path)
    if p.is_dir() and p.name.startswith("checkpoint-") and _is_run_folder(p.parent):
        p = p.parent  # a checkpoint's run: its rollouts
    if p.is_dir() and _is_run_folder(p):  # its rollouts/ only: never its metrics.jsonl
        p = p / "rollouts"
        if not any(p.glob("*.jsonl")):
            raise ValueError(f"{path} has no saved rollouts ({p} is {'empty' if p.is_dir() else 'missing'}): "
                             "train with save_rollouts: true to keep each iteration's episodes")
    if p.name in _NOT_ROLLOUTS:
        raise ValueError(f"{path} is a run's {p.name}, not saved rollouts: give the run folder or its "
                         "rollouts/iter_XXXXX.jsonl (a run keeps them with save_rollouts: true)")
    if p.is_dir():
        files = [f for f in p.glob("*.jsonl") if f.name not in _NOT_ROLLOUTS]
        if not files:
            raise ValueError(f"{path}: no saved rollouts (*.jsonl, or a run folder's rollouts/: train with "
                             "save_rollouts: true)")
        files = [files[i] for i in np.argsort(sorted_rank([f.name for f in files]), kind="stable")]
    else:
        files = [p]
    records: list[dict[str, Any]] = []
    for f in files:
        recs = list(read_jsonl(f))
        if not all(isinstance(r, dict) for r in recs):
            raise ValueError(f"{f}: every line must be a JSON object")
        recs = [r for r in recs if is_step_record(r)]  # episodes that never stepped
        if len(files) > 1:
            for r in recs:
                for k in ("group_id", "traj_id"):
                    if k in r:
                        r[k] = f"{f.stem}/{r[k]}"
        records += recs
    return records


def run(
    records: list[dict[str, Any]], names: list[str], kw: dict[str, dict[str, Any]], top: int = 5
) -> dict[str, Any]:
    """Compute every estimator on ``records``; returns results, skipped names, pairwise Spearman
    and sign agreement, position-only shares and the top disagreements."""
    batch = Batch.from_records(records)
    present = {
        f
        for f in ("action_token_ids", "fingerprint", "state_sig", "action_sig")
        if all(r.get(f) is not None for r in records)
    }
    results, skipped = {}, {}
    for name in names:
        need = requirements(name, **kw.get(name, {}))
        # rtmc only prefers env signatures; it falls back to the action history by itself
        lacking = sorted(need - present) if name != "rtmc" else []
        if lacking:
            skipped[name] = f"records lack {', '.join(lacking)}"
            continue
        results[name] = compute(name, batch, **kw.get(name, {}))
    adv = {n: r.step_advantages for n, r in results.items()}
    pairs = {a: {b: (adv[a], adv[b]) for b in adv} for a in adv}
    return {
        "results": results,
        "skipped": skipped,
        "spearman": {a: {b: _spearman(x, y) for b, (x, y) in row.items()} for a, row in pairs.items()},
        "sign_agreement": {
            a: {b: sign_agreement(x, y) for b, (x, y) in row.items()} for a, row in pairs.items()
        },
        "position_only": {n: position_only_frac(batch, r.step_term[batch.order]) for n, r in results.items()},
        "disagreements": disagreements(records, adv, top),
    }


def dump(path: str | Path, records: list[dict], results: dict[str, Any]) -> None:
    """One row per record (input order): its ids, then per estimator its advantage and step term
    (columns ``NAME`` and ``NAME.step``). JSONL, or CSV when the name ends in .csv."""
    rows = []
    for i, r in enumerate(records):
        row = {"group_id": r["group_id"], "traj_id": r["traj_id"], "t": r["t"]}
        for n, res in results.items():
            row[n] = float(res.step_advantages[i])
            row[f"{n}.step"] = float(res.step_term[i])
        rows.append(row)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="") as f:
        if p.suffix == ".csv":
            w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["group_id", "traj_id", "t"])
            w.writeheader()
            w.writerows(rows)
        else:
            f.writelines(json.dumps(row) + "\n" for row in rows)


def mean_by_step(records: list[dict], adv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step indices t present and the mean advantage at each (the plot's right panel)."""
    t = np.asarray([r["t"] for r in records], dtype=np.int64)
    ts, inv = np.unique(t, return_inverse=True)
    return ts, np.bincount(inv, weights=adv) / np.bincount(inv)


def plot(path: str | Path, records: list[dict], results: dict[str, Any]) -> None:
    """Left: histogram of each estimator's advantages; right: mean advantage by step index."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (h, m) = plt.subplots(1, 2, figsize=(11, 4))
    for n, res in results.items():
        h.hist(res.step_advantages, bins=40, histtype="step", label=n)
        ts, mean = mean_by_step(records, res.step_advantages)
        m.plot(ts, mean, marker=".", label=n)
    h.set(xlabel="advantage", ylabel="records", title="advantages")
    m.set(xlabel="step t", ylabel="mean advantage", title="mean advantage by step")
    m.axhline(0.0, color="gray", lw=0.5)
    h.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fmt(v: float) -> str:
    return "nan" if np.isnan(v) else format(v, ".3f")


def _print_tables(out: dict[str, Any], n_records: int, source: str) -> None:
    res = out["results"]
    print(f"{n_records} step records from {source}\n")
    print(f"{'estimator':<12} {'nonzero step signal':>20} {'position only':>14}  diagnostics")
    for n, r in res.items():
        d = ", ".join(f"{k}={v:.4g}" for k, v in r.diagnostics.items() if k != "step_signal_frac")
        pos = out["position_only"][n]
        flag = " !" if pos > POSITION_FLAG else ""
        print(f"{n:<12} {r.diagnostics['step_signal_frac']:>20.3f} {pos:>12.3f}{flag:<2}  {d}")
    for n, why in out["skipped"].items():
        print(f"{n:<12} {'skipped':>20}  {why}")
    if any(p > POSITION_FLAG for p in out["position_only"].values()):
        print(
            f"! more than {POSITION_FLAG:.0%} of the step signal lies in groups with equal episode returns: "
            "it comes from position in the episode, not from outcomes"
        )
    names = list(res)
    for title, key in (("Spearman rank correlation", "spearman"), ("sign agreement", "sign_agreement")):
        if names:
            print(f"\n{title} of step advantages")
            print(" " * 12 + "".join(f"{n[:11]:>12}" for n in names))
            for a in names:
                print(f"{a:<12}" + "".join(f"{_fmt(out[key][a][b]):>12}" for b in names))
    if out["disagreements"]:
        print("\nsteps with the largest spread of advantages")
        for d in out["disagreements"]:
            vals = ", ".join(f"{n}={v:+.3f}" for n, v in d["advantages"].items())
            print(f"  {d['traj_id']} t={d['t']} spread={d['spread']:.3f}: {vals} | obs {d['obs']!r}")


def _json(out: dict[str, Any], n_records: int) -> str:
    def clean(m: dict) -> dict:
        return {
            a: {b: (None if np.isnan(v) else round(v, 4)) for b, v in row.items()} for a, row in m.items()
        }

    return json.dumps(
        {
            "records": n_records,
            "estimators": {
                n: {
                    "step_signal_frac": r.diagnostics["step_signal_frac"],
                    "position_only_frac": out["position_only"][n],
                    "diagnostics": r.diagnostics,
                }
                for n, r in out["results"].items()
            },
            "skipped": out["skipped"],
            "spearman": clean(out["spearman"]),
            "sign_agreement": clean(out["sign_agreement"]),
            "disagreements": out["disagreements"],
        },
        indent=1,
    )


def run_credit(path: str | Path) -> tuple[str | None, dict[str, Any]]:
    """The estimator a run trained with and its kwargs (gamma + credit_kwargs), from the
    ``recipe.yaml`` of the run folder that ``path`` is (or a checkpoint, its rollouts/ or a file in
    them); (None, {}) when there is none."""
    import yaml

    p = Path(path).resolve()
    for folder in [p, *p.parents][:3]:
        f = folder / "recipe.yaml"
        if not f.is_file():
            continue
        try:
            data = yaml.safe_load(f.read_text()) or {}
        except yaml.YAMLError:
            return None, {}
        if isinstance(data, dict) and data.get("credit"):
            kw = {"gamma": data["gamma"]} if "gamma" in data else {}
            kw.update(data.get("credit_kwargs") or {})
            algo_kw = data.get("algorithm_kwargs") or {}
            if data.get("algorithm") == "appo" and data["credit"] == "appo" and "grouping" in algo_kw:
                kw["grouping"] = algo_kw["grouping"]  # the APPO algorithm passes its own to the estimator
            return str(data["credit"]), kw
        return None, {}
    return None, {}


def with_run_settings(names: list[str], kw: dict[str, dict[str, Any]], run_name: str | None,
                      run_kw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each estimator's kwargs: ``--set``'s, over the run's own ``credit_kwargs`` for the run's
    estimator, over the run's ``gamma`` for every estimator that takes one (the same discount as
    the run's advantages)."""
    out = {n: dict(v) for n, v in kw.items()}
    for n in names:
        takes = describe(n)["kwargs"] if n in available("all") else {}
        base = dict(run_kw) if n == run_name else {k: v for k, v in run_kw.items() if k == "gamma"}
        out[n] = {**{k: v for k, v in base.items() if k in takes}, **out.get(n, {})}
    return {n: v for n, v in out.items() if v or n in kw}


def _parse_kw(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--set bigpo.eps=0.2`` -> {"bigpo": {"eps": 0.2}} (values parsed as YAML scalars)."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for it in items:
        if "=" not in it or "." not in it.split("=", 1)[0]:
            raise ValueError(f"--set expects ESTIMATOR.KWARG=VALUE, got {it!r}")
        lhs, val = it.split("=", 1)
        est, key = lhs.split(".", 1)
        out.setdefault(est, {})[key] = yaml.safe_load(val)
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="agentrl credit compare",
        description="Compare credit estimators on saved rollouts (JSONL step records). Given a run folder (or a "
                    "file in it), its recipe.yaml's env_modules are imported and its estimator runs with the run's "
                    "credit_kwargs; every estimator that takes gamma gets the run's.",
    )
    ap.add_argument("rollouts", help="JSONL file of step records, a folder of them, or a run folder (its rollouts/)")
    ap.add_argument(
        "--estimators", default=None, help=f"comma-separated names (default: every registered one: "
                                           f"{', '.join(available())}, and a plug-in's)"
    )
    ap.add_argument(
        "--set", action="append", default=[], metavar="EST.KWARG=VALUE", help="estimator kwarg, repeatable"
    )
    ap.add_argument("--top", type=int, default=5, help="how many most-disputed steps to list (default 5)")
    ap.add_argument(
        "--dump", default=None, metavar="FILE", help="write per-record advantages (.jsonl or .csv)"
    )
    ap.add_argument("--plot", default=None, metavar="PNG", help="write a figure of the advantages")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    return add_env_modules(ap)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        import_for(args.rollouts, args.env_modules)  # the run's plug-ins, then the flag's: their estimators
        run_name, run_kw = run_credit(args.rollouts)
        names = (
            [s.strip() for s in args.estimators.split(",") if s.strip()] if args.estimators else available()
        )
        kw = _parse_kw(args.set)
        for n in kw:
            if n not in names:
                raise ValueError(f"--set names estimator {n!r}, which is not among --estimators")
        kw = with_run_settings(names, kw, run_name, run_kw)
        for n in names:
            validate(n, **kw.get(n, {}))
        if args.top < 0:
            raise ValueError(f"--top must be >= 0, got {args.top}")
        records = load_rollouts(args.rollouts)
        if not records:
            raise ValueError(f"{args.rollouts}: no step records")
        out = run(records, names, kw, args.top)
        if args.dump:
            dump(args.dump, records, out["results"])
        if args.plot:
            plot(args.plot, records, out["results"])
    except (OSError, ValueError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"agentrl credit compare: error: {msg}", file=sys.stderr)
        return 2
    if args.json:
        print(_json(out, len(records)))
    else:
        _print_tables(out, len(records), args.rollouts)
    return 0


def rollouts_command(prog: str, path: str, compute, show, as_json: bool) -> int:
    """The body of a command over saved rollouts (``credit clusters``, ``credit advise``): load
    them, ``compute(records)``, print one JSON object or ``show(out, path)``; a bad path, file or
    record is one line on stderr and exit code 2."""
    try:
        records = load_rollouts(path)
        if not records:
            raise ValueError(f"{path}: no step records")
        out = compute(records)
    except (OSError, ValueError) as e:
        print(f"{prog}: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(out))
    else:
        show(out, path)
    return 0


def list_main(argv: list[str] | None = None) -> int:
    """``agentrl credit list [--records step|collab|all] [--json]``: every registered estimator,
    what it implements and its kwargs with their defaults (plug-ins too, with --env-modules)."""
    from . import RECORD_KINDS

    ap = argparse.ArgumentParser(prog="agentrl credit list",
                                 description="The registered credit estimators: name, what it implements, kwargs.")
    ap.add_argument("--records", choices=RECORD_KINDS, default="step",
                    help="estimators over step records (default), collaboration records, or all")
    ap.add_argument("--json", action="store_true", help="one JSON object {name: {paper, kwargs: {k: default}}}")
    add_env_modules(ap)
    args = ap.parse_args(argv)
    try:
        import_for(None, args.env_modules)
    except (ImportError, OSError, ValueError) as e:
        print(f"agentrl credit list: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    rows = {n: describe(n) for n in available(args.records)}
    if args.json:
        print(json.dumps({n: {"paper": d["paper"], "kwargs": {k: v[0] for k, v in d["kwargs"].items()}}
                          for n, d in rows.items()}, default=str))
        return 0
    for n, d in rows.items():
        kws = ", ".join(f"{k}={v[0]}" for k, v in d["kwargs"].items())
        print(f"{n:<12} {d['paper']}\n{'':<12} {kws}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
