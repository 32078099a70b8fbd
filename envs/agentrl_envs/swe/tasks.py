"""The SWE env's task repositories: tiny Python projects with a planted bug and a test suite.

Layout, one folder per task under ``envs/agentrl_envs/swe/tasks/<task id>/``::

    task.json        {"family", "split", "issue", "tests": [...], "num_tests", "patch": [...]}
    repo/...         the buggy repository; every file carries an extra ``.txt`` suffix so that
                     the planted bugs are never imported, collected or linted as project code

``patch`` is the reference fix as exact string replacements ``{"path", "old", "new"}`` applied in
order (each ``old`` occurs exactly once when applied). ``tests`` are the suite's files, restored
from this pristine copy when the env grades; ``num_tests`` is how many tests must pass.
Families are bug kinds; ``split`` is "train" or "valid".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
SUFFIX = ".txt"
SPLITS = ("train", "valid")


@dataclass(frozen=True)
class Task:
    """One task repository."""

    id: str
    """Folder name, e.g. "off_by_one_paginate"."""
    family: str
    """Bug kind (off_by_one, wrong_operator, ...)."""
    split: str
    """"train" or "valid"."""
    issue: str
    """The bug report shown to the agent."""
    files: dict[str, str] = field(hash=False)
    """Buggy repository: relative path -> text."""
    tests: tuple[str, ...]
    """Test files of the suite (relative paths)."""
    num_tests: int
    """Tests the suite must pass (all of them)."""
    patch: tuple[dict, ...] = field(hash=False)
    """Reference fix: [{"path", "old", "new"}] exact replacements, applied in order."""

    def fixed_files(self) -> dict[str, str]:
        """The repository after the reference patch."""
        out = dict(self.files)
        for edit in self.patch:
            text = out[edit["path"]]
            if text.count(edit["old"]) != 1:
                raise ValueError(f"task {self.id}: patch text must occur exactly once in {edit['path']}")
            out[edit["path"]] = text.replace(edit["old"], edit["new"])
        return out

    def patch_states(self, path: str) -> list[str]:
        """Contents of ``path`` before and after each of the patch's edits to it."""
        states = [self.files[path]]
        for edit in self.patch:
            if edit["path"] == path:
                states.append(states[-1].replace(edit["old"], edit["new"], 1))
        return states


def _load(folder: Path) -> Task:
    meta = json.loads((folder / "task.json").read_text())
    repo = folder / "repo"
    files = {}
    for p in sorted(repo.rglob("*" + SUFFIX)):
        files[p.relative_to(repo).as_posix()[: -len(SUFFIX)]] = p.read_text()
    split = meta.get("split", "train")
    if split not in SPLITS:
        raise ValueError(f"task {folder.name}: split must be one of {SPLITS}, got {split!r}")
    for t in meta["tests"]:
        if t not in files:
            raise ValueError(f"task {folder.name}: test file {t} missing from repo/")
    return Task(id=folder.name, family=meta["family"], split=split, issue=meta["issue"].strip(),
                files=files, tests=tuple(meta["tests"]), num_tests=int(meta["num_tests"]),
                patch=tuple(meta["patch"]))


@cache
def load_tasks() -> tuple[Task, ...]:
    """All shipped tasks, sorted by id."""
    return tuple(_load(d) for d in sorted(TASKS_DIR.iterdir()) if (d / "task.json").is_file())


def families() -> list[str]:
    """The bug kinds present in the shipped tasks."""
    return sorted({t.family for t in load_tasks()})
