"""``agentrl truth [--quick] [--out DIR] ...`` (also ``python -m agentrl.truth``): every credit
estimator scored against exact advantages and policy gradients on generated finite MDPs, under a
tabular and a log-linear policy, and a learning race with exact J over many seeds. Prints the
tables; writes truth.md, truth.json, cos_vs_G.png and race.png into ``--out``.

The MDPs: the named families (``--families``), or any knob setting of ``MDPConfig``
(``--knobs recurrence=0.8,penalty=0``, one condition per ``--knobs``) and a factorial over one
or two knobs (``--sweep recurrence=0,0.8 --sweep step_reward=0,0.2``)."""

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
    p.add_argument("--families", type=_csv, help="scored MDP families (default: all; with --knobs/--sweep: the "
                   "default MDPConfig)")
    p.add_argument("--knobs", action="append", metavar="K=V,...",
                   help="one condition: MDPConfig knobs over each family (repeat for more conditions)")
    p.add_argument("--sweep", action="append", metavar="K=V1,V2,...",
                   help="a knob's values, crossed with every condition (at most twice: a full factorial)")
    p.add_argument("--policies", type=_csv, help="scored and raced policies (default tabular,loglinear)")
    p.add_argument("--estimators", type=_csv, help="scored estimators, name[:key=value...] (default: all + variants)")
    p.add_argument("--seeds", type=int, help="MDP instances per family (default 10)")
    p.add_argument("--batches", type=int, help="batches per MDP and G (default 20)")
    p.add_argument("--B", type=int, help="tasks per batch (default 4)")
    p.add_argument("--Gs", type=_ints, help="group sizes (default 4,8,16)")
    p.add_argument("--G", type=int, help="headline group size and the race's (default 8)")
    p.add_argument("--race-families", type=_csv, help="raced conditions (default tree,recurrent,aliased,long; with "
                   "--knobs/--sweep every condition; '' none)")
    p.add_argument("--race-estimators", type=_csv, help="raced estimators (default: the LLM arena's eight)")
    p.add_argument("--race-seeds", type=int, help="seeds per estimator and family (default 100)")
    p.add_argument("--steps", type=int, help="updates per race run (default 30)")
    p.add_argument("--lr", type=float, help="Adam learning rate of the race (default 0.3 tabular, 0.1 log-linear)")
    p.add_argument("--workers", type=int, help="processes (default 2)")
    return p


def settings_kwargs(args: argparse.Namespace) -> dict:
    """SuiteSettings kwargs from the flags (``--quick`` first, flags over it); ValueError for bad knobs."""
    from agentrl.truth.conditions import parse_knobs, parse_sweep

    kw = dict(QUICK) if args.quick else {}
    if args.knobs or args.sweep:
        kw["knobs"] = tuple(parse_knobs(x) for x in args.knobs or ())
        kw["sweep"] = tuple(parse_sweep(x) for x in args.sweep or ())
        for k in ("families", "race_families"):  # --quick's families name no knob condition
            kw.pop(k, None)
    for k in ("families", "policies", "estimators", "seeds", "batches", "B", "Gs", "G", "race_families",
              "race_estimators", "race_seeds", "steps", "lr", "workers"):
        v = getattr(args, k)
        if v is not None:
            kw[k] = v
    if "Gs" in kw and "G" not in kw and 8 not in kw["Gs"]:
        kw["G"] = kw["Gs"][0]
    return kw


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from agentrl.truth.output import write
    from agentrl.truth.suite import SuiteSettings, run_suite

    out = Path(args.out)
    if (out / "truth.json").exists() and not args.force:
        print(f"agentrl truth: {out} already holds results (truth.json); pass --force to overwrite or choose another "
              "--out", file=sys.stderr)
        return 2
    try:
        settings = SuiteSettings(**settings_kwargs(args)).check()
    except ValueError as e:
        print(f"agentrl truth: {e}", file=sys.stderr)
        return 2
    res = run_suite(settings, log=lambda m: print(m, flush=True))
    print(write(res, out))
    print(f"truth: wrote {out}/truth.md, truth.json, cos_vs_G.png, race.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
