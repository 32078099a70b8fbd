"""One ALFWorld game compiled for :mod:`agentrl_envs.alfworld.native`: read once per process.

:func:`load_game` parses a ``game.tw-pddl`` file into a :class:`CompiledGame`: the objects and
their types, the demangled names, the initial facts (TextWorld's initial fact set: every atom of
the problem's ``:init``), the static indexes the actions read, the goal as a function of the
facts, and which delete effects Fast Downward keeps. It refuses (:class:`UnsupportedGame`) a
game whose domain is not alfworld 0.4.2's ``alfred.pddl`` or whose grammar is not its
``alfred.twl2`` with the task sentence filled in: the native engine implements those two only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field

DOMAIN_SHA1 = "f6b34d1678ff904f31b5ba33c065aa9c6e2e8bf5"
"""sha1 of alfworld 0.4.2's ``alfred.pddl``: the domain the native engine's actions implement."""
GRAMMAR_SHA1 = "e84cce56255c770b812bd78da58c1f2934280979"
"""sha1 of alfworld 0.4.2's ``alfred.twl2`` (task still ``UNKNOWN GOAL``): the rules the native engine renders."""
TASK_PLACEHOLDER = "UNKNOWN GOAL"
_TASK_UNSAFE = re.compile(r'["\\#\[\]{}|;<>\n]')


class UnsupportedGame(ValueError):
    """The game's domain or grammar is not the one the native engine implements."""

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
            if len(stack) == 1:
                raise UnsupportedGame("unbalanced parentheses in the PDDL problem")
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
