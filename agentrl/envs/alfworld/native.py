"""A native ALFWorld engine: plays a game as TextWorld's PDDL stack does, without it.

The reference (:mod:`agentrl.envs.alfworld.engine`) is TextWorld's ``PddlEnv`` behind ALFWorld's
``AlfredDemangler`` and ``AlfredInfos``: Fast Downward's translator grounds the PDDL problem at
every reset (~85% of a ~700 ms reset), its C++ library applies operators, and a context-sensitive
grammar renders every observation and command from the facts (~70 ms a step). This module
plays the same game from a compact form built once per game and process
(:class:`CompiledGame`, ~10 ms): the ALFWorld domain's actions are applied directly, and the
grammar's rules are rendered by hand-written functions. Only the games it was written for are
accepted: the domain must be the ``alfred.pddl`` and the grammar the ``alfred.twl2`` of alfworld
0.4.2 (compared by hash; the task sentence is the only part that varies), else
:class:`UnsupportedGame` is raised and the caller falls back to TextWorld.

What TextWorld does, and is reproduced here (each point checked against it by
``tests/envs/test_alfworld_native.py``, which plays every shipped game on both engines):

* **Facts are TextWorld's, not the planner's.** TextWorld keeps its own fact set and applies
  the effect atoms Fast Downward reports for an operator: an add effect ``p`` removes
  ``not_p`` and adds ``p``; a delete effect removes ``p`` and adds ``not_p``. So facts such as
  ``not_inreceptacle(o, r)`` accumulate, and the grammar reads them (objects "next to" the
  agent). Conditional effects are all reported, fired or not, adds before deletes of the same
  atom: ``use lamp`` always leaves ``not_ison(lamp)``. A delete of an atom Fast Downward's
  relaxed exploration finds unreachable is not an effect at all (no ``not_`` fact).
* **Operators**: the actions' preconditions on the current state, with PDDL's ``object`` as the
  universal type. An operator whose effects all repeat its preconditions is a no-op to Fast
  Downward and is dropped: "go to" a receptacle at the agent's own location is not admissible.
* **Commands** are the actions' templates filled with demangled names ("take apple 2 from
  countertop 1"), sorted and deduplicated; **won** is the PDDL goal on the current state.
* **Text**: the grammar picks the first rule whose condition holds and lists query results in
  sorted-fact order (by PDDL name), joined "a, b, and c" (nothing: "nothing"). Names are the
  demangler's: per base name, instances are numbered in reverse order of their sorted ids.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field

from agentrl.envs.alfworld.engine import DYNAMIC_PREDICATES

DOMAIN_SHA1 = "f6b34d1678ff904f31b5ba33c065aa9c6e2e8bf5"
"""sha1 of alfworld 0.4.2's ``alfred.pddl``: the domain the actions below implement."""
GRAMMAR_SHA1 = "e84cce56255c770b812bd78da58c1f2934280979"
"""sha1 of alfworld 0.4.2's ``alfred.twl2`` (task still ``UNKNOWN GOAL``): the rules rendered below."""
TASK_PLACEHOLDER = "UNKNOWN GOAL"
_TASK_UNSAFE = re.compile(r'["\\#\[\]{}|;<>\n]')

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


class UnsupportedGame(ValueError):
    """The game's domain or grammar is not the one this engine implements."""


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


# --- PDDL text ---------------------------------------------------------------------------------
def parse_sexp(text: str) -> list:
    """PDDL text -> nested lists of lower-cased tokens (``;`` comments dropped), as Fast
    Downward's parser reads it (it lower-cases every name)."""
    text = re.sub(r";[^\n]*", "", text).lower()
    stack: list[list] = [[]]
    for tok in re.findall(r"\(|\)|[^\s()]+", text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    if len(stack) != 1:
        raise UnsupportedGame("unbalanced parentheses in the PDDL problem")
    return stack[0]


def typed_list(items: list) -> list[tuple[str, str]]:
    """``a b - t c - u`` -> [(a, t), (b, t), (c, u)] (untyped names are ``object``)."""
    out, pending = [], []
    it = iter(items)
    for tok in it:
        if tok == "-":
            typ = next(it)
            out += [(n, typ) for n in pending]
            pending = []
        else:
            pending.append(tok)
    return out + [(n, "object") for n in pending]


def demangle(ids) -> dict[str, str]:
    """PDDL ids -> ALFWorld names ("apple_bar_..." -> "apple 2"), as ALFWorld's demangler does:
    ids are sorted; each base name (text before the first ``_bar_``, plus "basin" when the id
    contains it) numbers its instances 1..n handed out from the top, so the first sorted id of a
    base name gets n. An id without ``_bar_`` keeps its text and gets no number ("agent1 ")."""
    ids = sorted(ids)

    def base(i: str) -> str:
        return i.split("_bar_", 1)[0] + ("basin" if "basin" in i else "")

    counts: dict[str, int] = defaultdict(int)
    for i in ids:
        if "_bar_" in i:
            counts[base(i)] += 1
    names = {}
    for i in ids:
        if "_bar_" in i:
            b = base(i)
            names[i] = f"{b} {counts[b]}"
            counts[b] -= 1
        else:
            text = i
            for old, new in (("_minus_", "-"), ("_plus_", "+"), ("_dot_", "."), ("_comma_", ",")):
                text = text.replace(old, new)
            names[i] = f"{text} "
    return names


def display_list(items: list[str]) -> str:
    """The grammar's list: "nothing", "a", "a, and b", "a, b, and c"."""
    if not items:
        return "nothing"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


# --- goal --------------------------------------------------------------------------------------
def compile_goal(expr, objects_of_type):
    """A PDDL goal (nested lists) -> ``check(facts) -> bool``, ``facts[pred]`` a set of argument
    tuples. ``exists``/``forall`` range over ``objects_of_type(type)`` (a set; ``object``: every
    object, as in PDDL). An ``exists`` enumerates, for each variable, only the values a positive
    atom of its body pins (an atom every satisfying assignment must make true: one reached through
    ``and``/``exists`` only, whose other arguments are constants or already bound)."""
    def comp(e):
        head = e[0]
        if head == "and":
            parts = [comp(x) for x in e[1:]]
            return lambda f, b: all(p(f, b) for p in parts)
        if head == "or":
            parts = [comp(x) for x in e[1:]]
            return lambda f, b: any(p(f, b) for p in parts)
        if head == "not":
            inner = comp(e[1])
            return lambda f, b: not inner(f, b)
        if head in ("exists", "forall"):
            variables = typed_list(e[1])
            body = comp(e[2])
            if head == "forall":
                return lambda f, b: _forall(variables, body, f, dict(b), objects_of_type)
            pins = _pins(e[2])
            return lambda f, b: _exists(variables, body, pins, f, dict(b), objects_of_type)
        if head == "=":
            x, y = e[1], e[2]
            return lambda f, b: b.get(x, x) == b.get(y, y)
        pred, args = head, tuple(e[1:])
        return lambda f, b: tuple(b.get(a, a) for a in args) in f.get(pred, ())

    check = comp(expr)
    return lambda facts: check(facts, {})


def _pins(body) -> list[tuple[str, tuple]]:
    """Positive atoms of ``body`` reached through ``and`` and ``exists`` only."""
    if not body or not isinstance(body[0], str):
        return []
    head = body[0]
    if head == "and":
        return [p for part in body[1:] for p in _pins(part)]
    if head == "exists":
        return _pins(body[2])
    if head in ("or", "not", "forall", "="):
        return []
    return [(head, tuple(body[1:]))]


def _candidates(var, pins, facts, b):
    """Values of ``var`` that some pinning atom allows, or None when no atom pins it."""
    for pred, args in pins:
        if var not in args:
            continue
        pos = args.index(var)
        others = [(i, b.get(a, a)) for i, a in enumerate(args) if i != pos]
        if any(v.startswith("?") for _, v in others):
            continue
        return {t[pos] for t in facts.get(pred, ()) if all(t[i] == v for i, v in others)}
    return None


def _exists(variables, body, pins, facts, b, objects_of_type):
    if not variables:
        return body(facts, b)
    (var, typ), rest = variables[0], variables[1:]
    allowed = objects_of_type(typ)
    pinned = _candidates(var, pins, facts, b)
    for value in (allowed if pinned is None else pinned & allowed):
        b[var] = value
        if _exists(rest, body, pins, facts, b, objects_of_type):
            return True
    b.pop(var, None)
    return False


def _forall(variables, body, facts, b, objects_of_type):
    if not variables:
        return body(facts, b)
    (var, typ), rest = variables[0], variables[1:]
    for value in objects_of_type(typ):
        b[var] = value
        if not _forall(rest, body, facts, b, objects_of_type):
            return False
    b.pop(var, None)
    return True


# --- one game, compiled ------------------------------------------------------------------------
@dataclass
class CompiledGame:
    """What a game's plays share: names, static facts, initial facts, goal (read-only)."""

    game_file: str
    """The ``game.tw-pddl`` file."""
    problem: str
    """The PDDL problem text (the planner reduces it)."""
    domain: str
    """The PDDL domain text (the planner translates it)."""
    task: str
    """The task sentence of the grammar ("put a clean cup in cabinet")."""
    agent: str
    """The agent's PDDL name."""
    types: dict[str, str]
    """PDDL name -> declared type, for every object of the problem."""
    names: dict[str, str]
    """PDDL name -> demangled name, for every entity of a fact."""
    init: dict[str, frozenset]
    """Predicate -> argument tuples of the initial facts (TextWorld's initial fact set)."""
    goal: object
    """``goal(facts) -> bool``."""
    recs_at: dict[str, list[str]]
    """Location -> receptacles there, sorted by PDDL name."""
    rec_locs: list[tuple[str, str]]
    """(receptacle, location) of every ``receptacleatlocation`` fact."""
    reachable_deletes: frozenset
    """(predicate, args) atoms that Fast Downward's relaxed exploration reaches, among those a
    delete effect may name and that are not implied by the operator's precondition."""
    by_type: dict[str, frozenset] = field(default_factory=dict)
    """Declared type -> PDDL names (``object``: every name)."""
    otypes: dict[str, tuple] = field(default_factory=dict)
    """Object -> its ``objecttype`` constants."""
    rtypes: dict[str, tuple] = field(default_factory=dict)
    """Receptacle -> its ``receptacletype`` constants."""

    def has(self, pred: str, *args: str) -> bool:
        return args in self.init.get(pred, ())

    def objects_of_type(self, typ: str) -> frozenset:
        return self.by_type.get(typ, frozenset())


def compile_game(game_file: str, data: dict) -> CompiledGame:
    """Build a :class:`CompiledGame` from a ``game.tw-pddl`` file's JSON."""
    if _sha1(data.get("pddl_domain", "")) != DOMAIN_SHA1:
        raise UnsupportedGame(f"{game_file}: PDDL domain is not alfworld 0.4.2's alfred.pddl")
    task = _task_of(game_file, data.get("grammar", ""))
    tree = parse_sexp(data["pddl_problem"])
    if len(tree) != 1 or tree[0][0] != "define":
        raise UnsupportedGame(f"{game_file}: no (define ...) in the PDDL problem")
    sections = {part[0]: part[1:] for part in tree[0][1:] if isinstance(part, list) and part}
    types = dict(typed_list(sections.get(":objects", [])))
    init: dict[str, set] = defaultdict(set)
    for atom in sections.get(":init", []):
        if atom[0] == "=" or any(isinstance(a, list) for a in atom):
            continue        # numeric fluents (total-cost, distances): not facts for TextWorld
        init[atom[0]].add(tuple(atom[1:]))
    if ":goal" not in sections:
        raise UnsupportedGame(f"{game_file}: PDDL problem has no goal")
    agents = sorted({a for a, _ in init.get("atlocation", ())})
    if len(agents) != 1:
        raise UnsupportedGame(f"{game_file}: expected one agent, found {agents}")
    entities = {a for facts in init.values() for args in facts for a in args}
    by_type: dict[str, set] = defaultdict(set)
    for name, typ in types.items():
        by_type[typ].add(name)
    by_type = {t: frozenset(v) for t, v in by_type.items()}
    by_type["object"] = frozenset(types)
    recs_at: dict[str, list[str]] = defaultdict(list)
    for r, loc in sorted(init.get("receptacleatlocation", ())):
        recs_at[loc].append(r)
    game = CompiledGame(
        game_file=game_file, problem=data["pddl_problem"], domain=data["pddl_domain"], task=task,
        agent=agents[0], types=types, names=demangle(entities),
        init={p: frozenset(v) for p, v in init.items()},
        goal=None, recs_at=dict(recs_at), rec_locs=sorted(init.get("receptacleatlocation", ())),
        reachable_deletes=frozenset(), by_type=by_type)
    for pred, table in (("objecttype", game.otypes), ("receptacletype", game.rtypes)):
        for x, t in sorted(init.get(pred, ())):
            table[x] = table.get(x, ()) + (t,)
    game.goal = compile_goal(sections[":goal"][0], game.objects_of_type)
    game.reachable_deletes = _reachable_deletes(game)
    return game


def _task_of(game_file: str, grammar: str) -> str:
    """The task sentence: the grammar must be alfred.twl2 with ``UNKNOWN GOAL`` replaced."""
    i = grammar.find("Your task is to: ")
    if i < 0:
        raise UnsupportedGame(f"{game_file}: grammar has no task sentence")
    start = i + len("Your task is to: ")
    end = grammar.find('."\n', start)
    task = grammar[start:end] if end > start else ""
    if not task or _TASK_UNSAFE.search(task):
        raise UnsupportedGame(f"{game_file}: task sentence {task!r} is not plain text")
    if _sha1(grammar[:start] + TASK_PLACEHOLDER + grammar[end:]) != GRAMMAR_SHA1:
        raise UnsupportedGame(f"{game_file}: grammar is not alfworld 0.4.2's alfred.twl2")
    return task


def _reachable_deletes(game: CompiledGame) -> frozenset:
    """Atoms of the delete effects that are not in the operator's precondition and that Fast
    Downward's relaxed exploration reaches: ``objectatlocation(o, l)`` (PickupObject),
    ``iscool(o)`` (HeatObject), ``ishot(o)`` (CoolObject). A delete of an unreachable atom is no
    effect (no ``not_`` fact). In the relaxed task the agent reaches every receptacle's
    location and may put a held object into any receptacle that can contain its type."""
    out = set()
    init = game.init
    otypes, rtypes = game.otypes, game.rtypes
    cancontain = init.get("cancontain", frozenset())
    for args in init.get("objectatlocation", ()):
        out.add(("objectatlocation", args))
    for o in {o for (o,) in init.get("pickupable", ())}:
        for r, loc in game.rec_locs:
            if any((rt, ot) in cancontain for rt in rtypes.get(r, ()) for ot in otypes.get(o, ())):
                out.add(("objectatlocation", (o, loc)))
    rtype_present = {t for ts in rtypes.values() for t in ts}
    for pred, prop, tool in (("iscool", "coolable", "fridgetype"), ("ishot", "heatable", "microwavetype")):
        out |= {(pred, args) for args in init.get(pred, ())}
        if tool in rtype_present:
            out |= {(pred, (o,)) for (o,) in init.get(prop, ())}
    return frozenset(out)


_GAMES: OrderedDict = OrderedDict()
GAME_CACHE_SIZE = 256
"""Compiled games kept per process (LRU), ~100-200 KB each."""


def load_game(game_file: str) -> CompiledGame:
    """The compiled game of a file, built once per process (keyed by path, size and mtime)."""
    st = os.stat(game_file)
    key = (os.path.abspath(game_file), st.st_size, st.st_mtime_ns)
    game = _GAMES.get(key)
    if game is None:
        with open(game_file) as f:
            game = compile_game(game_file, json.load(f))
        _GAMES[key] = game
        while len(_GAMES) > GAME_CACHE_SIZE:
            _GAMES.popitem(last=False)
    else:
        _GAMES.move_to_end(key)
    return game


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
        self._inrec, self._onfloor = defaultdict(set), defaultdict(set)
        for o, r in self.facts["inreceptacle"]:
            self._inrec[r].add(o)
        for o, loc in self.facts["objectatlocation"]:
            self._onfloor[loc].add(o)
        self._held = {o for a, o in self.facts["holds"] if a == g.agent}
        self._loc = self._agent_location()
        self.feedback = f"{WELCOME}\n\n{self._look(bound=False)}\n\nYour task is to: {g.task}."
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
        :func:`agentrl.envs.alfworld.engine.dynamic_facts` writes TextWorld's."""
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
