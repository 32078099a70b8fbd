"""The planner expert on the task-relevant sub-problem.

``AlfredExpert(expert_type="planner")`` plans on the whole game after every step (0.1-90 s per
call on ~45-object kitchens). Distractor objects cannot change what the agent must do (no
capacity constraints in ``alfred.pddl``; objects matter to the goal only through their type), so
the same planner runs on the current state restricted to the goal's object types plus what the
agent holds, with every receptacle and location kept and names unchanged: the plan's commands
are the full game's. Callers still check each command against the admissible list. Why it is
sound: docs/environments.md, "ALFWorld".
"""

from __future__ import annotations

import re

_GOAL_TYPE_RE = re.compile(r"\(\s*objectType\s+\?\w+\s+(\w+?)Type\s*\)", re.IGNORECASE)
_DECL_RE = re.compile(r"^\s*(\S+)\s+-\s+(otype|rtype)\s*$", re.IGNORECASE | re.MULTILINE)


def goal_text(problem: str) -> str:
    i = problem.find("(:goal")
    if i < 0:
        raise ValueError("PDDL problem has no (:goal ...)")
    return problem[i:]


def reduced_problem(problem: str, facts) -> str:
    """PDDL problem for the current ``facts`` restricted to task-relevant objects.

    Args:
        problem: the game's original problem text (for the goal and the type constants).
        facts: current positive facts (TextWorld Propositions with the PDDL names).
    """
    facts = list(facts)   # may be a generator (State.facts)
    goal = goal_text(problem)
    goal_types = {t.lower() + "type" for t in _GOAL_TYPE_RE.findall(goal)}
    object_type = {}
    held = set()
    for f in facts:
        name = f.name.lower()
        if name == "objecttype":
            object_type[f.arguments[0].name] = f.arguments[1].name.lower()
        elif name == "holds":
            held.add(f.arguments[1].name)
    keep_objects = {o for o, t in object_type.items() if t in goal_types} | held

    decls: dict[str, str] = {}
    init = []
    for f in facts:
        if f.name.startswith("new-axiom@"):
            continue
        args = f.arguments
        if any(v.type == "object" and v.name not in keep_objects for v in args):
            continue
        for v in args:
            decls[v.name] = v.type
        init.append("(" + " ".join([f.name] + [v.name for v in args]) + ")")
    for name, typ in _DECL_RE.findall(problem):   # domain actions name SinkBasinType, KnifeType...
        decls.setdefault(name.lower(), typ.lower())
    objects = "\n        ".join(f"{n} - {t}" for n, t in sorted(decls.items()))
    inits = "\n        ".join(sorted(init))
    return (f"(define (problem replan)\n    (:domain alfred)\n"
            f"    (:objects\n        {objects}\n    )\n"
            f"    (:init\n        {inits}\n    )\n{goal}")


class SubproblemPlanner:
    """Fast Downward (through TextWorld) on :func:`reduced_problem`; own libdownward copy."""

    def __init__(self):
        import fast_downward

        self._lib = fast_downward.load_lib()

    def plan(self, pddl_env) -> list[str]:
        """Plan (ALFWorld commands) from the current state of a loaded, reset ``PddlEnv``."""
        from textworld.envs.pddl import logic as pddl_logic

        problem = reduced_problem(pddl_env._game_data["pddl_problem"], pddl_env._pddl_state.facts)
        state = pddl_logic.PddlState(self._lib, problem, pddl_env._logic)
        return list(state.replan(pddl_env._entity_infos) or [])

    def plan_facts(self, problem: str, facts, domain: str, templates: dict[str, str],
                   names: dict[str, str]) -> list[str]:
        """:meth:`plan` without a ``PddlEnv`` (the native engine's state): the game's problem
        text, the current facts (Propositions), the domain text, the actions' command templates
        and the entities' names. ``PddlState`` reads from the game logic only the domain, the
        type registry and the templates, so a :class:`_PlanLogic` stands in for the parsed
        grammar (~1 s of TatSu per game)."""
        from types import SimpleNamespace

        from textworld.envs.pddl import logic as pddl_logic

        state = pddl_logic.PddlState(self._lib, reduced_problem(problem, facts),
                                     _PlanLogic(domain, templates))
        infos = {k: SimpleNamespace(name=v) for k, v in names.items()}
        return list(state.replan(infos) or [])

    def close(self):
        # No dlclose (fast_downward.close_lib): unloading libdownward while TextWorld objects
        # still point into it segfaults at interpreter exit. PddlEnv never unloads its copy either.
        self._lib = None


class _PlanLogic:
    """What ``PddlState`` and its ``replan`` read of a TextWorld ``GameLogic``: ``domain``,
    ``types`` (it registers the task's types there) and ``actions[name].template``."""

    def __init__(self, domain: str, templates: dict[str, str]):
        from types import SimpleNamespace

        import textworld

        self.domain = domain
        self.types = textworld.logic.TypeHierarchy()
        self.actions = {k: SimpleNamespace(template=v) for k, v in templates.items()}
