"""``agentrl truth [--quick] [--out DIR] ...`` (also ``python -m agentrl.truth``): every credit
estimator scored against exact advantages and policy gradients on generated finite MDPs, and a
learning race with exact J over many seeds. Prints the tables; writes truth.md, truth.json,
cos_vs_G.png and race.png into ``--out``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

QUICK = dict(families=("tree", "recurrent"), estimators=("grpo", "gigpo", "rtmc"), seeds=2, batches=4, Gs=(4, 8),
             race_families=("recurrent",), race_estimators=("grpo", "gigpo", "rtmc"), race_seeds=4, steps=5)
"""``--quick``: seconds, for the test suite (the numbers are too few to conclude anything)."""


def _csv(s: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in s.split(",") if x.strip())


def _ints(s: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in _csv(s))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentrl truth", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/truth", help="run folder (refused if it holds results, unless --force)")
    p.add_argument("--force", action="store_true", help="overwrite the results in --out")
    p.add_argument("--quick", action="store_true", help="a few seconds: 2 families, 3 estimators, few seeds")
    p.add_argument("--families", type=_csv, help="scored MDP families (default: all)")
    p.add_argument("--estimators", type=_csv, help="scored estimators, name[:key=value...] (default: all + variants)")
    p.add_argument("--seeds", type=int, help="MDP instances per family (default 10)")
    p.add_argument("--batches", type=int, help="batches per MDP and G (default 20)")
    p.add_argument("--B", type=int, help="tasks per batch (default 4)")
    p.add_argument("--Gs", type=_ints, help="group sizes (default 4,8,16)")
    p.add_argument("--G", type=int, help="headline group size and the race's (default 8)")
    p.add_argument("--race-families", type=_csv, help="raced families (default tree,recurrent,aliased,long; '' none)")
    p.add_argument("--race-estimators", type=_csv, help="raced estimators (default: the LLM arena's eight)")
    p.add_argument("--race-seeds", type=int, help="seeds per estimator and family (default 100)")
    p.add_argument("--steps", type=int, help="updates per race run (default 30)")
    p.add_argument("--lr", type=float, help="Adam learning rate of the race (default 0.3)")
    p.add_argument("--workers", type=int, help="processes (default 2)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from agentrl.truth.output import write
    from agentrl.truth.suite import SuiteSettings, run_suite

    kw = dict(QUICK) if args.quick else {}
    for k in ("families", "estimators", "seeds", "batches", "B", "Gs", "G", "race_families", "race_estimators",
              "race_seeds", "steps", "lr", "workers"):
        v = getattr(args, k)
        if v is not None:
            kw[k] = v
    if "Gs" in kw and "G" not in kw and 8 not in kw["Gs"]:
        kw["G"] = kw["Gs"][0]
    out = Path(args.out)
    if (out / "truth.json").exists() and not args.force:
        print(f"agentrl truth: {out} already holds results (truth.json); pass --force to overwrite or choose another "
              "--out", file=sys.stderr)
        return 2
    try:
        settings = SuiteSettings(**kw).check()
    except ValueError as e:
        print(f"agentrl truth: {e}", file=sys.stderr)
        return 2
    res = run_suite(settings, log=lambda m: print(m, flush=True))
    print(write(res, out))
    print(f"truth: wrote {out}/truth.md, truth.json, cos_vs_G.png, race.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
