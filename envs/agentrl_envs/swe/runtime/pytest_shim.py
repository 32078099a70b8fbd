"""A small pytest-compatible test runner: agentrl's SWE sandbox installs it as ``pytest``.

The sandbox's ``/usr/bin/python3`` has no pytest (and the jail cannot reach /root's venv), so
the jail gets this module as ``pytest`` (``pytest``, ``py.test`` and ``python -m pytest`` all
run it). It is our own code, a subset of pytest:

* collection: ``test_*.py`` / ``*_test.py`` files under the given paths (default ``.``);
  ``test*`` functions and ``Test*`` classes' ``test*`` methods; node ids ``file::name`` and
  ``file::Class::name``; ``-k SUBSTRING``, ``-x``, ``-q``, ``-v`` (other options are ignored);
* in tests: plain ``assert`` (failed comparisons show both sides), ``pytest.raises``
  (``match=``), ``pytest.approx``, ``pytest.fail``, ``pytest.skip``, ``pytest.mark.parametrize``;
* exit codes as pytest: 0 all passed, 1 failures, 2 collection errors, 5 nothing collected.

Output carries no timings, so runs are deterministic. The env's grading run does not trust this
runner's output: ``harness.py`` runs each test in a child process of its own and reports the
verdict over a pipe.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import re
import sys
import traceback

__version__ = "0.0-agentrl"
_HERE = os.path.dirname(os.path.abspath(__file__))


# --- the API used inside tests ----------------------------------------------------------------
class Skipped(Exception):
    """Raised by pytest.skip()."""


class Failed(AssertionError):
    """Raised by pytest.fail()."""


def fail(msg: str = "") -> None:
    raise Failed(msg)


def skip(msg: str = "") -> None:
    raise Skipped(msg)


class RaisesContext:
    def __init__(self, expected, match=None):
        self.expected = expected
        self.match = match
        self.value = None
        self.type = None

    def __enter__(self):
        return self

    def __exit__(self, etype, value, tb):
        if etype is None:
            names = getattr(self.expected, "__name__", str(self.expected))
            raise Failed(f"DID NOT RAISE {names}")
        if not issubclass(etype, self.expected):
            return False
        self.value, self.type = value, etype
        if self.match is not None and not re.search(self.match, str(value)):
            raise Failed(f"Regex pattern did not match.\n Regex: {self.match!r}\n Input: {str(value)!r}")
        return True


def raises(expected, *args, match=None, **kwargs):
    """``with pytest.raises(E, match=...)`` or ``pytest.raises(E, func, *args)``."""
    ctx = RaisesContext(expected, match)
    if args:
        with ctx:
            args[0](*args[1:], **kwargs)
        return ctx
    return ctx


class approx:
    """Numbers (and flat sequences of numbers) equal within rel=1e-6 / abs=1e-12."""

    def __init__(self, expected, rel=1e-6, abs=1e-12):
        self.expected, self.rel, self.abs = expected, rel, abs

    def _close(self, a, b):
        return a == b or math.isclose(a, b, rel_tol=self.rel, abs_tol=self.abs)

    def __eq__(self, other):
        if isinstance(self.expected, (list, tuple)):
            return (isinstance(other, (list, tuple)) and len(other) == len(self.expected)
                    and all(self._close(a, b) for a, b in zip(other, self.expected, strict=True)))
        try:
            return self._close(other, self.expected)
        except TypeError:
            return False

    def __repr__(self):
        return f"approx({self.expected!r})"


class _Mark:
    def parametrize(self, argnames, argvalues, ids=None):
        names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)

        def deco(fn):
            cases = list(getattr(fn, "_params", []))
            cases.append((names, list(argvalues)))
            fn._params = cases
            return fn
        return deco

    def __getattr__(self, name):  # any other mark: a no-op decorator
        def mark(*a, **k):
            if len(a) == 1 and callable(a[0]) and not k:
                return a[0]
            return lambda fn: fn
        return mark


mark = _Mark()


# --- collection -------------------------------------------------------------------------------
def _is_test_file(name):
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _find_files(path):
    if os.path.isfile(path):
        return [path]
    out = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "venv"))
        out += [os.path.join(root, f) for f in sorted(files) if _is_test_file(f)]
    return out


def _import(path):
    """Import a test file as pytest's default 'prepend' mode does."""
    path = os.path.abspath(path)
    base, parts = os.path.dirname(path), [os.path.splitext(os.path.basename(path))[0]]
    while os.path.exists(os.path.join(base, "__init__.py")):
        parts.insert(0, os.path.basename(base))
        base = os.path.dirname(base)
    if base not in sys.path:
        sys.path.insert(0, base)
    name = ".".join(parts)
    sys.modules.pop(name, None)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _expand(name, fn):
    """(id suffix, kwargs) for each parametrized case of fn."""
    cases = [("", {})]
    for names, values in reversed(getattr(fn, "_params", [])):
        new = []
        for sid, kw in cases:
            for v in values:
                vals = v if len(names) > 1 else (v,)
                label = "-".join(str(x) for x in vals)
                new.append((f"{sid}-{label}" if sid else label, {**kw, **dict(zip(names, vals, strict=False))}))
        cases = new
    return [(f"{name}[{sid}]" if sid else name, kw) for sid, kw in cases]


def _collect(mod):
    """[(test id, callable, kwargs)] in definition order."""
    items = []
    for attr, obj in vars(mod).items():
        if attr.startswith("test") and callable(obj) and getattr(obj, "__module__", None) == mod.__name__:
            items.append((obj.__code__.co_firstlineno if hasattr(obj, "__code__") else 0, attr, None, obj))
        elif attr.startswith("Test") and isinstance(obj, type) and obj.__module__ == mod.__name__:
            for m, fn in vars(obj).items():
                if m.startswith("test") and callable(fn):
                    items.append((fn.__code__.co_firstlineno, f"{attr}::{m}", obj, m))
    out = []
    for _, tid, cls, obj in sorted(items, key=lambda t: t[0]):
        fn = getattr(cls, obj) if cls is not None else obj
        for full, kw in _expand(tid, fn):
            out.append((full, cls, obj, kw))
    return out


# --- reporting --------------------------------------------------------------------------------
def _explain(exc, tb):
    """For a bare failed ``assert a <op> b``, re-evaluate the operands to show their values."""
    frame = None
    for f, _ in traceback.walk_tb(tb):
        frame = f
    if frame is None or str(exc):
        return str(exc)
    try:
        with open(frame.f_code.co_filename) as fh:
            tree = ast.parse(fh.read())
        node = next(n for n in ast.walk(tree) if isinstance(n, ast.Assert) and n.lineno == frame.f_lineno)
        src = "assert " + ast.unparse(node.test)
        if isinstance(node.test, ast.Compare) and len(node.test.ops) == 1:
            vals = [eval(compile(ast.Expression(e), "<assert>", "eval"), frame.f_globals, frame.f_locals)
                    for e in (node.test.left, node.test.comparators[0])]
            op = src[len("assert " + ast.unparse(node.test.left)):].strip().split(" ")[0]
            return f"{src}\n  where: {vals[0]!r} {op} {vals[1]!r}"
        return src
    except Exception:
        return ""


def _format_failure(exc):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_HERE)]
    lines = []
    for f in frames[-6:]:
        rel = os.path.relpath(f.filename) if f.filename.startswith(os.getcwd()) else f.filename
        lines.append(f"{rel}:{f.lineno}: in {f.name}")
        if f.line:
            lines.append(f"    {f.line}")
    msg = _explain(exc, exc.__traceback__) if isinstance(exc, AssertionError) else str(exc)
    lines.append(f"E   {type(exc).__name__}: {msg}".rstrip(": ") if msg else f"E   {type(exc).__name__}")
    return "\n".join(lines)


def main(args=None):
    """Run the tests; returns the exit code."""
    opts = _parse_args(list(sys.argv[1:] if args is None else args))
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for p in opts["paths"] or ["."]:
        file_part = p.partition("::")[0]
        if not os.path.exists(file_part):
            print(f"ERROR: file or directory not found: {file_part}")
            return 4
    tests, errors = _collect_tests(opts["paths"] or ["."], opts["k"])
    if errors:
        print("=" * 30 + " ERRORS " + "=" * 30)
        for rel, e in errors:
            print(f"ERROR collecting {rel}")
            print(_format_failure(e))
        print(f"Interrupted: {len(errors)} error(s) during collection")
        return 2
    if not tests:
        print("no tests ran")
        return 5
    passed, failed, skipped, failures = _run_tests(tests, opts)
    _summary(passed, failed, skipped, failures)
    return 1 if failed else 0


def _parse_args(args):
    """The options we honour (-v, -q, -x, -k EXPR) and the paths; other flags are ignored."""
    opts = {"verbose": False, "quiet": False, "exitfirst": False, "k": None, "paths": []}
    it = iter(args)
    for a in it:
        if a in ("-v", "--verbose"):
            opts["verbose"] = True
        elif a in ("-q", "--quiet"):
            opts["quiet"] = True
        elif a in ("-x", "--exitfirst"):
            opts["exitfirst"] = True
        elif a == "-k":
            opts["k"] = next(it, None)
        elif a.startswith("-k") and len(a) > 2:
            opts["k"] = a[2:]
        elif not a.startswith("-"):
            opts["paths"].append(a)
    return opts


def _collect_tests(paths, kexpr):
    """([(file, test id, class, function, kwargs)], [(file, collection error)])."""
    selected = []  # (file, node filter or None)
    for p in paths:
        file_part, _, node = p.partition("::")
        selected += [(f, node or None) for f in _find_files(file_part)]
    tests, errors = [], []
    for f, node in selected:
        rel = os.path.relpath(f)
        try:
            mod = _import(f)
        except Exception as e:  # noqa: BLE001 - report like pytest's collection error
            errors.append((rel, e))
            continue
        for tid, cls, obj, kw in _collect(mod):
            if node and tid != node and tid.split("[")[0] != node:
                continue
            if kexpr and kexpr not in tid:
                continue
            tests.append((rel, tid, cls, obj, kw))
    return tests, errors


def _run_tests(tests, opts):
    """Run ``tests`` in order, printing progress as pytest does; (passed, failed, skipped, failures)."""
    passed, failed, skipped, failures = 0, 0, 0, []
    current = None
    for rel, tid, cls, obj, kw in tests:
        fn = getattr(cls(), obj) if cls is not None else obj
        try:
            fn(**kw)
            outcome = "."
            passed += 1
        except Skipped:
            outcome = "s"
            skipped += 1
        except Exception as e:  # noqa: BLE001 - a failing test
            outcome = "F"
            failed += 1
            failures.append((rel, tid, e))
        if opts["verbose"]:
            print(f"{rel}::{tid} {dict(zip('.sF', ('PASSED', 'SKIPPED', 'FAILED'), strict=True))[outcome]}")
        else:
            if rel != current and not opts["quiet"]:
                print(("\n" if current else "") + rel + " ", end="")
            current = rel
            print(outcome, end="")
        if outcome == "F" and opts["exitfirst"]:
            break
    if not opts["verbose"]:
        print()
    return passed, failed, skipped, failures


def _summary(passed, failed, skipped, failures):
    if failures:
        print("=" * 30 + " FAILURES " + "=" * 30)
        for _rel, tid, e in failures:
            print(f"{'_' * 10} {tid} {'_' * 10}")
            print(_format_failure(e))
        print("=" * 24 + " short test summary info " + "=" * 24)
        for rel, tid, e in failures:
            first = (str(e).splitlines() or [""])[0]
            print(f"FAILED {rel}::{tid} - {type(e).__name__}" + (f": {first}" if first else ""))
    parts = [f"{failed} failed"] if failed else []
    parts.append(f"{passed} passed")
    if skipped:
        parts.append(f"{skipped} skipped")
    print(", ".join(parts))

