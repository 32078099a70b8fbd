"""Accuracy of a collaboration and of its counterfactual, per benchmark (the hand-off ablation,
arXiv 2603.21563 Table 4 and Sec. 5.5.1: does the last role still gain from the earlier ones?).

Generation is the caller's: ``generate(role, messages) -> text`` samples from ``role.policy``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentrl_envs.tasks.math import MathProblem, verify_response

from .spec import Collaboration, Role, counterfactual, run


def handoff_accuracy(
    c: Collaboration,
    problems: Sequence[MathProblem],
    generate: Callable[[Role, list[dict[str, str]]], str],
    removed: str | None = None,
) -> dict[str, dict[str, float]]:
    """``{source: {"full": acc, "without_<removed>": acc, "n": count}}`` plus an ``"all"`` row.

    ``full`` runs every role; ``without_<removed>`` runs ``counterfactual(c, removed)`` (the
    first role by default: Think-Solve's Solver alone). Accuracy is the 0/1 verifier's mean.
    """
    removed = removed or c.roles[0].name
    cf = counterfactual(c, removed)
    key = f"without_{removed}"
    sums: dict[str, list[float]] = {}
    for p in problems:
        full = verify_response(run(c, p.question, generate)[c.final.name]["raw"], p.answer)
        alone = verify_response(run(cf, p.question, generate)[cf.final.name]["raw"], p.answer)
        for src in (p.source, "all"):
            s = sums.setdefault(src, [0.0, 0.0, 0.0])
            s[0] += full
            s[1] += alone
            s[2] += 1
    return {src: {"full": f / n, key: a / n, "n": int(n)} for src, (f, a, n) in sums.items()}
