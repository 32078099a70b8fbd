"""``agentrl credit compare ROLLOUTS.jsonl [--estimators a,b,...]``

Runs several credit estimators on the same saved rollouts (JSONL of step records, the trainer's
``save_rollouts`` output) and prints, per estimator, the share of steps with a nonzero step-level
signal and its diagnostics, then the Spearman rank correlation of every pair's advantages.
Estimators whose optional record fields are missing from the file are skipped with a note.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from . import available, compute, requirements, validate
from .batch import Batch


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import rankdata

    ra, rb = rankdata(a), rankdata(b)
    sa, sb = ra.std(), rb.std()
    if sa == 0 or sb == 0:
        return float("nan")
    return float(np.mean((ra - ra.mean()) * (rb - rb.mean())) / (sa * sb))


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


def run(records: list[dict[str, Any]], names: list[str], kw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Compute every estimator on ``records``; returns results, skipped names and correlations."""
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
    corr = {
        a: {b: _spearman(results[a].step_advantages, results[b].step_advantages) for b in results}
        for a in results
    }
    return {"results": results, "skipped": skipped, "spearman": corr}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="agentrl credit compare",
        description="Compare credit estimators on saved rollouts (JSONL step records).",
    )
    ap.add_argument("rollouts", help="JSONL file of step records (one JSON object per line)")
    ap.add_argument(
        "--estimators", default=None, help=f"comma-separated names (default: all of {', '.join(available())})"
    )
    ap.add_argument(
        "--set", action="append", default=[], metavar="EST.KWARG=VALUE", help="estimator kwarg, repeatable"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args(argv)
    try:
        names = (
            [s.strip() for s in args.estimators.split(",") if s.strip()] if args.estimators else available()
        )
        kw = _parse_kw(args.set)
        for n in names:
            validate(n, **kw.get(n, {}))
        for n in kw:
            if n not in names:
                raise ValueError(f"--set names estimator {n!r}, which is not among --estimators")
        from ..records import read_jsonl

        records = list(read_jsonl(args.rollouts))
        if not records:
            raise ValueError(f"{args.rollouts}: no step records")
        if not all(isinstance(r, dict) for r in records):
            raise ValueError(f"{args.rollouts}: every line must be a JSON object")
        out = run(records, names, kw)
    except (OSError, ValueError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"agentrl credit compare: error: {msg}", file=sys.stderr)
        return 2
    res, corr = out["results"], out["spearman"]
    if args.json:
        print(
            json.dumps(
                {
                    "records": len(records),
                    "estimators": {
                        n: {
                            "step_signal_frac": r.diagnostics["step_signal_frac"],
                            "diagnostics": r.diagnostics,
                        }
                        for n, r in res.items()
                    },
                    "skipped": out["skipped"],
                    "spearman": {
                        a: {b: (None if np.isnan(v) else round(v, 4)) for b, v in row.items()}
                        for a, row in corr.items()
                    },
                },
                indent=1,
            )
        )
        return 0
    print(f"{len(records)} step records from {args.rollouts}\n")
    print(f"{'estimator':<12} {'nonzero step signal':>20}  diagnostics")
    for n, r in res.items():
        d = ", ".join(f"{k}={v:.4g}" for k, v in r.diagnostics.items() if k != "step_signal_frac")
        print(f"{n:<12} {r.diagnostics['step_signal_frac']:>20.3f}  {d}")
    for n, why in out["skipped"].items():
        print(f"{n:<12} {'skipped':>20}  {why}")
    if res:
        print("\nSpearman rank correlation of step advantages")
        names_ok = list(res)
        print(" " * 12 + "".join(f"{n[:11]:>12}" for n in names_ok))
        for a in names_ok:
            cells = "".join(
                f"{'nan' if np.isnan(corr[a][b]) else format(corr[a][b], '.3f'):>12}" for b in names_ok
            )
            print(f"{a:<12}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
