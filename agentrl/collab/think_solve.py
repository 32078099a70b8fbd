"""The Think-Solve collaboration (arXiv 2603.21563 Sec. 3 and App. C.2).

The Thinker reads the problem and writes a plan without the final answer (any ``\\boxed{}`` it
writes anyway is removed before the Solver sees it); the Solver reads the problem and the plan
and answers in ``\\boxed{}``. With the Thinker removed, the solo Solver reads the problem only
(the counterfactual of App. C.2 Eq. 23, sampled independently of the Thinker).
"""

from __future__ import annotations

from .spec import Collaboration, Role, counterfactual, validate

ANSWER_FORMAT = "Output the final answer within \\boxed{}."
"""The closing instruction of every answering prompt (the authors' training prompts end so)."""

THINKER_TEMPLATE = (
    "You are the Thinker in a two-person team. Read the problem below and write the key idea "
    "and a step-by-step plan a teammate can follow to solve it. Do not carry the plan out to "
    "the end: do not state the final answer and do not use \\boxed{}. The Solver will finish "
    "the work from your plan.\n\nProblem:\n{problem}"
)
SOLVER_TEMPLATE = (
    "You are the Solver in a two-person team. The Thinker has written a plan for the problem "
    "below.\n\nProblem:\n{problem}\n\nThinker's plan:\n{thinker}\n\nCheck the plan, use what is "
    "right in it and solve the problem step by step. " + ANSWER_FORMAT
)
SOLO_TEMPLATE = "Problem:\n{problem}\n\nSolve the problem step by step. " + ANSWER_FORMAT


def think_solve(thinker_policy: str = "thinker", solver_policy: str = "solver") -> Collaboration:
    """Thinker -> Solver. Give both roles the same policy name for the one-model baseline."""
    return validate(
        Collaboration(
            "think_solve",
            (
                Role("thinker", thinker_policy, THINKER_TEMPLATE, clean="remove_boxed"),
                Role("solver", solver_policy, SOLVER_TEMPLATE, without={"thinker": SOLO_TEMPLATE}),
            ),
        )
    )


def solo_solver(c: Collaboration | None = None) -> Collaboration:
    """The counterfactual collaboration: the Solver alone on the problem."""
    return counterfactual(c or think_solve(), "thinker")
