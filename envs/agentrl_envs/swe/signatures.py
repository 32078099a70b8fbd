"""RTMC state and action signatures for the SWE env (RTMC, Rollout-Tree Monte Carlo: Sec. 4, Tables 1-2).

Action signature: ``category:scope@target[:result]`` with the categories of Table 1 (view,
search, modify, create, execute, test, install, fileop, think, finish), e.g.
``view:full@pkg/core.py``, ``view:partial[1-2]@pkg/core.py`` (lines 100-299; 100-line
buckets), ``modify:replace:a3f2@pkg/core.py`` (4-char MD5 of the old + new text),
``test@tests/test_core.py:ok``. Bash commands map to the same categories as the dedicated tools
(``cat`` = view, ``grep``/``find``/``ls`` = search, ``pytest`` = test, ...).

State signature (Eq. 13): ``file:OPS | file:OPS | ... | (FLAGS)``, files sorted, OPS a sorted
set (order-invariant) of Table 2's encodings ``Vf``, ``V[b]``, ``M:xxxx``, ``I:xxxx``, ``S``,
``C``; FLAGS count thinks, test runs passed/failed and script runs ok/failed.

Our choices where the paper is silent (documented here, tested):
* An edit's hash is taken over the changed *lines* of the file (common leading and trailing lines
  stripped, old then new), so the same edit made with str_replace, insert or ``sed -i`` gets the
  same signature; a change that only adds lines is an insert (``I``), anything else ``M``.
* File changes made by a bash command are found by diffing the workspace before/after; they turn
  a view/search/execute-looking command into ``modify``/``create`` (test/install/fileop keep
  their category). A fileop adds ``F`` to its target; a search records ``S`` on its path
  (file or directory). Failed tool calls get ``:error`` and leave the state unchanged; rejected
  (invalid) actions have the action signature ``invalid``.
* ``finish`` and ``think`` are bare categories (paper); FLAGS add ``exec_ok``/``exec_err``.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex

BUCKET = 100  # view bucketing: lines 100-199 -> bucket 1 (Sec. 4.2)


def edit_hash(old: str, new: str) -> str:
    """4-character MD5 hash of the concatenated old and new text (Sec. 4.2)."""
    return hashlib.md5((old + new).encode("utf-8", "replace")).hexdigest()[:4]


def line_diff(before: str, after: str) -> tuple[str, str]:
    """The changed lines of a file: (old lines, new lines) with common head/tail removed."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    j = 0
    while j < min(len(a), len(b)) - i and a[len(a) - 1 - j] == b[len(b) - 1 - j]:
        j += 1
    return "".join(a[i:len(a) - j]), "".join(b[i:len(b) - j])


def edit_op(before: str, after: str) -> tuple[str, str]:
    """('replace'|'insert', hash) of the edit that turns before into after."""
    old, new = line_diff(before, after)
    return ("insert" if old == "" else "replace"), edit_hash(old, new)


def buckets(start: int, end: int) -> list[int]:
    """100-line buckets covering 1-based lines start..end."""
    return list(range(max(start, 0) // BUCKET, max(end, start, 0) // BUCKET + 1))


def bucket_scope(bs: list[int]) -> str:
    return f"partial[{bs[0]}]" if len(bs) == 1 else f"partial[{bs[0]}-{bs[-1]}]"


class SignatureTracker:
    """Cumulative per-rollout record from which the state signature is read."""

    def __init__(self):
        self.files: dict[str, set[str]] = {}
        self.flags = {"think": 0, "test_ok": 0, "test_err": 0, "exec_ok": 0, "exec_err": 0}
        self.modified = False  # has_modifications(s) of Eq. 12

    def add(self, path: str, op: str) -> None:
        self.files.setdefault(path, set()).add(op)
        if op[0] in "MIC":
            self.modified = True

    def state_sig(self) -> str:
        parts = [f"{f}:{','.join(sorted(ops))}" for f, ops in sorted(self.files.items())]
        flags = ",".join(f"{k}={v}" for k, v in self.flags.items())
        return " | ".join(parts + [f"({flags})"])


# --- bash command classification (Table 1) ----------------------------------------------------
_SEARCH = {"grep", "egrep", "fgrep", "rg", "find", "ls", "tree", "ag", "locate", "which"}
_VIEW = {"cat", "head", "tail", "less", "more", "nl", "sed", "awk", "bat", "wc", "diff", "file"}
_FILEOP = {"cp", "mv", "rm", "mkdir", "rmdir", "touch", "ln", "chmod"}
_INSTALL = {"pip", "pip3", "apt", "apt-get", "conda", "poetry", "uv"}
_PYTHON = re.compile(r"^(python[0-9.]*|/usr/bin/python[0-9.]*)$")
_NOISE = {"echo", "printf", "true", "false", "pwd", "clear", "sleep", "date", "whoami", "id"}
# One category per command line: the most consequential segment wins ("cat a | grep b" = view).
_PRIORITY = ["test", "install", "execute", "fileop", "view", "search", "noise"]


def _segments(command: str) -> list[list[str]]:
    """Split a shell line on ; && || | and newlines into argv lists (best effort)."""
    out = []
    for seg in re.split(r"&&|\|\||[;|\n]", command):
        try:
            argv = shlex.split(seg, comments=True)
        except ValueError:
            argv = seg.split()
        while argv and ("=" in argv[0] and not argv[0].startswith("-") or argv[0] in ("sudo", "timeout", "time", "env")):
            argv = argv[1:]
            if argv and re.fullmatch(r"[0-9.]+[smh]?", argv[0]):  # timeout 10 cmd
                argv = argv[1:]
        if argv and argv[0] not in ("cd", "export", "source", ".", "set", "pushd", "popd"):
            out.append(argv)
    return out


def _operands(argv: list[str]) -> list[str]:
    return [a for a in argv[1:] if not a.startswith("-") and a not in (">", ">>", "<", "2>&1")]


def classify_bash(command: str) -> tuple[str, str, tuple[int, int] | None]:
    """(category, target, view line range or None) of a bash command, from its text."""
    best = None
    for argv in _segments(command):
        name = posixpath.basename(argv[0])
        ops = _operands(argv)
        cat, target, rng = "execute", name, None
        if name in ("pytest", "py.test") or (_PYTHON.match(name) and len(argv) > 2 and argv[1] == "-m"
                                             and argv[2] in ("pytest", "unittest")):
            cat = "test"
            paths = [o for o in ops if o not in ("pytest", "unittest") and not o.startswith("-")]
            target = paths[0].split("::")[0] if paths else "."
        elif name in _INSTALL or (_PYTHON.match(name) and "pip" in argv[1:3]):
            cat, target = "install", (ops[1] if len(ops) > 1 else (ops[0] if ops else name))
        elif _PYTHON.match(name):
            cat = "execute"
            if "-c" in argv:
                target = "-c"
            elif "-m" in argv:
                target = argv[argv.index("-m") + 1] if argv.index("-m") + 1 < len(argv) else "-m"
            else:
                target = ops[0] if ops else name
        elif name in _NOISE:
            cat = "noise"
        elif name in _FILEOP:
            cat, target = "fileop", (ops[-1] if ops else ".")
        elif name in _SEARCH:
            cat = "search"
            if name in ("grep", "egrep", "fgrep", "rg", "ag"):
                rest = ops[1:] if "-e" not in argv else ops
                target = rest[0] if rest else "."
            else:
                target = ops[0] if ops else "."
        elif name in _VIEW:
            cat = "view"
            if name == "sed":
                m = next((re.fullmatch(r"(\d+)(?:,(\d+))?p", o) for o in ops if re.fullmatch(r"\d+(,\d+)?p", o)), None)
                files = [o for o in ops if not re.fullmatch(r"\d+(,\d+)?p", o) and not o.startswith("s/")]
                target = files[-1] if files else "."
                if m:
                    rng = (int(m.group(1)), int(m.group(2) or m.group(1)))
            elif name == "head":
                n = _count_arg(argv, 10)
                target = ops[-1] if ops else "."
                rng = (1, n)
            elif name == "tail":
                target = ops[-1] if ops else "."
                rng = (-_count_arg(argv, 10), -1)  # resolved against the file's length by the env
            else:
                target = ops[-1] if ops else "."
        rank = _PRIORITY.index(cat)
        if best is None or rank < best[0]:
            best = (rank, cat, target, rng)
    if best is None:
        return "execute", "shell", None
    if best[1] == "noise":
        return "execute", best[2], None
    return best[1], best[2], best[3]


def _count_arg(argv: list[str], default: int) -> int:
    for i, a in enumerate(argv):
        if a == "-n" and i + 1 < len(argv) and argv[i + 1].lstrip("+-").isdigit():
            return abs(int(argv[i + 1]))
        m = re.fullmatch(r"-n?(\d+)", a)
        if m:
            return int(m.group(1))
    return default
