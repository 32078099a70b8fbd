"""agentrl/SWE-v0: fix a planted bug in a tiny Python repository with SWE-agent/R2E-Gym-style tools.

Actions are JSON tool calls inside ``<action>...</action>``::

    {"tool": "file_editor", "command": "view", "path": "pkg/core.py", "view_range": [1, 40]}
    {"tool": "file_editor", "command": "create", "path": "repro.py", "file_text": "..."}
    {"tool": "file_editor", "command": "str_replace", "path": "pkg/core.py", "old_str": "...", "new_str": "..."}
    {"tool": "file_editor", "command": "insert", "path": "pkg/core.py", "insert_line": 3, "new_str": "..."}
    {"tool": "search", "pattern": "def mean", "path": "pkg"}
    {"tool": "bash", "command": "pytest -q"}
    {"tool": "think", "thought": "..."}
    {"tool": "finish"}

Paths are relative to the repository or absolute under ``/testbed``. The file tools and search run
on the host over the workspace (symlinks resolved; anything outside it is refused); ``bash`` runs
in a bubblewrap jail (``agentrl.envs.swe.sandbox``) as an unprivileged uid with no network and limits on
memory, CPU, processes, file size and wall time. ``pytest`` inside the jail is our own
pytest-compatible runner (``envs/swe/runtime/pytest_shim.py``): Debian's /usr/bin/python3 has no
pytest and the jail cannot see the project venv.

Reward: 1 when the task's own test suite (test files restored from the pristine copy) passes at
``finish`` or at the step limit, else 0. Optional RTMC validation shaping (rtmc.md Eq. 12): +beta
for a test run made after a modification. Validity: malformed JSON, an unknown tool or command,
missing or ill-typed arguments and paths outside the workspace are rejected (error observation,
``valid=False`` -> the base class's invalid-action penalty). Tool calls that are well-formed but
fail on the current files (old_str not found, file missing, line out of range) return the error
as the observation without a penalty, as in SWE-agent. ``info`` carries RTMC ``state_sig`` (the
state *after* the step, in which the next action is taken; reset gives s_0) and ``action_sig``
(the action just executed); see ``agentrl.envs.swe.signatures``.

Known limits of the isolation: memory is capped per process (RLIMIT_AS), not per jail (no
cgroup); nothing caps the disk while a command runs (files are capped at 16 MiB each, and the
workspace size and file-count limits are enforced as soon as the command returns, before the host
reads the tree); and the test verdict is produced inside the test process, which imports the
agent's code, so code that searches the runner's memory could forge it (the result nonce comes
over stdin, never through the environment or argv, and the marker must agree with the exit code).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.envs.base import TextEnv, clip
from agentrl.envs.swe import signatures as S
from agentrl.envs.swe.sandbox import JAIL_PYTHON, RUNTIME_MOUNT, WORKDIR, Limits, Sandbox
from agentrl.envs.swe.tasks import SPLITS, Task, families, load_tasks

DEFAULT_MAX_STEPS = 30
FIXED_MTIME = 1_700_000_000  # repo files get a fixed mtime: `ls -l` output is reproducible
MAX_VIEW_BYTES = 1 << 20
IGNORED = ("__pycache__", ".pytest_cache")
# Workspace shape limits. Deeper directories are removed after a command and never walked, and the
# file tools refuse such paths: every host-side walk stays shallow (no RecursionError) and every
# path it builds stays far below PATH_MAX (4096), whatever a command made.
MAX_DEPTH = 64
MAX_REL_CHARS = 2048
# RTMC edit hashes need the text of a changed file (line diff); snapshots keep the text of small
# files only, within a total budget, and a streamed MD5 of every file (host memory stays small).
MAX_TEXT_BYTES = 64 << 10
TEXT_BUDGET = 4 << 20

TOOLS_DOC = f"""Tools (exactly one JSON object inside <action>...</action>; paths relative to {WORKDIR}):
{{"tool": "file_editor", "command": "view", "path": "pkg/mod.py", "view_range": [1, 40]}}  (view_range optional; a directory lists files)
{{"tool": "file_editor", "command": "str_replace", "path": "pkg/mod.py", "old_str": "exact old text", "new_str": "new text"}}
{{"tool": "file_editor", "command": "insert", "path": "pkg/mod.py", "insert_line": 3, "new_str": "text to add after line 3"}}
{{"tool": "file_editor", "command": "create", "path": "repro.py", "file_text": "..."}}
{{"tool": "search", "pattern": "def name", "path": "."}}
{{"tool": "bash", "command": "pytest -q"}}
{{"tool": "think", "thought": "..."}}
{{"tool": "finish"}}  (submit: the task's tests are run)"""

_SHIM_MAIN = """import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pytest
sys.exit(pytest.main())
"""
# The grading entry point: the result nonce comes on stdin (see pytest_shim.graded_main).
_GRADE_MAIN = _SHIM_MAIN.replace("pytest.main()", "pytest.graded_main()")
_RESULT = re.compile(r"@@agentrl-result ([0-9a-f]{32}) passed=(\d{1,9}) failed=(\d{1,9}) errors=(\d{1,9})",
                     re.ASCII)


class Refused(Exception):
    """The action is rejected (invalid): bad arguments or a path outside the workspace."""


class ToolError(Exception):
    """A well-formed tool call that failed on the current files (no penalty)."""


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of ``text``, marker included within ``limit`` characters."""
    if len(text) <= limit:
        return text
    room = limit - len("\n[...  characters truncated ...]\n") - len(str(len(text)))
    if room < 2:
        return text[:limit]
    head, tail = room - room // 2, room // 2
    return f"{text[:head]}\n[... {len(text) - head - tail} characters truncated ...]\n{text[len(text) - tail:]}"


def _short(value: Any) -> str:
    """repr of an argument echoed in a message, clipped like every env's echoes."""
    return clip(repr(value))


def _numbered(lines: list[str], start: int) -> str:
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(lines, start))


class SWEEnv(TextEnv):
    """Bug-fixing in tiny Python repositories (see the module docstring)."""

    env_title = "a Python repository (software engineering)"

    def __init__(self, invalid_action_penalty: float = 0.1, history_length: int = 2,
                 render_mode: str | None = None, max_steps: int | None = None,
                 max_obs_chars: int = 3000, command_timeout: float = 10.0, grade_timeout: float = 30.0,
                 memory_mb: int = 512, nproc: int = 16, validation_shaping: bool = False,
                 validation_beta: float = 0.05, shape_every_validation: bool = True,
                 workspace_limit_mb: int = 32, jail_uid: int | None = None,
                 workspace_limit_files: int = 5000):
        """
        Args:
            invalid_action_penalty: subtracted from the reward of a rejected action (base class).
            history_length: (observation, action) pairs shown by ``prompt`` (base class).
            render_mode: only "ansi" (the last observation).
            max_steps: step limit at which the episode is graded and ends; None = the registered
                ``max_episode_steps`` (30) or 30.
            max_obs_chars: observations are cut to this many characters (head + tail kept).
            command_timeout: wall-clock limit of one bash command, seconds.
            grade_timeout: wall-clock limit of the grading test run, seconds.
            memory_mb: address-space limit per sandboxed process, MiB. There is no cgroup: a
                command's total memory is bounded by nproc x memory_mb (8 GiB by default).
            nproc: process (and thread) limit of the sandbox's uid.
            validation_shaping: add RTMC's validation bonus (rtmc.md Eq. 12).
            validation_beta: the bonus beta (paper: 0.05).
            shape_every_validation: True = every test run after a modification earns beta (Eq. 12
                as written); False = only the first test run after each new modification.
            workspace_limit_mb: right after a command, the largest files (not the task's) are
                deleted until the workspace is within this total.
            jail_uid: host uid the sandbox runs as when we are root (None = a free one per env);
                inside the jail it is always uid 1000.
            workspace_limit_files: right after a command, entries (files, directories, links)
                beyond this count are deleted, the ones the command made first.
        """
        super().__init__(invalid_action_penalty=invalid_action_penalty, history_length=history_length,
                         render_mode=render_mode)
        if max_obs_chars < 200:
            raise ValueError(f"max_obs_chars must be >= 200, got {max_obs_chars}")
        self.max_steps = max_steps
        self.max_obs_chars = int(max_obs_chars)
        self.command_timeout = float(command_timeout)
        self.grade_timeout = float(grade_timeout)
        self.validation_shaping = bool(validation_shaping)
        self.validation_beta = float(validation_beta)
        self.shape_every_validation = bool(shape_every_validation)
        self.workspace_limit = int(workspace_limit_mb) << 20
        self.workspace_limit_files = int(workspace_limit_files)
        self.tasks = load_tasks()
        self._base = Path(tempfile.mkdtemp(prefix="agentrl-swe-"))
        self._finalizer = weakref.finalize(self, _rmtree, self._base)
        self.repo = self._base / "repo"
        self.repo.mkdir()
        runtime = self._base / "runtime"
        self._write_runtime(runtime)
        self.sandbox = Sandbox(self.repo, runtime, Limits(wall_s=self.command_timeout, memory_mb=memory_mb,
                                                          nproc=nproc), jail_uid=jail_uid)
        self.sandbox.give(self._base)
        self.task: Task | None = None
        self.tracker = S.SignatureTracker()
        self._action_sig: str | None = None
        self._done = False
        self._validated = False
        self._snap_cache: dict[str, FileState] = {}

    # --- setup ---------------------------------------------------------------------------------
    @staticmethod
    def _write_runtime(runtime: Path) -> None:
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

    def _limit(self) -> int:
        if self.max_steps is not None:
            return int(self.max_steps)
        spec = getattr(self, "spec", None)
        return int(spec.max_episode_steps) if spec is not None and spec.max_episode_steps else DEFAULT_MAX_STEPS

    def _materialize(self, root: Path, files: dict[str, str]) -> None:
        _rmtree(root)
        root.mkdir()
        for rel, text in sorted(files.items()):
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        for p in sorted(root.rglob("*"), reverse=True):
            os.utime(p, (FIXED_MTIME, FIXED_MTIME))
        os.utime(root, (FIXED_MTIME, FIXED_MTIME))
        self.sandbox.give(root)

    # --- TextEnv contract ----------------------------------------------------------------------
    def _reset_task(self, seed, options):
        unknown = set(options) - {"split", "families", "task_id"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; valid: split, families, task_id")
        if "task_id" in options:
            by_id = {t.id: t for t in self.tasks}
            if options["task_id"] not in by_id:
                raise ValueError(f"unknown task_id {options['task_id']!r}; valid: {sorted(by_id)}")
            task = by_id[options["task_id"]]
        else:
            split = options.get("split", "train")
            if split not in SPLITS:
                raise ValueError(f"unknown split {split!r}; valid: {list(SPLITS)}")
            fams = options.get("families")
            if fams is not None:
                bad = sorted(set(fams) - set(families()))
                if bad:
                    raise ValueError(f"unknown task families {bad}; valid: {families()}")
            pool = [t for t in self.tasks if t.split == split and (fams is None or t.family in fams)]
            if not pool:
                raise ValueError(f"no SWE task in split {split!r} for families {fams}")
            idx = seed % len(pool) if seed is not None else int(self.np_random.integers(len(pool)))
            task = pool[idx]
        self.task = task
        self._materialize(self.repo, task.files)
        self._snap_cache = {}
        self.tracker = S.SignatureTracker()
        self._action_sig = None
        self._done = False
        self._validated = False
        text = (f"Fix the bug described in this issue in the Python repository at {WORKDIR}, then call "
                f"finish. The test suite ({', '.join(task.tests)}) must pass; do not edit the tests.\n"
                f"Issue: {task.issue}")
        obs = f"Repository {WORKDIR}:\n" + self._tree(self.repo, ".")
        return text, obs, task.family, {"task_id": task.id}

    def step(self, response: str):
        if self._done:
            info = self._info(action=None, valid=True, extra={"task_id": self.task.id})
            return "The episode is over; call reset().", 0.0, True, False, info
        obs, reward, terminated, truncated, info = super().step(response)
        if not terminated and self._steps >= self._limit():
            won, summary, counts = self._grade()
            self._done = True
            self._won = won
            # the step's own output is cut first, so that the note and the verdict survive
            obs = truncate(obs, self.max_obs_chars // 3)
            obs = self._obs = truncate(f"{obs}\n[Step limit reached: the repository was submitted.]\n{summary}",
                                       self.max_obs_chars)
            reward += 1.0 if won else 0.0
            terminated = True
            info.update(won=won, graded_at_step_limit=True, **counts)
        return obs, reward, terminated, truncated, info

    def _execute(self, action: str):
        extra: dict[str, Any] = {"task_id": self.task.id}
        try:
            call = json.loads(action, strict=False)
        except json.JSONDecodeError as e:
            return self._reject(f"Invalid action: the body of <action> must be one JSON object ({e.msg}).", extra)
        except (ValueError, RecursionError):  # an integer over Python's digit limit; nesting too deep
            return self._reject("Invalid action: the body of <action> must be one JSON object "
                                "(a number too long or nesting too deep).", extra)
        if not isinstance(call, dict):
            return self._reject("Invalid action: the body of <action> must be a JSON object.", extra)
        tool = call.get("tool")
        handler = None
        if isinstance(tool, str):  # a list or an object is unhashable: it cannot be looked up
            handler = {"file_editor": self._file_editor, "search": self._search, "bash": self._bash,
                       "think": self._think, "finish": self._finish}.get(tool)
        if handler is None:
            return self._reject(f"Invalid action: unknown tool {_short(tool)}; valid tools: file_editor, search, "
                                "bash, think, finish.", extra)
        extra["tool"] = tool
        try:
            obs, reward, terminated, sig = handler(call, extra)
        except Refused as e:
            return self._reject(f"Invalid action: {e}", extra)
        except ValueError as e:  # e.g. a NUL byte or a lone surrogate in a path or text
            return self._reject(f"Invalid action: bad argument ({e}).", extra)
        except OSError as e:  # the workspace refused the operation (permissions changed by a command)
            obs, reward, terminated, sig = f"ERROR: {e.strerror or e}", 0.0, False, f"{tool}:error"
        self._action_sig = sig
        return truncate(obs, self.max_obs_chars), reward, terminated, True, extra

    def _reject(self, message: str, extra: dict):
        self._action_sig = "invalid"
        return truncate(message, self.max_obs_chars), 0.0, False, False, extra

    def signatures(self, action: str | None) -> dict[str, str]:
        out = {"state_sig": self.tracker.state_sig()}
        if self._steps > 0:
            out["action_sig"] = self._action_sig if action is not None else "invalid"
        return out

    def prompt(self, obs, info, history, step, history_length=None) -> str:
        text = super().prompt(obs, info, history, step, history_length)
        head, _, last = text.rpartition("\n")
        return f"{head}\n{TOOLS_DOC}\n{last}"

    def close(self):
        self._finalizer()
        super().close()

    # --- argument checks -----------------------------------------------------------------------
    @staticmethod
    def _arg(call: dict, name: str, kind: type, required: bool = True, default=None):
        if name not in call or call[name] is None:
            if required:
                raise Refused(f"missing argument {name!r} for {call.get('tool')}"
                              + (f" {_short(call['command'])}" if "command" in call and call.get("tool") == "file_editor"
                                 else ""))
            return default
        value = call[name]
        if kind is int and isinstance(value, bool) or not isinstance(value, kind):
            raise Refused(f"argument {name!r} must be {'an integer' if kind is int else 'a string' if kind is str else kind.__name__}")
        return value

    def _resolve(self, path: str) -> tuple[str, Path]:
        """(path relative to the repo, host path); refuses anything outside the workspace."""
        if not path.strip():
            raise Refused("empty path")
        p = path.strip()
        if p.startswith("/"):
            if p != WORKDIR and not p.startswith(WORKDIR + "/"):
                raise Refused(f"path {_short(p)} is outside the workspace {WORKDIR}")
            p = p[len(WORKDIR):].lstrip("/") or "."
        rel = os.path.normpath(p)
        if rel == ".." or rel.startswith("../") or rel.startswith("/"):
            raise Refused(f"path {_short(path)} is outside the workspace {WORKDIR}")
        if rel.count("/") >= MAX_DEPTH or len(rel) > MAX_REL_CHARS:
            raise Refused(f"path {_short(path)} is too deep (at most {MAX_DEPTH} components, "
                          f"{MAX_REL_CHARS} characters)")
        host = self.repo / rel
        real, root = os.path.realpath(host), os.path.realpath(self.repo)
        if real != root and not real.startswith(root + os.sep):
            raise Refused(f"path {_short(path)} leads outside the workspace {WORKDIR}")
        return ("." if rel == "." else rel), host

    def _read_text(self, rel: str, host: Path) -> str:
        try:
            st = os.stat(host)
        except OSError:
            raise ToolError(f"The path {WORKDIR}/{rel} does not exist.") from None
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{WORKDIR}/{rel} is not a regular file.")
        if st.st_size > MAX_VIEW_BYTES:
            raise ToolError(f"{WORKDIR}/{rel} is too large ({st.st_size} bytes) to open.")
        return host.read_bytes().decode("utf-8", "replace")

    def _write_text(self, host: Path, text: str) -> None:
        data = text.encode("utf-8")  # fails (ValueError) before anything is touched
        new_dirs = []
        parent = host.parent
        while not parent.exists():
            new_dirs.append(parent)
            parent = parent.parent
        host.parent.mkdir(parents=True, exist_ok=True)
        if host.exists():
            # Replace rather than write through: never follow a symlink or write into a FIFO.
            host.unlink()
        host.write_bytes(data)
        for p in [host, *new_dirs]:
            self.sandbox.give(p)

    # --- tools ---------------------------------------------------------------------------------
    def _file_editor(self, call: dict, extra: dict):
        command = self._arg(call, "command", str)
        if command not in ("view", "create", "str_replace", "insert"):
            raise Refused(f"unknown file_editor command {_short(command)}; valid: view, create, str_replace, insert")
        rel, host = self._resolve(self._arg(call, "path", str))
        extra["command"] = command
        try:
            return getattr(self, f"_fe_{command}")(call, rel, host)
        except ToolError as e:
            kind = {"view": "view", "create": "create", "str_replace": "modify:replace", "insert": "modify:insert"}[command]
            return f"ERROR: {e}", 0.0, False, f"{kind}@{rel}:error"

    def _fe_view(self, call, rel, host):
        rng = call.get("view_range")
        if rng is not None and (not isinstance(rng, list) or len(rng) != 2
                                or not all(isinstance(x, int) and not isinstance(x, bool) for x in rng)):
            raise Refused("view_range must be a list of two integers [start, end] (end -1 = to the end)")
        if host.is_dir() and not host.is_symlink():
            self.tracker.add(rel, "S")
            return f"Files under {WORKDIR}/{rel if rel != '.' else ''}:\n" + self._tree(host, rel), 0.0, False, f"search@{rel}"
        lines = self._read_text(rel, host).splitlines()
        if rng is None:
            self.tracker.add(rel, "Vf")
            return f"{WORKDIR}/{rel}:\n" + _numbered(lines, 1), 0.0, False, f"view:full@{rel}"
        start, end = rng
        end = len(lines) if end == -1 else end
        if not 1 <= start <= max(len(lines), 1) or end < start:
            raise ToolError(f"invalid view_range {rng}: the file has {len(lines)} lines (1-based, end >= start or -1)")
        end = min(end, len(lines))
        bs = S.buckets(start, end)
        for b in bs:
            self.tracker.add(rel, f"V[{b}]")
        return (f"{WORKDIR}/{rel} lines {start}-{end}:\n" + _numbered(lines[start - 1:end], start), 0.0, False,
                f"view:{S.bucket_scope(bs)}@{rel}")

    def _fe_create(self, call, rel, host):
        text = self._arg(call, "file_text", str)
        if os.path.lexists(host):
            raise ToolError(f"{WORKDIR}/{rel} already exists; edit it with str_replace or insert.")
        self._write_text(host, text)
        self.tracker.add(rel, "C")
        self._validated = False
        return f"File created: {WORKDIR}/{rel}", 0.0, False, f"create@{rel}"

    def _edited(self, rel, host, before, after):
        self._write_text(host, after)
        kind, h = S.edit_op(before, after)
        self.tracker.add(rel, f"{'I' if kind == 'insert' else 'M'}:{h}")
        self._validated = False
        # a snippet around the change, as SWE-agent shows
        a, b = before.splitlines(), after.splitlines()
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        lo, hi = max(first - 3, 0), min(first + 4 + max(len(b) - len(a), 0), len(b))
        snippet = _numbered(b[lo:hi], lo + 1)
        return (f"The file {WORKDIR}/{rel} has been edited. Snippet of the result:\n{snippet}\n"
                "Review the change; run the tests to check it.", 0.0, False, f"modify:{kind}:{h}@{rel}")

    def _fe_str_replace(self, call, rel, host):
        old = self._arg(call, "old_str", str)
        new = self._arg(call, "new_str", str, required=False, default="")
        if old == "":
            raise Refused("old_str must not be empty")
        before = self._read_text(rel, host)
        n = before.count(old)
        if n == 0:
            raise ToolError(f"old_str was not found verbatim in {WORKDIR}/{rel}.")
        if n > 1:
            raise ToolError(f"old_str occurs {n} times in {WORKDIR}/{rel}; include more context to make it unique.")
        return self._edited(rel, host, before, before.replace(old, new, 1))

    def _fe_insert(self, call, rel, host):
        line = self._arg(call, "insert_line", int)
        new = self._arg(call, "new_str", str)
        before = self._read_text(rel, host)
        lines = before.splitlines(keepends=True)
        if not 0 <= line <= len(lines):
            raise ToolError(f"insert_line {line} is out of range: the file has {len(lines)} lines (0 = top).")
        if lines and not lines[-1].endswith("\n") and line == len(lines):
            lines[-1] += "\n"
        add = new if new.endswith("\n") else new + "\n"
        return self._edited(rel, host, before, "".join(lines[:line]) + add + "".join(lines[line:]))

    def _search(self, call: dict, extra: dict):
        pattern = self._arg(call, "pattern", str)
        if not pattern:
            raise Refused("pattern must not be empty")
        rel, host = self._resolve(self._arg(call, "path", str, required=False, default="."))
        if not os.path.lexists(host):
            return f"ERROR: The path {WORKDIR}/{rel} does not exist.", 0.0, False, f"search@{rel}:error"
        files = [host]
        if host.is_dir() and not host.is_symlink():
            entries, _ = _scan(host)  # never follows symlinks (no escapes, no loops); depth-capped
            files = [host / r for r, _st in sorted(entries, key=lambda e: e[0].split("/"))
                     if not any(part.startswith(".") or part in IGNORED for part in r.split("/"))]
        hits = []
        for p in files:
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_VIEW_BYTES:
                continue
            try:
                text = p.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            prel = p.relative_to(self.repo).as_posix()
            hits += [f"{prel}:{i}: {line.strip()[:200]}" for i, line in enumerate(text.splitlines(), 1)
                     if pattern in line]
        self.tracker.add(rel, "S")
        if not hits:
            return (f"No matches for {_short(pattern)} in {WORKDIR}/{rel if rel != '.' else ''}", 0.0, False,
                    f"search@{rel}")
        more = f"\n[{len(hits) - 50} more matches]" if len(hits) > 50 else ""
        return (f"{len(hits)} match(es) for {_short(pattern)}:\n" + "\n".join(hits[:50]) + more, 0.0, False,
                f"search@{rel}")

    def _bash(self, call: dict, extra: dict):
        command = self._arg(call, "command", str)
        if not command.strip():
            raise Refused("command must not be empty")
        entries, _ = _scan(self.repo)
        before = self._snapshot(entries)
        had_mods = self.tracker.modified
        res = self.sandbox.run(["/bin/bash", "-c", command])
        # Limits first: what the command left is never read before it is back within them.
        note = self._enforce_workspace_limits({rel for rel, _st in entries})
        after = self._snapshot()
        out = res.output.rstrip("\n")
        if res.timed_out:
            out += f"\n[The command timed out after {self.command_timeout:g} s and was killed.]"
        elif res.exit_code:
            out += f"\n[exit code {res.exit_code}]"
        out = (out or "(no output)") + note
        ok = res.exit_code == 0
        cat, target, rng = S.classify_bash(command)
        target = self._norm_target(target)
        changed = sorted(p for p in after if p not in before or after[p].digest != before[p].digest)
        created = [p for p in changed if p not in before]
        removed = sorted(p for p in before if p not in after)
        for p in changed:  # record every real change in the state
            if p in created:
                self.tracker.add(p, "C")
            else:
                kind, h = _edit_op(before[p], after[p])
                self.tracker.add(p, f"{'I' if kind == 'insert' else 'M'}:{h}")
        if changed:
            self._validated = False
        reward = 0.0
        if cat == "test":
            self.tracker.flags["test_ok" if ok else "test_err"] += 1
            if self.validation_shaping and had_mods and (self.shape_every_validation or not self._validated):
                reward += self.validation_beta  # rtmc.md Eq. 12
                extra["validation_bonus"] = self.validation_beta
            self._validated = True
            sig = f"test@{target}:{'ok' if ok else 'error'}"
        elif cat in ("install", "fileop"):
            if cat == "fileop":
                for p in removed or [target]:
                    self.tracker.add(p, "F")
            sig = f"install@{target}:{'ok' if ok else 'error'}" if cat == "install" else f"fileop@{target}"
        elif changed:
            p = [q for q in changed if q not in created][:1] or created[:1]
            if p[0] in created:
                sig = f"create@{p[0]}"
            else:
                kind, h = _edit_op(before[p[0]], after[p[0]])
                sig = f"modify:{kind}:{h}@{p[0]}"
        elif cat == "view":
            sig = self._bash_view(target, rng)
        elif cat == "search":
            self.tracker.add(target, "S")
            sig = f"search@{target}"
        else:
            self.tracker.flags["exec_ok" if ok else "exec_err"] += 1
            sig = f"execute@{target}:{'ok' if ok else 'error'}"
        extra["exit_code"] = res.exit_code
        extra["timed_out"] = res.timed_out
        return out, reward, False, sig

    def _bash_view(self, target: str, rng):
        """Signature of a cat/head/tail/sed-style view. The target comes from the command's text, so
        it is resolved like a file tool's path: only a regular file inside the workspace is read
        (for tail's line count); anything else (/etc/shadow, /proc/kmsg, a FIFO) is never opened
        on the host, and the view is recorded without a line range."""
        host = self._workspace_file(target)
        if rng is None or host is None:
            self.tracker.add(target, "Vf")
            return f"view:full@{target}"
        start, end = rng
        if start < 0:  # tail -n N
            try:
                n = len(self._read_text(target, host).splitlines())
            except (ToolError, OSError):
                n = 0
            start, end = max(n + start + 1, 1), max(n, 1)
        bs = S.buckets(start, end)
        for b in bs:
            self.tracker.add(target, f"V[{b}]")
        return f"view:{S.bucket_scope(bs)}@{target}"

    def _workspace_file(self, target: str) -> Path | None:
        """Host path of ``target`` when it is a regular file inside the workspace, else None."""
        try:
            _, host = self._resolve(target)
            st = os.stat(host)  # symlinks may be followed: _resolve checked where they lead
        except (Refused, ValueError, OSError):
            return None
        return host if stat.S_ISREG(st.st_mode) else None

    @staticmethod
    def _norm_target(target: str) -> str:
        if target.startswith(WORKDIR):
            target = target[len(WORKDIR):].lstrip("/") or "."
        if target.startswith("/"):
            return target
        return os.path.normpath(target)

    def _think(self, call: dict, extra: dict):
        self._arg(call, "thought", str, required=False, default="")
        self.tracker.flags["think"] += 1
        return "Your thought has been logged.", 0.0, False, "think"

    def _finish(self, call: dict, extra: dict):
        won, summary, counts = self._grade()
        self._done = True
        extra.update(won=won, **counts)
        return f"Submitted.\n{summary}", (1.0 if won else 0.0), True, "finish"

    # --- workspace -----------------------------------------------------------------------------
    def _snapshot(self, entries: list[tuple[str, os.stat_result]] | None = None) -> dict[str, FileState]:
        """State of every non-directory entry of the workspace (``_scan``'s entries, or a new scan).

        Files are hashed by streaming; only small ones keep their text (for RTMC line diffs).
        A file whose (mode, size, mtime, ctime, inode) did not change since the last snapshot is
        not read again (ctime cannot be set by a command)."""
        if entries is None:
            entries, _ = _scan(self.repo)
        out: dict[str, FileState] = {}
        budget = TEXT_BUDGET
        for rel, st in sorted(entries):
            if stat.S_ISDIR(st.st_mode) or any(part in IGNORED for part in rel.split("/")):
                continue
            key = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            want_text = not stat.S_ISREG(st.st_mode) or st.st_size <= min(MAX_TEXT_BYTES, budget)
            state = self._snap_cache.get(rel)
            if state is None or state.key != key or (want_text and state.text is None):
                state = _file_state(self.repo / rel, st, key, want_text)
                if state is None:
                    continue
            elif not want_text and state.text is not None:
                state = FileState(key, state.digest, None)
            if state.text is not None and stat.S_ISREG(st.st_mode):
                budget -= st.st_size
            out[rel] = state
        self._snap_cache = out
        return out

    def _enforce_workspace_limits(self, known: set[str]) -> str:
        """Bring the workspace back within its limits right after a command; returns a note for
        the observation. Directories too deep to walk are removed; then the largest files while
        the total size is over the limit; then entries while their count is over it (those the
        command made, ``known`` = what existed before, go first). The task's files and their
        directories are never removed."""
        notes = []
        entries, too_deep = _scan(self.repo)
        for rel in too_deep:
            _rmtree(self.repo / rel)
        if too_deep:
            gone = set(too_deep)
            entries = [(r, st) for r, st in entries if r not in gone]
            notes.append(f"directories nested deeper than {MAX_DEPTH} levels (or paths longer than "
                         f"{MAX_REL_CHARS} characters) were removed: {_names(too_deep)}")
        protected = set(self.task.files)
        for rel in self.task.files:
            while "/" in rel:
                rel = rel.rpartition("/")[0]
                protected.add(rel)
        files = [(st.st_size, rel) for rel, st in entries if not stat.S_ISDIR(st.st_mode)]
        total = sum(size for size, _ in files)
        if total > self.workspace_limit:
            removed = []
            for size, rel in sorted(files, reverse=True):
                if total <= self.workspace_limit:
                    break
                if rel in protected:
                    continue
                try:
                    os.unlink(self.repo / rel)
                except OSError:
                    continue
                total -= size
                removed.append(rel)
            gone = set(removed)
            entries = [(r, st) for r, st in entries if r not in gone]
            notes.append(f"The workspace exceeded {self.workspace_limit >> 20} MiB; removed: {_names(removed)}")
        count = len(entries)
        if count > self.workspace_limit_files:
            dirs = {rel for rel, st in entries if stat.S_ISDIR(st.st_mode)}
            rels = [rel for rel, _ in entries if rel not in protected]
            # newest first; reverse order puts a directory's entries before the directory
            order = (sorted((r for r in rels if r not in known), reverse=True)
                     + sorted((r for r in rels if r in known), reverse=True))
            removed = []
            for rel in order:
                if count <= self.workspace_limit_files:
                    break
                try:
                    (os.rmdir if rel in dirs else os.unlink)(self.repo / rel)
                except OSError:
                    continue
                count -= 1
                removed.append(rel)
            notes.append(f"The workspace exceeded {self.workspace_limit_files} files and directories; "
                         f"removed {len(removed)}: {_names(removed)}")
        return "".join(f"\n[{n}]" for n in notes)

    def _tree(self, host: Path, rel: str, depth: int = 2) -> str:
        lines = []

        def walk(d: Path, level: int):
            try:
                entries = sorted(d.iterdir(), key=lambda p: p.name)
            except OSError:
                return
            for p in entries:
                if p.name.startswith(".") or p.name in IGNORED:
                    continue
                is_dir = p.is_dir() and not p.is_symlink()
                lines.append("  " * level + p.name + ("/" if is_dir else ""))
                if is_dir and level + 1 < depth:
                    walk(p, level + 1)
        walk(host, 0)
        return "\n".join(lines) if lines else "(empty)"

    # --- grading and expert --------------------------------------------------------------------
    def _grade(self) -> tuple[bool, str, dict]:
        """Run the task's pristine test files against the agent's repository, in the jail."""
        task = self.task
        grade = self._base / "grade"
        nonce = os.urandom(16).hex()
        try:
            _rmtree(grade)
            self._grading_copy(grade)
            # The nonce goes over stdin, not the environment or argv (both readable in /proc).
            # A mitigation only: the verdict is printed by the process that imports the agent's
            # code, which can still find the nonce by scanning that process's memory.
            res = self.sandbox.run([JAIL_PYTHON, "-I", "-B", f"{RUNTIME_MOUNT}/lib/pytest/_grade.py", "-q",
                                    *task.tests], workspace=grade, stdin=nonce.encode() + b"\n",
                                   wall_s=self.grade_timeout)
        finally:
            _rmtree(grade)
        counts, lines = _parse_result(res.output, nonce, res.exit_code)
        passed, failed, errors = counts or (0, 0, 0)
        won = counts is not None and failed == 0 and errors == 0 and passed == task.num_tests
        if res.timed_out:
            lines.append(f"[The test suite timed out after {self.grade_timeout:g} s.]")
        elif counts is None:
            lines.append("[The test run did not complete.]")
        verdict = "All tests pass: the issue is resolved." if won else "The tests do not pass: the issue is not resolved."
        summary = truncate("\n".join(lines).strip(), self.max_obs_chars - 200) + "\n" + verdict
        return won, summary, {"tests_passed": passed, "tests_failed": failed + errors}

    def _grading_copy(self, grade: Path) -> None:
        """Copy the repository to ``grade`` and put the task's pristine test files in it.

        Nothing here follows a link the agent made: links are copied as links, the test paths
        are left out of the copy, and ``_place_file`` writes each test file into real directories
        made for it (a link such as ``tests -> /etc`` in the copy is replaced, never written
        through, even though we may be root)."""
        tests = set(self.task.tests)
        entries, _ = _scan(self.repo)
        grade.mkdir()
        made = {""}  # directories copied so far ("" = the root)
        for rel, st in sorted(entries):  # a directory sorts before its entries
            if rel.rpartition("/")[0] not in made or rel in tests or any(p in IGNORED for p in rel.split("/")):
                continue
            src, dst = self.repo / rel, grade / rel
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
        for rel in self.task.tests:
            _place_file(grade, rel, self.task.files[rel])
        self.sandbox.give(grade)

    def expert_action(self) -> str | None:
        """Replay the reference patch (str_replace), run the tests once after it, then finish."""
        if self.task is None or self._done:
            return None
        seen = []
        for edit in self.task.patch:
            if edit["path"] in seen:
                continue
            seen.append(edit["path"])
            path = edit["path"]
            states = self.task.patch_states(path)
            host = self.repo / path
            current = None
            if host.is_file() and not host.is_symlink():
                current = host.read_bytes().decode("utf-8", "replace")
            if current == states[-1]:
                continue
            if current is None:
                if os.path.lexists(host):
                    return json.dumps({"tool": "bash", "command": f"rm -rf {path}"})
                return json.dumps({"tool": "file_editor", "command": "create", "path": path, "file_text": states[-1]})
            if current in states[:-1]:
                i = states.index(current)
                step = [e for e in self.task.patch if e["path"] == path][i]
                return json.dumps({"tool": "file_editor", "command": "str_replace", "path": path,
                                   "old_str": step["old"], "new_str": step["new"]})
            if current == "":
                return json.dumps({"tool": "file_editor", "command": "insert", "path": path,
                                   "insert_line": 0, "new_str": states[-1]})
            return json.dumps({"tool": "file_editor", "command": "str_replace", "path": path,
                               "old_str": current, "new_str": states[-1]})
        if not self._validated:
            return json.dumps({"tool": "bash", "command": "pytest -q"})
        return json.dumps({"tool": "finish"})


def _scan(root: Path) -> tuple[list[tuple[str, os.stat_result]], list[str]]:
    """Every entry under ``root`` as (relative path, lstat), and the directories not walked.

    Iterative and never follows a symlink. A directory at MAX_DEPTH components, or with a path
    over MAX_REL_CHARS characters, is listed but not entered (second list): a command can nest
    directories thousands deep, which would overflow Python's recursion and PATH_MAX."""
    entries: list[tuple[str, os.stat_result]] = []
    too_deep: list[str] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(root / rel_dir) as it:
                children = sorted((e.name, e) for e in it)
        except OSError:
            continue
        for name, e in children:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            entries.append((rel, st))
            if stat.S_ISDIR(st.st_mode):
                if rel.count("/") + 1 >= MAX_DEPTH or len(rel) > MAX_REL_CHARS:
                    too_deep.append(rel)
                else:
                    stack.append(rel)
    return entries, sorted(too_deep)


@dataclass(frozen=True)
class FileState:
    """One workspace entry in a snapshot."""

    key: tuple
    """(mode, size, mtime_ns, ctime_ns, inode): unchanged key = unchanged content."""
    digest: str
    """MD5 of the content (of ``-> target`` for a link)."""
    text: str | None
    """The content as text when small enough to keep, else None."""


def _file_state(path: Path, st: os.stat_result, key: tuple, want_text: bool) -> FileState | None:
    """Hash one entry; a regular file is read in chunks and only its small text is kept."""
    if stat.S_ISLNK(st.st_mode):
        try:
            text = "-> " + os.readlink(path)
        except OSError:
            return None
    elif not stat.S_ISREG(st.st_mode):
        text = "<special file>"  # a FIFO or a device is never opened
    else:
        md5, data = hashlib.md5(), bytearray()
        try:
            with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as fh:
                while chunk := fh.read(1 << 18):
                    md5.update(chunk)
                    if want_text:
                        data += chunk
        except OSError:
            return None
        text = data.decode("utf-8", "replace") if want_text else None
        return FileState(key, md5.hexdigest(), text)
    return FileState(key, hashlib.md5(text.encode("utf-8", "replace")).hexdigest(), text)


def _edit_op(before: FileState, after: FileState) -> tuple[str, str]:
    """RTMC ('replace'|'insert', hash) of a change; without both texts (a big file) there is no
    line diff, so the hash covers the two contents' digests."""
    if before.text is not None and after.text is not None:
        return S.edit_op(before.text, after.text)
    return "replace", S.edit_hash(before.digest, after.digest)


def _names(rels: list[str], limit: int = 10) -> str:
    """A short list of paths for a note."""
    shown = [clip(r) for r in rels[:limit]]
    return ", ".join(shown) + (f" and {len(rels) - limit} more" if len(rels) > limit else "")


def _parse_result(output: str, nonce: str, exit_code: int | None) -> tuple[tuple[int, int, int] | None, list[str]]:
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


def _place_file(root: Path, rel: str, text: str) -> None:
    """Write ``root/rel`` through real directories only: a link or a file on the way is replaced
    by a new directory, and the final directory is checked (realpath) to be inside ``root``."""
    *parents, name = rel.split("/")
    d = root
    for part in parents:
        d = d / part
        if os.path.islink(d) or (os.path.lexists(d) and not os.path.isdir(d)):
            os.unlink(d)
        if not os.path.lexists(d):
            os.mkdir(d)
    if os.path.realpath(d) != os.path.join(os.path.realpath(root), *parents):
        raise RuntimeError(f"refusing to write {rel}: its directory leads outside {root}")
    p = d / name
    if os.path.isdir(p) and not os.path.islink(p):
        _rmtree(p)
    elif os.path.lexists(p):
        os.unlink(p)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _rmtree(path: Path) -> None:
    """Remove a tree even where a sandboxed command dropped permissions (when not root) or nested
    directories too deep for shutil.rmtree (which recurses) or for PATH_MAX: then ``rm -rf``."""
    if not os.path.lexists(path):
        return

    def onerror(func, p, exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if not os.path.islink(p):  # chmod would follow a link out of the tree
                os.chmod(p, 0o700)
        except OSError:
            pass
        try:
            func(p)
        except OSError:
            pass
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        elif sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=onerror)
        else:
            shutil.rmtree(path, onerror=onerror)
    except (OSError, RecursionError):
        pass
    if os.path.lexists(path):
        if os.geteuid() != 0:
            subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], stdin=subprocess.DEVNULL,
                           capture_output=True, check=False)
        subprocess.run(["rm", "-rf", "--", str(path)], stdin=subprocess.DEVNULL, capture_output=True, check=False)
