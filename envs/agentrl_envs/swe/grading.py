"""Grading a SWE episode: the task's pristine tests run, in the jail, against the agent's repository.

The jail's runtime (mounted read-only at RUNTIME_MOUNT) holds our pytest-compatible runner
(``runtime/pytest_shim.py``): Debian's /usr/bin/python3 has no pytest and the jail cannot see the
project venv. The grading run prints a result marker carrying a nonce that comes over stdin; a
result counts only when the marker is well formed, carries the nonce and agrees with the exit code.
"""

from __future__ import annotations

import hmac
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from agentrl_envs.base import truncate
from agentrl_envs.swe.sandbox import JAIL_PYTHON, RUNTIME_MOUNT, Sandbox
from agentrl_envs.swe.tasks import Task
from agentrl_envs.swe.workspace import IGNORED, place_file, rmtree, scan

_SHIM_MAIN = """import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pytest
sys.exit(pytest.main())
"""
# The grading entry point: the result nonce comes on stdin (see pytest_shim.graded_main).
_GRADE_MAIN = _SHIM_MAIN.replace("pytest.main()", "pytest.graded_main()")
_RESULT = re.compile(r"@@agentrl-result ([0-9a-f]{32}) passed=(\d{1,9}) failed=(\d{1,9}) errors=(\d{1,9})",
                     re.ASCII)


def write_runtime(runtime: Path) -> None:
    """The jail's runtime tree: ``lib/pytest`` (our runner), ``bin/{pytest,py.test,python}``."""
    lib = runtime / "lib" / "pytest"
    lib.mkdir(parents=True)
    shutil.copyfile(Path(__file__).parent / "runtime" / "pytest_shim.py", lib / "__init__.py")
    (lib / "__main__.py").write_text(_SHIM_MAIN)
    (lib / "_grade.py").write_text(_GRADE_MAIN)
    bin_ = runtime / "bin"
    bin_.mkdir()
    for name in ("pytest", "py.test"):
        (bin_ / name).write_text(f'#!/bin/sh\nexec {JAIL_PYTHON} -m pytest "$@"\n')
        (bin_ / name).chmod(0o755)
    (bin_ / "python").symlink_to(JAIL_PYTHON)
    for p in [runtime, *runtime.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() or p.parent.name == "bin" else 0o644)


@dataclass
class Verdict:
    """The outcome of one grading run."""

    won: bool
    """Every one of the task's tests passed (and nothing failed or errored)."""
    summary: str
    """The run's output (cut to fit an observation) and a one-line verdict."""
    counts: dict
    """``{"tests_passed": n, "tests_failed": failed + errors}`` for ``info``."""


def grade(task: Task, repo: Path, scratch: Path, sandbox: Sandbox, timeout: float, max_chars: int) -> Verdict:
    """Run ``task``'s pristine test files against ``repo`` in the jail (copy made at ``scratch``)."""
    nonce = os.urandom(16).hex()
    try:
        rmtree(scratch)
        grading_copy(task, repo, scratch)
        sandbox.give(scratch)
        # The nonce goes over stdin, not the environment or argv (both readable in /proc).
        # A mitigation only: the verdict is printed by the process that imports the agent's
        # code, which can still find the nonce by scanning that process's memory.
        res = sandbox.run([JAIL_PYTHON, "-I", "-B", f"{RUNTIME_MOUNT}/lib/pytest/_grade.py", "-q",
                           *task.tests], workspace=scratch, stdin=nonce.encode() + b"\n", wall_s=timeout)
    finally:
        rmtree(scratch)
    counts, lines = parse_result(res.output, nonce, res.exit_code)
    passed, failed, errors = counts or (0, 0, 0)
    won = counts is not None and failed == 0 and errors == 0 and passed == task.num_tests
    if res.timed_out:
        lines.append(f"[The test suite timed out after {timeout:g} s.]")
    elif counts is None:
        lines.append("[The test run did not complete.]")
    verdict = "All tests pass: the issue is resolved." if won else "The tests do not pass: the issue is not resolved."
    summary = truncate("\n".join(lines).strip(), max_chars - 200) + "\n" + verdict
    return Verdict(won, summary, {"tests_passed": passed, "tests_failed": failed + errors})


def grading_copy(task: Task, repo: Path, grade_dir: Path) -> None:
    """Copy ``repo`` to ``grade_dir`` and put the task's pristine test files in it.

    Nothing here follows a link the agent made: links are copied as links, the test paths
    are left out of the copy, and ``place_file`` writes each test file into real directories
    made for it (a link such as ``tests -> /etc`` in the copy is replaced, never written
    through, even though we may be root)."""
    tests = set(task.tests)
    entries, _ = scan(repo)
    grade_dir.mkdir()
    made = {""}  # directories copied so far ("" = the root)
    for rel, st in sorted(entries):  # a directory sorts before its entries
        if rel.rpartition("/")[0] not in made or rel in tests or any(p in IGNORED for p in rel.split("/")):
            continue
        src, dst = repo / rel, grade_dir / rel
        try:
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(dst)
                made.add(rel)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), dst)
            elif stat.S_ISREG(st.st_mode):
                shutil.copy2(src, dst, follow_symlinks=False)
        except OSError:
            continue
    for rel in task.tests:
        place_file(grade_dir, rel, task.files[rel])


def parse_result(output: str, nonce: str, exit_code: int | None) -> tuple[tuple[int, int, int] | None, list[str]]:
    """((passed, failed, errors) or None, the other output lines) of a grading run.

    A result counts only when the output's last line is a well-formed marker with our nonce and
    the exit code agrees with it (0 exactly when nothing failed and something passed); anything
    else, a forged or garbled marker included, means no result."""
    lines = output.splitlines()
    m = _RESULT.fullmatch(lines[-1]) if lines else None
    if m is None or not hmac.compare_digest(m.group(1), nonce) or exit_code is None:
        return None, lines
    passed, failed, errors = (int(x) for x in m.group(2, 3, 4))
    if (exit_code == 0) != (failed == 0 and errors == 0 and passed > 0):
        return None, lines
    return (passed, failed, errors), lines[:-1]
