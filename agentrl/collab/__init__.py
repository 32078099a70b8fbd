"""Collaborations of several roles, each played by a named policy (see ``spec``).

``think_solve()`` is the CCPO/SEPO paper's Thinker -> Solver collaboration (arXiv 2603.21563);
``counterfactual(c, role)`` removes one role for CCPO's leave-one-role-out outcome.
"""

from . import context  # noqa: F401  (registers the 'role' context)
from .spec import (
    CLEANERS,
    CollabError,
    Collaboration,
    Role,
    clean_output,
    counterfactual,
    from_dict,
    placeholders,
    render,
    role_messages,
    run,
    to_dict,
    validate,
)
from .think_solve import SOLO_TEMPLATE, SOLVER_TEMPLATE, THINKER_TEMPLATE, solo_solver, think_solve

__all__ = [
    "CLEANERS",
    "Collaboration",
    "CollabError",
    "Role",
    "SOLO_TEMPLATE",
    "SOLVER_TEMPLATE",
    "THINKER_TEMPLATE",
    "clean_output",
    "counterfactual",
    "from_dict",
    "placeholders",
    "render",
    "role_messages",
    "run",
    "solo_solver",
    "think_solve",
    "to_dict",
    "validate",
]
