"""The import graph of ``agentrl`` and ``agentrl_envs``, checked against one table of layers.

    python -m tests.import_graph            # counts: arrows up, cycles, files per folder
    python -m tests.import_graph --list     # and every arrow up and every cycle

Every ``import`` statement of every module counts, the ones inside functions (lazy imports) too:
a lazy import is still a dependency, only a later one. Imports under ``if TYPE_CHECKING:`` are
left out (annotations only). ``from pkg import name`` is an arrow to ``pkg.name`` when that is a
module, else to ``pkg``; relative imports are resolved against the importing module's package.
An arrow goes to the module named, not to the packages above it (``import agentrl.credit.parts``
runs ``agentrl/credit/__init__.py`` too, but a package's own ``__init__`` importing its
submodules would otherwise make every package a cycle). An explicit import of a module's own
ancestor package (``from . import name`` in ``agentrl.losses.policy``, ``import agentrl_envs`` in
``agentrl_envs.probe``) is an arrow like any other: when that ``__init__`` imports the module
back, the two are a cycle (the module reads a half-run ``__init__``), and it is counted.

``LAYERS`` lists the layers bottom to top. A module may import its own layer and the ones below;
an arrow to a layer above is a violation, and so is a cycle between modules (a strongly connected
component of more than one module), within a layer or not, a cycle between packages
(``package_arrows``: ``agentrl.config`` -> ``agentrl.algorithms`` -> ``agentrl.config``) and a
file circle that only type hints close (``arrows(annotations=True)``).
``tests/test_import_contract.py`` asserts all are zero.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = {"agentrl": REPO / "agentrl", "agentrl_envs": REPO / "envs" / "agentrl_envs"}
"""Top-level package -> its folder."""

# Bottom to top: (layer name, module prefixes, why). A module's layer is that of its longest
# matching prefix ("agentrl.credit.compare" before "agentrl.credit"); a prefix ending in "$"
# matches that module only ("agentrl$": the package's __init__, not every top-level module). A
# module no prefix matches is an error of its own (declare it here).
LAYERS: list[tuple[str, tuple[str, ...], str]] = [
    ("envs", ("agentrl_envs",),
     "environments: their own installable package, importing nothing from agentrl"),
    ("base", ("agentrl$", "agentrl.records", "agentrl.recipe_file", "agentrl.recipe_keys", "agentrl.checkpoints",
              "agentrl.runinfo", "agentrl.memory_meter", "agentrl.precision",
              "agentrl.models", "agentrl.cli_args", "agentrl.registry", "agentrl.plugins"),
     "records, recipe files and keys, checkpoint folders, run metadata, the CPU's bf16 test, model registry, flag "
     "spelling, plug-in registries and plug-in modules"),
    ("credit", ("agentrl.credit", "agentrl.losses"),
     "credit estimators and policy losses: advantages from records, a loss from log-probs"),
    ("rollout", ("agentrl.rollout", "agentrl.sampling"),
     "the episode loop (training and evaluation play through it) and the one sampler every generate call goes "
     "through (a spec, engines)"),
    ("config", ("agentrl.config", "agentrl.algorithms", "agentrl.policies", "agentrl.collab"),
     "the recipe's config, algorithm plug-ins, policy store, collaborations (roles, contexts)"),
    ("producer", ("agentrl.producer",),
     "rollout sources: what is played, on which weights, handed to the learner as batches"),
    ("trainer", ("agentrl.trainer",),
     "the TRL subclass (the learner) and its steps"),
    ("apps", ("agentrl.__main__", "agentrl.cli", "agentrl.train", "agentrl.launch", "agentrl.recipe_hook",
              "agentrl.sft", "agentrl.warm_start", "agentrl.evaluation", "agentrl.demo", "agentrl.demo_eval", "agentrl.demo_report", "agentrl.demo_summary", "agentrl.demo_goals", "agentrl.demo_alfworld", "agentrl.arena", "agentrl.arena_stats",
              "agentrl.report", "agentrl.show", "agentrl.truth", "agentrl.benchmarks", "agentrl.serve_openai", "agentrl.serve_engine",
              "agentrl.credit.__main__",
              "agentrl.credit.compare", "agentrl.credit.cluster_report"),
     "commands: import the library, never imported by it"),
]


@dataclass(frozen=True)
class Arrow:
    src: str
    """Importing module."""
    dst: str
    """Imported module (resolved)."""
    file: str
    """The importing file, relative to the repo."""
    line: int
    text: str
    """The import statement as written."""


def modules(roots: dict[str, Path] | None = None) -> dict[str, Path]:
    """Every module of the packages (default ``ROOTS``): dotted name -> file (a package is its
    ``__init__.py``)."""
    out = {}
    for top, root in (roots or ROOTS).items():
        for f in sorted(root.rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((top, *parts))] = f
    return out


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST, annotations: bool = False):
    """Every Import / ImportFrom of ``tree`` (nested in functions too), minus the ones under
    ``if TYPE_CHECKING:`` (its ``else`` branch still counts) unless ``annotations``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _type_checking(node.test) and not annotations:
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """``name`` if it is one of our modules; None if it is outside both packages; ``?name`` if it
    names a module of ours that does not exist (a broken import, reported apart)."""
    if name in known:
        return name
    return "?" + name if name.split(".")[0] in {m.split(".")[0] for m in known} else None


def arrows(known: dict[str, Path] | None = None, annotations: bool = False) -> list[Arrow]:
    """Every import arrow between our modules, one per (importer, imported, line); self-imports
    dropped. ``annotations``: the imports under ``if TYPE_CHECKING:`` too (a file circle that only
    type hints close is still two files that must be read together)."""
    known = known or modules()
    out: dict[tuple[str, str, int], Arrow] = {}
    for mod, f in known.items():
        is_pkg = f.name == "__init__.py"
        src = f.read_text()
        lines = src.splitlines()
        for node in _import_nodes(ast.parse(src, str(f)), annotations):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[:len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in known else base)
            for t in targets:
                dst = _resolve(t, known)
                if dst and dst != mod:
                    file = str(f.relative_to(REPO)) if f.is_relative_to(REPO) else str(f)
                    out.setdefault((mod, dst, node.lineno),
                                   Arrow(mod, dst, file, node.lineno, lines[node.lineno - 1].strip()))
    return list(out.values())


def broken(arrs: list[Arrow]) -> list[Arrow]:
    """Imports of a module of ours that does not exist."""
    return [a for a in arrs if a.dst.startswith("?")]


def layer_of(mod: str, layers: list | None = None) -> int | None:
    """Index of ``mod``'s layer in ``layers`` (default ``LAYERS``; longest matching prefix), None
    if undeclared."""
    best, best_len = None, -1
    for i, (_, prefixes, _) in enumerate(layers or LAYERS):
        for p in prefixes:
            exact = p.endswith("$")
            p = p.rstrip("$")
            if (mod == p or (not exact and mod.startswith(p + "."))) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def upward(arrs: list[Arrow], layers: list | None = None) -> list[Arrow]:
    """Arrows from a layer to a layer above it."""
    out = []
    for a in arrs:
        if a.dst.startswith("?"):
            continue
        ls, ld = layer_of(a.src, layers), layer_of(a.dst, layers)
        if ls is not None and ld is not None and ld > ls:
            out.append(a)
    return out


def undeclared(known: dict[str, Path]) -> list[str]:
    return [m for m in known if layer_of(m) is None]


def cycles(arrs: list[Arrow]) -> list[list[str]]:
    """One cycle (a module path m0 -> m1 -> ... -> m0) per strongly connected component of more
    than one module, in a stable order. An explicit arrow from a module to one of its own ancestor
    packages counts (a package ``__init__`` that imports the module back closes a cycle); the
    implicit one every submodule has (Python runs the ancestors' ``__init__`` first) is not drawn."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a in arrs:
        if not a.dst.startswith("?"):
            graph[a.src].add(a.dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, comps = set(), [], []

    def strong(v: str) -> None:  # Tarjan; recursion depth is bounded by the module count (~300)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(list(graph)):
        if v not in index:
            strong(v)
    return [_cycle_in(comp, graph) for comp in sorted(comps)]


def _cycle_in(comp: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first, within the component)."""
    members, start = set(comp), comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp  # unreachable for a strongly connected component


def unit_of(mod: str) -> str:
    """The package a module belongs to, for the package-level graph: ``agentrl.config.validate`` ->
    ``agentrl.config``; a top-level module (``agentrl.train``) is a unit of its own."""
    parts = mod.split(".")
    return ".".join(parts[:2])


def package_arrows(arrs: list[Arrow]) -> list[Arrow]:
    """``arrs`` between packages (``unit_of``): arrows inside one package dropped."""
    return [Arrow(unit_of(a.src), unit_of(a.dst), a.file, a.line, a.text) for a in arrs
            if not a.dst.startswith("?") and unit_of(a.src) != unit_of(a.dst)]


def where(arrs: list[Arrow], src: str, dst: str) -> str:
    """The file:line of the first import of ``dst`` by ``src``."""
    a = next(a for a in arrs if a.src == src and a.dst == dst)
    return f"{a.file}:{a.line}: {a.text}"


def describe_up(a: Arrow) -> str:
    return (f"{a.file}:{a.line}: {a.text}  ({a.src} [{LAYERS[layer_of(a.src)][0]}] -> "
            f"{a.dst} [{LAYERS[layer_of(a.dst)][0]}])")


def describe_cycle(cyc: list[str], arrs: list[Arrow]) -> str:
    steps = [f"  {s} -> {d}   {where(arrs, s, d)}" for s, d in zip(cyc, cyc[1:], strict=False)]
    return "cycle " + " -> ".join(cyc) + "\n" + "\n".join(steps)


def files_per_folder(known: dict[str, Path]) -> Counter:
    return Counter(str(f.parent.relative_to(REPO)) for f in known.values())


def counts() -> dict:
    known = modules()
    arrs = arrows(known)
    return {"modules": len(known), "arrows": len(arrs), "up": len(upward(arrs)),
            "cycles": len(cycles(arrs)), "undeclared": len(undeclared(known)), "broken": len(broken(arrs)),
            "files_per_folder": dict(sorted(files_per_folder(known).items()))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.import_graph", description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="also print every arrow up and every cycle")
    a = ap.parse_args(argv)
    known = modules()
    arrs = arrows(known)
    up, cyc, und, bad = upward(arrs), cycles(arrs), undeclared(known), broken(arrs)
    print("layers, bottom to top: " + " < ".join(n for n, _, _ in LAYERS))
    print(f"modules {len(known)}, import arrows {len(arrs)}, arrows up {len(up)}, cycles {len(cyc)}, "
          f"undeclared modules {len(und)}, imports of missing modules {len(bad)}")
    print("files per folder:")
    for folder, n in sorted(files_per_folder(known).items()):
        print(f"  {folder:<32} {n}")
    if a.list:
        for x in up:
            print("up: " + describe_up(x))
        for c in cyc:
            print(describe_cycle(c, arrs))
        for m in und:
            print(f"undeclared: {m}")
        for x in bad:
            print(f"missing: {x.file}:{x.line}: {x.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
