"""The ``agentrl`` console script (also ``python -m agentrl``).

Each subcommand lives in its own module and is imported only when used, so ``agentrl --help``
stays fast (importing TRL takes 10-16 s).
"""

from __future__ import annotations

import importlib
import os
import sys

# subcommand -> (module with main(argv) -> int, one-line help)
COMMANDS = {
    "train": ("agentrl.train", "train from a recipe: agentrl train RECIPE.yaml [--field value ...]"),
    "check-recipe": ("agentrl.train:check_main", "validate a recipe without training"),
    "launch": ("agentrl.launch", "run a recipe under `accelerate launch` with the recipe's accelerate config"),
    "eval": ("agentrl.evaluation.cli", "evaluate a checkpoint on an env split, or a collaboration run per benchmark "
             "(full pipeline and Solver alone); paper-style tables"),
    "report": ("agentrl.report", "curves from run folders (seed*/ runs as mean + band), held-out eval, diagnostics"),
    "credit": ("agentrl.credit.compare", "credit tools: agentrl credit compare ROLLOUTS.jsonl"),
    "show": ("agentrl.show", "an episode turn by turn from saved rollouts: agentrl show ROLLOUTS.jsonl --traj ID"),
    "sft": ("agentrl.sft", "supervised warm start on an env's expert trajectories"),
    "demo": ("agentrl.demo", "the CPU demo: SFT warm start, RL, held-out evaluation"),
    "arena": ("agentrl.arena", "race credit modules from one warm start over seeds: held-out curves, paired stats"),
    "bench": ("agentrl.benchmarks", "benchmarks behind one dispatcher: agentrl bench NAME [ARGS]; --help lists them"),
    "serve": ("agentrl.serve_openai", "a checkpoint as an OpenAI-compatible chat endpoint (verifiers, OpenAI SDKs): "
              "agentrl serve CHECKPOINT --port 8000"),
    "truth": ("agentrl.truth.__main__", "credit scored against exact advantages and policy gradients on finite MDPs"),
}

RENAMED = {"eval-collab": "eval"}
"""Old command -> the one that replaced it (a collaboration run is recognised by its collab.json)."""

CREDIT_USAGE = """usage: agentrl credit compare ROLLOUTS.jsonl [--estimators a,b,...] [--set EST.KWARG=VALUE] [--json]

subcommands:
  compare   run several credit estimators on the same saved rollouts (a training run's
            output_dir/rollouts/iter_XXXXX.jsonl, written with save_rollouts: true) and print each
            one's share of steps with a step-level signal, its diagnostics and the rank correlation
            of every pair; `agentrl credit compare --help` for its options.
  list      every registered estimator, what it implements and its kwargs with their defaults
            (`--records step|collab|all`, `--json`)
  advise    measure a run's task properties from its saved rollouts (state recurrence, invalid
            actions and their penalty, reward density, slips and aliased text where the records
            carry state keys) and rank the estimators by the truth factorial's nearest
            conditions, with the evidence; `agentrl credit advise --help`.
  clusters  how BiGPO's cosine clustering partitions the saved fingerprints at several radii,
            raw and centred in their group, against the state identity (pair precision, recall)"""


CREDIT_SUBCOMMANDS = {"compare": None, "advise": "agentrl.truth.advise",
                      "list": "agentrl.credit.compare:list_main", "clusters": "agentrl.credit.cluster_report"}
"""``agentrl credit`` subcommand -> its entry point (None: the ``credit`` command's own, compare)."""


def _usage() -> str:
    lines = ["usage: agentrl [--version] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<13} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "`agentrl COMMAND --help` describes each command. Every flag takes dashes or underscores",
              "(--env-kwargs or --env_kwargs)."]
    return "\n".join(lines)


def _load(target: str):
    mod_name, _, func = target.partition(":")
    return getattr(importlib.import_module(mod_name), func or "main")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version", "version"):
        from agentrl import __version__

        print(f"agentrl {__version__}")
        return 0
    cmd, rest, target = argv[0], argv[1:], None
    if cmd == "credit":
        # `agentrl credit compare ...`: the compare module owns the sub-subcommand.
        if rest and rest[0] in ("-h", "--help", "help"):
            print(CREDIT_USAGE)
            return 0
        if not rest or rest[0] not in CREDIT_SUBCOMMANDS:
            print(f"agentrl credit: unknown subcommand; valid: {', '.join(CREDIT_SUBCOMMANDS)}", file=sys.stderr)
            return 2
        target = CREDIT_SUBCOMMANDS[rest[0]]
        rest = rest[1:]
    if cmd in RENAMED:
        print(f"agentrl: {cmd} is now `agentrl {RENAMED[cmd]}` (see its --help)", file=sys.stderr)
        return 2
    if cmd not in COMMANDS:
        print(f"agentrl: unknown command {cmd!r}; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        fn = _load(target or COMMANDS[cmd][0])
    except (ImportError, AttributeError) as e:
        print(f"agentrl {cmd}: not available in this installation ({e})", file=sys.stderr)
        return 2
    from agentrl.cli_args import every_parser_takes_both_spellings

    try:
        with every_parser_takes_both_spellings():  # --env-kwargs or --env_kwargs, in every command
            rc = fn(rest)
    except SystemExit as e:  # argparse's --help (0) and usage errors (2)
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
