"""A native ALFWorld engine: plays a game as TextWorld's PDDL stack does, without it.

TextWorld grounds the PDDL problem with Fast Downward's translator at every reset (~85% of a
~700 ms reset) and renders every observation from a grammar (~70 ms a step). This module plays
the same game from a compact form built once per game and process
(:mod:`agentrl_envs.alfworld.compiled`, ~3 ms), applying the ALFWorld domain's actions directly
and rendering the grammar's rules by hand-written functions. It accepts only the ``alfred.pddl``
domain and ``alfred.twl2`` grammar of alfworld 0.4.2 (compared by hash), else raises
:class:`UnsupportedGame` and the caller falls back to TextWorld. What it reproduces of TextWorld
(facts, operators, commands, text; each checked by ``tests/envs/test_alfworld_native.py`` on
every shipped game): docs/environments.md, "ALFWorld".
"""

from __future__ import annotations

from collections import defaultdict

from agentrl_envs.alfworld.compiled import CompiledGame, UnsupportedGame, load_game
from agentrl_envs.alfworld.engine import DYNAMIC_PREDICATES

__all__ = ["NativeEngine", "UnsupportedGame", "display_list", "load_game"]

WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
HELP_TEXT = (
    "Available commands:\n"
    "  look:                             look around your current location\n"
    "  inventory:                        check your current inventory\n"
    "  go to (receptacle):               move to a receptacle\n"
    "  open (receptacle):                open a receptacle\n"
    "  close (receptacle):               close a receptacle\n"
    "  take (object) from (receptacle):  take an object from a receptacle\n"
    "  move (object) to (receptacle):  place an object in or on a receptacle\n"
    "  examine (something):              examine a receptacle or an object\n"
    "  use (object):                     use an object\n"
    "  heat (object) with (receptacle):  heat an object using a receptacle\n"
    "  clean (object) with (receptacle): clean an object using a receptacle\n"
    "  cool (object) with (receptacle):  cool an object using a receptacle\n"
    "  slice (object) with (object):     slice an object using a sharp object\n")
# Receptacle types of the tool actions and object types of SliceObject (alfred.pddl).
TOOL_RTYPE = {"clean": "sinkbasintype", "heat": "microwavetype", "cool": "fridgetype"}
TOOL_PROP = {"clean": "cleanable", "heat": "heatable", "cool": "coolable"}
KNIFE_TYPES = ("knifetype", "butterknifetype")
# Action templates of alfred.twl2 (the planner turns plan steps into commands with them).
TEMPLATES = {
    "gotolocation": "go to [{r.name | receptacleatlocation(r:receptacle, lend:location)}]",
    "openobject": "open {r}", "closeobject": "close {r}", "pickupobject": "take {o} from {r}",
    "pickupobjectfromreceptacleobject": "take {o} from {r}",
    "pickupemptyreceptacleobject": "take {o} from {r}",
    "pickupfullreceptacleobject": "take {outerr} from {r}", "putobject": "move {o} to {r}",
    "putobjectinreceptacleobject": "put {o} into {outero}",
    "putemptyreceptacleobjectinreceptacle": "move {o} to {r}",
    "putfullreceptacleobjectinreceptacle": "put {outero} in {r}", "inventory": "inventory",
    "examinereceptacle": "examine {r}", "examineobject": "examine {o}", "toggleobject": "use {o}",
    "heatobject": "heat {o} with {r}", "cleanobject": "clean {o} with {r}",
    "coolobject": "cool {o} with {r}", "sliceobject": "slice {co} with {ko}", "look": "look",
    "help": "help"}



def display_list(items: list[str]) -> str:
    """The grammar's list: "nothing", "a", "a, and b", "a, b, and c"."""
    if not items:
        return "nothing"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


# --- one play ----------------------------------------------------------------------------------
class NativeEngine:
    """Plays compiled games: ``load(game_file)``, ``reset()``, ``step(command)``; after each,
    ``feedback``, ``admissible`` (sorted commands), ``won`` and :meth:`dynamic_facts`.

    The fact set is TextWorld's (``facts[pred]``: argument tuples, ``not_`` facts included);
    ``_inrec`` (receptacle -> objects), ``_onfloor`` (location -> objects) and ``_held`` index it
    for the rules that list things. A step touches only the facts its effects name."""

    def __init__(self):
        self.game: CompiledGame | None = None
        self.facts: dict[str, set] = {}
        self.feedback = ""
        self.admissible: list[str] = []
        self.won = False
        self._ops: dict[str, tuple] = {}
        self._loc = ""
        self._inrec: dict[str, set] = {}
        self._onfloor: dict[str, set] = {}
        self._held: set = set()

    # --- lifecycle ------------------------------------------------------------------------------
    def load(self, game_file: str) -> None:
        self.game = load_game(game_file)

    def reset(self) -> None:
        g = self.game
        if g is None:
            raise RuntimeError("load a game before reset()")
        self.facts = defaultdict(set, {p: set(v) for p, v in g.init.items()})
        self._index()
        self.feedback = f"{WELCOME}\n\n{self._look(bound=False)}\n\nYour task is to: {g.task}."
        self._refresh()

    def _index(self) -> None:
        """The lookups the listing rules read, built from the facts."""
        self._inrec, self._onfloor = defaultdict(set), defaultdict(set)
        for o, r in self.facts["inreceptacle"]:
            self._inrec[r].add(o)
        for o, loc in self.facts["objectatlocation"]:
            self._onfloor[loc].add(o)
        self._held = {o for a, o in self.facts["holds"] if a == self.game.agent}
        self._loc = self._agent_location()

    def state(self) -> dict:
        """The game's state in progress (the fact set and the last feedback), for a snapshot."""
        return {"facts": {p: set(v) for p, v in self.facts.items()}, "feedback": self.feedback}

    def set_state(self, state: dict) -> None:
        """Back to ``state`` (from ``state()``) in the loaded game."""
        self.facts = defaultdict(set, {p: set(v) for p, v in state["facts"].items()})
        self._index()
        self.feedback = state["feedback"]
        self._refresh()

    def step(self, command: str) -> None:
        op = self._ops.get(command.strip())
        if op is None:
            self.feedback = "Nothing happens."        # TextWorld's answer; the state is unchanged
        else:
            kind, args = op
            for positive, pred, atom in self._effects(kind, args):
                self._set(pred, atom, positive)
            self._loc = self._agent_location()
            self.feedback = self._render(kind, args)
        self._refresh()

    def _refresh(self) -> None:
        self._ops = self._operators()
        self.admissible = sorted(self._ops)
        self.won = bool(self.game.goal(self.facts))

    # --- facts ----------------------------------------------------------------------------------
    def _set(self, pred: str, atom: tuple, positive: bool) -> None:
        """Apply one reported effect as TextWorld does: the atom's negation out, the atom in."""
        neg = "not_" + pred
        on, off = (pred, neg) if positive else (neg, pred)
        self.facts[off].discard(atom)
        self.facts[on].add(atom)
        if pred == "inreceptacle":
            (self._inrec[atom[1]].add if positive else self._inrec[atom[1]].discard)(atom[0])
        elif pred == "objectatlocation":
            (self._onfloor[atom[1]].add if positive else self._onfloor[atom[1]].discard)(atom[0])
        elif pred == "holds" and atom[0] == self.game.agent:
            (self._held.add if positive else self._held.discard)(atom[1])

    def _agent_location(self) -> str:
        locs = sorted(loc for a, loc in self.facts["atlocation"] if a == self.game.agent)
        return locs[0] if locs else ""

    def dynamic_facts(self) -> list[str]:
        """Sorted text of the facts an action can change, as
        :func:`agentrl_envs.alfworld.engine.dynamic_facts` writes TextWorld's."""
        return sorted(f"{p}({','.join(args)})" for p in DYNAMIC_PREDICATES
                      for args in self.facts.get(p, ()))

    def propositions(self) -> list:
        """The facts as TextWorld Propositions (PDDL names, declared types): the planner's input."""
        from textworld.logic import Proposition, Variable

        types = self.game.types
        return [Proposition(p, [Variable(a, types.get(a, "object")) for a in args])
                for p, facts in self.facts.items() for args in facts]

    # --- operators ------------------------------------------------------------------------------
    def _operators(self) -> dict[str, tuple]:
        """Applicable operators in the current state: command -> (action, PDDL arguments)."""
        g, f, loc, a = self.game, self.facts, self._loc, self.game.agent
        n = g.names
        ops: dict[str, tuple] = {"look": ("look", (a, loc)), "inventory": ("inventory", (a,)),
                                 "help": ("help", (a,))}
        here = g.recs_at.get(loc, [])
        for r, rloc in g.rec_locs:
            if rloc != loc:       # same location: every effect repeats a precondition (no-op)
                ops.setdefault(f"go to {n[r]}", ("gotolocation", (a, loc, rloc, r)))
        holding = bool(f["holdsany"] and (a,) in f["holdsany"])
        held = sorted(self._held)
        for r in here:
            ops.setdefault(f"examine {n[r]}", ("examinereceptacle", (a, r)))
            openable = g.has("openable", r)
            opened = (r,) in f["opened"]
            if openable:
                verb = "close" if opened else "open"
                ops.setdefault(f"{verb} {n[r]}", (f"{verb}object", (a, loc, r)))
            inside = sorted(self._inrec.get(r, ()))
            visible = not openable or opened
            for o in inside:
                if visible and not holding and g.has("pickupable", o):
                    ops.setdefault(f"take {n[o]} from {n[r]}", ("pickupobject", (a, loc, o, r)))
                if g.has("toggleable", o):
                    ops.setdefault(f"use {n[o]}", ("toggleobject", (a, loc, o, r)))
            for o in held:
                if visible and self._can_contain(r, o):
                    ops.setdefault(f"move {n[o]} to {n[r]}", ("putobject", (a, loc, o, r)))
                for verb, rtype in TOOL_RTYPE.items():
                    if g.has("receptacletype", r, rtype) and g.has(TOOL_PROP[verb], o):
                        ops.setdefault(f"{verb} {n[o]} with {n[r]}", (f"{verb}object", (a, loc, r, o)))
        for o in held:     # Fast Downward grounds examineObject's other branch into no operator
            ops.setdefault(f"examine {n[o]}", ("examineobject", (a, o)))
            if any(g.has("objecttype", o, t) for t in KNIFE_TYPES):
                for co in sorted(self._onfloor.get(loc, ())):
                    if g.has("sliceable", co):
                        ops.setdefault(f"slice {n[co]} with {n[o]}", ("sliceobject", (a, loc, co, o)))
        return ops

    def _can_contain(self, r: str, o: str) -> bool:
        g = self.game
        return any(g.has("cancontain", rt, ot) for rt in g.rtypes.get(r, ()) for ot in g.otypes.get(o, ()))

    # --- effects --------------------------------------------------------------------------------
    def _effects(self, kind: str, args: tuple) -> list[tuple[bool, str, tuple]]:
        """The effect atoms Fast Downward reports for an operator, as (positive, pred, args);
        for one atom the add comes first (ToggleObject's two conditional effects)."""
        g = self.game
        if kind in ("look", "inventory", "help"):
            return [(True, "checked", (args[1] if kind == "look" else args[0],))]
        if kind in ("examinereceptacle", "examineobject"):
            return [(True, "checked", (args[1],))]
        if kind == "gotolocation":
            a, start, end, _ = args
            return [(True, "atlocation", (a, end)), (False, "atlocation", (a, start))]
        if kind == "openobject":
            return [(True, "opened", (args[2],)), (True, "checked", (args[2],))]
        if kind == "closeobject":
            return [(False, "opened", (args[2],))]
        if kind == "pickupobject":
            a, loc, o, r = args
            out = [(False, "inreceptacle", (o, r)), (True, "holds", (a, o)), (True, "holdsany", (a,))]
            if ("objectatlocation", (o, loc)) in g.reachable_deletes:
                out.append((False, "objectatlocation", (o, loc)))
            return out
        if kind == "putobject":
            a, loc, o, r = args
            return [(True, "inreceptacle", (o, r)), (True, "objectatlocation", (o, loc)),
                    (False, "holds", (a, o)), (False, "holdsany", (a,))]
        if kind in ("cleanobject", "heatobject", "coolobject"):
            o = args[3]
            out = [(True, {"cleanobject": "isclean", "heatobject": "ishot", "coolobject": "iscool"}[kind], (o,))]
            undo = {"heatobject": "iscool", "coolobject": "ishot"}.get(kind)
            if undo and (undo, (o,)) in g.reachable_deletes:
                out.append((False, undo, (o,)))
            return out
        if kind == "toggleobject":
            o = args[2]
            return [(True, "ison", (o,)), (False, "ison", (o,)), (True, "istoggled", (o,))]
        if kind == "sliceobject":
            return [(True, "issliced", (args[2],))]
        raise ValueError(f"unknown action {kind!r}")

    # --- text -----------------------------------------------------------------------------------
    def _render(self, kind: str, args: tuple) -> str:
        """The action's feedback rule of alfred.twl2, on the facts after the action."""
        n, f = self.game.names, self.facts
        if kind == "look":
            return self._look(bound=True)
        if kind == "help":
            return HELP_TEXT
        if kind == "inventory":
            a = args[0]
            if (a,) in f["holdsany"]:
                held = sorted(o for aa, o in f["holds"] if aa == a)
                return f"You are carrying: {display_list([f'a {n[o]}' for o in held])}."
            return "You are not carrying anything."
        if kind == "examinereceptacle":
            return self._examine_receptacle(args[1])
        if kind == "examineobject":
            return self._examine_object(args[1])
        if kind == "gotolocation":
            return f"You arrive at {n[args[3]]}. {self._examine_receptacle(args[3])}"
        if kind == "openobject":
            return f"You open the {n[args[2]]}. {self._examine_receptacle(args[2])}"
        if kind == "closeobject":
            return f"You close the {n[args[2]]}."
        if kind == "pickupobject":
            return f"You pick up the {n[args[2]]} from the {n[args[3]]}."
        if kind == "putobject":
            return f"You move the {n[args[2]]} to the {n[args[3]]}."
        if kind in ("cleanobject", "heatobject", "coolobject"):
            return f"You {kind[:-6]} the {n[args[3]]} using the {n[args[2]]}."
        if kind == "toggleobject":
            o = args[2]
            if self.game.has("toggleable", o):
                return f"You turn {'on' if (o,) in f['istoggled'] else 'off'} the {n[o]}."
            return f"You don't see any switch on the {n[o]}."
        if kind == "sliceobject":
            return f"You sliced the {n[args[2]]} with the {n[args[3]]}."
        raise ValueError(f"unknown action {kind!r}")

    def _look(self, bound: bool) -> str:
        """``look.feedback``. ``bound``: the look action's own location is in the context (the
        intro has none), so "around you" lists only receptacles at the agent's location."""
        g, n, f = self.game, self.game.names, self.facts
        here = [(a, loc) for a, loc in sorted(f["atlocation"]) if g.recs_at.get(loc)]
        if here:
            recs = [r for _, loc in here for r in g.recs_at[loc]]
            floor = [f"a {n[o]}" for _, loc in here for o in sorted(self._onfloor.get(loc, ()))
                     for r in g.recs_at[loc] if (o, r) in f["not_inreceptacle"]]
            return (f"You are facing the {display_list([n[r] for r in recs])}. "
                    f"Next to it, you see {display_list(floor)}.")
        if bound:
            recs = g.recs_at.get(self._loc, [])
        else:
            recs = [r for r, _ in g.rec_locs]
        return ("You are in the middle of a room. Looking quickly around you, you see "
                f"{display_list([f'a {n[r]}' for r in recs])}.")

    def _examine_receptacle(self, r: str) -> str:
        n, f = self.game.names, self.facts
        inside = display_list([f"a {n[o]}" for o in sorted(self._inrec.get(r, ()))])
        if self.game.has("openable", r):
            if (r,) in f["opened"]:
                return f"The {n[r]} is open. In it, you see {inside}."
            return f"The {n[r]} is closed."
        return f"On the {n[r]}, you see {inside}."

    def _examine_object(self, o: str) -> str:
        g, n, f = self.game, self.game.names, self.facts
        name = n[o]
        if g.has("isreceptacleobject", o):
            inner = sorted(o2 for o2, outer in f["inreceptacleobject"] if outer == o and o2 != o)
            return f"This is a normal {name}. In it, you see {display_list([f'a {n[x]}' for x in inner])}."
        clean, hot, cool, sliced = ((o,) in f[p] for p in ("isclean", "ishot", "iscool", "issliced"))
        for cond, text in (
                (clean and hot and sliced, f"This is a hot and clean sliced {name}."),
                (clean and cool and sliced, f"This is a cool and clean sliced {name}."),
                (clean and sliced, f"This is a clean sliced {name}."),
                (hot and sliced, f"This is a hot sliced {name}."),
                (cool and sliced, f"This is a cool sliced {name}."),
                (clean and hot, f"This is a hot and clean {name}."),
                (clean and cool, f"This is a cool and clean {name}."),
                (hot, f"This is a hot {name}."),
                (clean, f"This is a clean {name}."),
                (cool, f"This is a cold {name}."),
                (g.has("toggleable", o) and (o,) in f["istoggled"], f"This {name} is on."),
                (g.has("toggleable", o) and (o,) in f["not_istoggled"], f"This {name} is off."),
                (g.has("sliceable", o) and sliced, f"This is a sliced {name}.")):
            if cond:
                return text
        return f"There's nothing special about {name}."

    # --- expert ---------------------------------------------------------------------------------
    def plan(self, planner) -> list[str]:
        """The planner's plan from the current state: the same reduced problem, translation and
        search as on TextWorld's state (:meth:`SubproblemPlanner.plan_facts`)."""
        g = self.game
        return planner.plan_facts(g.problem, self.propositions(), g.domain, TEMPLATES, g.names)

    def close(self) -> None:
        self.game = None
