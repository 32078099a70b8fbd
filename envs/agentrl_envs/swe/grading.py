"""Grading a SWE episode: the verdict comes from a harness that the submission cannot edit or address.

Threat model: the submission (the agent's repository) is hostile and its code runs during
grading. So the verdict (1) ignores every file the submission could plant: the grading jail's
/testbed is a fresh, read-only tree of the task's pristine test files plus the submission's
source files only (no conftest.py, pytest.py, sitecustomize.py, config files, links or other
non-Python files; see ``submitted_files``), and the runner is our read-only runtime started with
``python -I``; (2) travels over a pipe that only the harness holds (``runtime/harness.py``: it
never imports the repository and runs each test in a child that has closed the pipe), not over
the output the submission can print; (3) is parsed on the host, which also requires the
harness's exit code to agree. What remains is the test's own process: code under test decides how
its own test ends, as in any pytest run.
"""

from __future__ import annotations

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
_RESULT = re.compile(r"passed=(\d{1,9}) failed=(\d{1,9}) errors=(\d{1,9})\n?", re.ASCII)
# Names that change how Python or a test runner starts, whatever directory they are in: never
# part of a submission's graded files.
_NOT_SOURCE = {"conftest.py", "pytest.py", "sitecustomize.py", "usercustomize.py", "__main__.py"}


def write_runtime(runtime: Path) -> None:
    """The jail's runtime tree: ``lib/pytest`` (our runner), ``bin/{pytest,py.test,python}``."""
    lib = runtime / "lib" / "pytest"
    lib.mkdir(parents=True)
    shutil.copyfile(Path(__file__).parent / "runtime" / "pytest_shim.py", lib / "__init__.py")
    (lib / "__main__.py").write_text(_SHIM_MAIN)
    shutil.copyfile(Path(__file__).parent / "runtime" / "harness.py", lib / "_grade.py")
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
    """Run ``task``'s pristine test files against ``repo``'s source files in a fresh read-only jail
    (the tree is built at ``scratch``); the verdict is what the harness writes to our pipe."""
    r, w = os.pipe()
    try:
        rmtree(scratch)
        grading_copy(task, repo, scratch)
        res = sandbox.run([JAIL_PYTHON, "-I", "-B", f"{RUNTIME_MOUNT}/lib/pytest/_grade.py",
                           "--result-fd", str(w), *task.tests],
                          workspace=scratch, wall_s=timeout, writable=False, pass_fd=w)
        os.close(w)
        w = -1
        os.set_blocking(r, False)  # every process of the jail is gone: nothing more will come
        try:
            data = os.read(r, 4096)
        except BlockingIOError:
            data = b""
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
        rmtree(scratch)
    counts = parse_result(data, res.exit_code)
    passed, failed, errors = counts or (0, 0, 0)
    won = counts is not None and failed == 0 and errors == 0 and passed == task.num_tests
    lines = res.output.splitlines()
    if res.timed_out:
        lines.append(f"[The test suite timed out after {timeout:g} s.]")
    elif counts is None or errors:
        lines.append("[The test run did not complete.]")
    lines += [f"[{n}]" for n in res.notes]
    verdict = "All tests pass: the issue is resolved." if won else "The tests do not pass: the issue is not resolved."
    summary = truncate("\n".join(lines).strip(), max_chars - 200) + "\n" + verdict
    return Verdict(won, summary, {"tests_passed": passed, "tests_failed": failed + errors})


def submitted_files(task: Task, repo: Path) -> list[str]:
    """The submission's files that grading uses: its regular ``.py`` files outside the task's test
    files and outside ``_NOT_SOURCE`` (links are never followed or copied)."""
    tests = set(task.tests)
    entries, _ = scan(repo)
    return [rel for rel, st in sorted(entries)
            if stat.S_ISREG(st.st_mode) and rel.endswith(".py") and rel not in tests
            and rel.rpartition("/")[2] not in _NOT_SOURCE
            and not any(p in IGNORED or p.startswith(".") for p in rel.split("/"))]


def grading_copy(task: Task, repo: Path, grade_dir: Path) -> None:
    """Build ``grade_dir``: the task's pristine test files plus ``submitted_files(repo)``.

    Nothing here follows a link the agent made: only regular files are read (opened with
    O_NOFOLLOW), and ``place_file`` writes each into real directories made for it."""
    grade_dir.mkdir()
    for rel in submitted_files(task, repo):
        try:
            fd = os.open(repo / rel, os.O_RDONLY | os.O_NOFOLLOW)
            with open(fd, "rb") as fh:
                data = fh.read()
            place_file(grade_dir, rel, data.decode("utf-8", "surrogateescape"))
        except (OSError, RuntimeError, ValueError):  # gone, a dangling path, not UTF-8
            continue
    for rel in task.tests:
        place_file(grade_dir, rel, task.files[rel])
    for p in [grade_dir, *grade_dir.rglob("*")]:  # the jail's uid reads it; nobody writes it
        p.chmod(0o755 if p.is_dir() else 0o644)


def parse_result(data: bytes, exit_code: int | None) -> tuple[int, int, int] | None:
    """(passed, failed, errors) from the harness's result pipe, or None.

    A result counts only when the pipe holds exactly one well-formed line and the harness's exit
    code agrees with it (0 exactly when something passed and nothing failed or errored)."""
    m = _RESULT.fullmatch(data.decode("ascii", "replace"))
    if m is None or exit_code is None:
        return None
    passed, failed, errors = (int(x) for x in m.groups())
    if (exit_code == 0) != (failed == 0 and errors == 0 and passed > 0):
        return None
    return passed, failed, errors
