"""The SWE env's tools: one JSON tool call in, an :class:`Outcome` out.

``file_editor`` (view/create/str_replace/insert) and ``search`` run on the host over the
:class:`~agentrl_envs.swe.workspace.Workspace`; ``bash`` runs in the jail
(:mod:`agentrl_envs.swe.sandbox`); ``think`` is logged; ``finish`` submits (the env grades). Every call also
updates the RTMC state (a :class:`~agentrl_envs.swe.signatures.SignatureTracker`) and names its
action signature. Rejections (malformed JSON, unknown tool or command, missing or ill-typed
arguments, paths outside the workspace) raise :class:`Refused`; well-formed calls that fail on
the current files return the error as the observation, without a penalty, as in SWE-agent.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl_envs.swe import signatures as S
from agentrl_envs.swe.sandbox import WORKDIR, Sandbox
from agentrl_envs.swe.workspace import (
    IGNORED,
    MAX_VIEW_BYTES,
    FileState,
    Refused,
    ToolError,
    Workspace,
    edit_op,
    scan,
    short,
)

TOOLS_DOC = f"""Tools (exactly one JSON object inside <action>...</action>; paths relative to {WORKDIR}):
{{"tool": "file_editor", "command": "view", "path": "pkg/mod.py", "view_range": [1, 40]}}  (view_range optional; a directory lists files)
{{"tool": "file_editor", "command": "str_replace", "path": "pkg/mod.py", "old_str": "exact old text", "new_str": "new text"}}
{{"tool": "file_editor", "command": "insert", "path": "pkg/mod.py", "insert_line": 3, "new_str": "text to add after line 3"}}
{{"tool": "file_editor", "command": "create", "path": "repro.py", "file_text": "..."}}
{{"tool": "search", "pattern": "def name", "path": "."}}
{{"tool": "bash", "command": "pytest -q"}}
{{"tool": "think", "thought": "..."}}
{{"tool": "finish"}}  (submit: the task's tests are run)"""
TOOL_NAMES = ("file_editor", "search", "bash", "think", "finish")
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert")
MAX_SEARCH_HITS = 50


@dataclass
class Outcome:
    """What one accepted tool call did."""

    obs: str
    sig: str
    """RTMC action signature of the call."""
    submitted: bool = False
    """``finish``: the env grades the repository and ends the episode."""
    validation: bool = False
    """A test run after a modification of the workspace (RTMC's validation, Eq. 12)."""
    first_validation: bool = False
    """... and the first test run since that modification."""


def _arg(call: dict, name: str, kind: type, required: bool = True, default=None):
    """``call[name]`` checked to be a ``kind``; Refused when missing (if required) or ill-typed."""
    if name not in call or call[name] is None:
        if required:
            what = f" {short(call['command'])}" if "command" in call and call.get("tool") == "file_editor" else ""
            raise Refused(f"missing argument {name!r} for {call.get('tool')}{what}")
        return default
    value = call[name]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise Refused(f"argument {name!r} must be {'an integer' if kind is int else 'a string' if kind is str else kind.__name__}")
    return value


def _numbered(lines: list[str], start: int) -> str:
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(lines, start))


def parse_call(action: str) -> dict:
    """The action body as a JSON object naming a known tool; Refused otherwise."""
    try:
        call = json.loads(action, strict=False)
    except json.JSONDecodeError as e:
        raise Refused(f"the body of <action> must be one JSON object ({e.msg}).") from None
    except (ValueError, RecursionError):  # an integer over Python's digit limit; nesting too deep
        raise Refused("the body of <action> must be one JSON object "
                      "(a number too long or nesting too deep).") from None
    if not isinstance(call, dict):
        raise Refused("the body of <action> must be a JSON object.")
    tool = call.get("tool")
    if not isinstance(tool, str) or tool not in TOOL_NAMES:  # a list or an object is unhashable
        raise Refused(f"unknown tool {short(tool)}; valid tools: {', '.join(TOOL_NAMES)}.")
    return call


class Tools:
    """The tools of one env instance; :meth:`start` begins an episode's state."""

    def __init__(self, workspace: Workspace, sandbox: Sandbox, command_timeout: float):
        self.ws = workspace
        self.sandbox = sandbox
        self.command_timeout = float(command_timeout)
        self.start()

    def start(self, task_files=()) -> None:
        """Forget the last episode: RTMC state, validation flag, last signature."""
        self.task_files = tuple(task_files)
        self.tracker = S.SignatureTracker()
        self.validated = False
        """The tests ran after the last modification (the expert then finishes)."""
        self.action_sig: str | None = None

    def execute(self, action: str, extra: dict[str, Any]) -> Outcome:
        """Run one tool call. Refused (the call is invalid) or ValueError (a bad argument such as
        a NUL byte in a path) propagate, with the action signature set to ``invalid``."""
        self.action_sig = "invalid"
        call = parse_call(action)
        tool = call["tool"]
        extra["tool"] = tool
        try:
            out = getattr(self, f"_{tool}")(call, extra)
        except OSError as e:  # the workspace refused the operation (permissions changed by a command)
            out = Outcome(f"ERROR: {e.strerror or e}", f"{tool}:error")
        self.action_sig = out.sig
        return out

    # --- file_editor ----------------------------------------------------------------------------
    def _file_editor(self, call: dict, extra: dict) -> Outcome:
        command = _arg(call, "command", str)
        if command not in EDITOR_COMMANDS:
            raise Refused(f"unknown file_editor command {short(command)}; valid: {', '.join(EDITOR_COMMANDS)}")
        rel, host = self.ws.resolve(_arg(call, "path", str))
        extra["command"] = command
        try:
            return getattr(self, f"_fe_{command}")(call, rel, host)
        except ToolError as e:
            kind = {"view": "view", "create": "create", "str_replace": "modify:replace", "insert": "modify:insert"}[command]
            return Outcome(f"ERROR: {e}", f"{kind}@{rel}:error")

    def _fe_view(self, call, rel, host) -> Outcome:
        rng = call.get("view_range")
        if rng is not None and (not isinstance(rng, list) or len(rng) != 2
                                or not all(isinstance(x, int) and not isinstance(x, bool) for x in rng)):
            raise Refused("view_range must be a list of two integers [start, end] (end -1 = to the end)")
        if host.is_dir() and not host.is_symlink():
            self.tracker.add(rel, "S")
            return Outcome(f"Files under {WORKDIR}/{rel if rel != '.' else ''}:\n" + self.ws.tree(host),
                           f"search@{rel}")
        lines = self.ws.read_text(rel, host).splitlines()
        if rng is None:
            self.tracker.add(rel, "Vf")
            return Outcome(f"{WORKDIR}/{rel}:\n" + _numbered(lines, 1), f"view:full@{rel}")
        start, end = rng
        end = len(lines) if end == -1 else end
        if not 1 <= start <= max(len(lines), 1) or end < start:
            raise ToolError(f"invalid view_range {rng}: the file has {len(lines)} lines (1-based, end >= start or -1)")
        end = min(end, len(lines))
        bs = S.buckets(start, end)
        for b in bs:
            self.tracker.add(rel, f"V[{b}]")
        return Outcome(f"{WORKDIR}/{rel} lines {start}-{end}:\n" + _numbered(lines[start - 1:end], start),
                       f"view:{S.bucket_scope(bs)}@{rel}")

    def _fe_create(self, call, rel, host) -> Outcome:
        text = _arg(call, "file_text", str)
        if os.path.lexists(host):
            raise ToolError(f"{WORKDIR}/{rel} already exists; edit it with str_replace or insert.")
        self.ws.write_text(host, text)
        self.tracker.add(rel, "C")
        self.validated = False
        return Outcome(f"File created: {WORKDIR}/{rel}", f"create@{rel}")

    def _edited(self, rel, host, before, after) -> Outcome:
        self.ws.write_text(host, after)
        kind, h = S.edit_op(before, after)
        self.tracker.add(rel, f"{'I' if kind == 'insert' else 'M'}:{h}")
        self.validated = False
        # a snippet around the change, as SWE-agent shows
        a, b = before.splitlines(), after.splitlines()
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        lo, hi = max(first - 3, 0), min(first + 4 + max(len(b) - len(a), 0), len(b))
        snippet = _numbered(b[lo:hi], lo + 1)
        return Outcome(f"The file {WORKDIR}/{rel} has been edited. Snippet of the result:\n{snippet}\n"
                       "Review the change; run the tests to check it.", f"modify:{kind}:{h}@{rel}")

    def _fe_str_replace(self, call, rel, host) -> Outcome:
        old = _arg(call, "old_str", str)
        new = _arg(call, "new_str", str, required=False, default="")
        if old == "":
            raise Refused("old_str must not be empty")
        before = self.ws.read_text(rel, host)
        n = before.count(old)
        if n == 0:
            raise ToolError(f"old_str was not found verbatim in {WORKDIR}/{rel}.")
        if n > 1:
            raise ToolError(f"old_str occurs {n} times in {WORKDIR}/{rel}; include more context to make it unique.")
        return self._edited(rel, host, before, before.replace(old, new, 1))

    def _fe_insert(self, call, rel, host) -> Outcome:
        line = _arg(call, "insert_line", int)
        new = _arg(call, "new_str", str)
        before = self.ws.read_text(rel, host)
        lines = before.splitlines(keepends=True)
        if not 0 <= line <= len(lines):
            raise ToolError(f"insert_line {line} is out of range: the file has {len(lines)} lines (0 = top).")
        if lines and not lines[-1].endswith("\n") and line == len(lines):
            lines[-1] += "\n"
        add = new if new.endswith("\n") else new + "\n"
        return self._edited(rel, host, before, "".join(lines[:line]) + add + "".join(lines[line:]))

    # --- search ---------------------------------------------------------------------------------
    def _search(self, call: dict, extra: dict) -> Outcome:
        pattern = _arg(call, "pattern", str)
        if not pattern:
            raise Refused("pattern must not be empty")
        rel, host = self.ws.resolve(_arg(call, "path", str, required=False, default="."))
        if not os.path.lexists(host):
            return Outcome(f"ERROR: The path {WORKDIR}/{rel} does not exist.", f"search@{rel}:error")
        hits = []
        for p in self._search_files(host):
            text = _small_utf8(p)
            if text is not None:
                prel = p.relative_to(self.ws.root).as_posix()
                hits += [f"{prel}:{i}: {line.strip()[:200]}" for i, line in enumerate(text.splitlines(), 1)
                         if pattern in line]
        self.tracker.add(rel, "S")
        if not hits:
            return Outcome(f"No matches for {short(pattern)} in {WORKDIR}/{rel if rel != '.' else ''}",
                           f"search@{rel}")
        more = f"\n[{len(hits) - MAX_SEARCH_HITS} more matches]" if len(hits) > MAX_SEARCH_HITS else ""
        return Outcome(f"{len(hits)} match(es) for {short(pattern)}:\n" + "\n".join(hits[:MAX_SEARCH_HITS]) + more,
                       f"search@{rel}")

    @staticmethod
    def _search_files(host: Path) -> list[Path]:
        """``host`` itself, or the visible entries under it in path order."""
        if not host.is_dir() or host.is_symlink():
            return [host]
        entries, _ = scan(host)  # never follows symlinks (no escapes, no loops); depth-capped
        return [host / r for r, _st in sorted(entries, key=lambda e: e[0].split("/"))
                if not any(part.startswith(".") or part in IGNORED for part in r.split("/"))]

    # --- bash -----------------------------------------------------------------------------------
    def _bash(self, call: dict, extra: dict) -> Outcome:
        command = _arg(call, "command", str)
        if not command.strip():
            raise Refused("command must not be empty")
        entries, _ = scan(self.ws.root)
        before = self.ws.snapshot(entries)
        had_mods = self.tracker.modified
        res = self.sandbox.run(["/bin/bash", "-c", command])
        # Limits first: what the command left is never read before it is back within them.
        note = self.ws.enforce_limits({rel for rel, _st in entries}, self.task_files)
        after = self.ws.snapshot()
        out = res.output.rstrip("\n")
        if res.timed_out:
            out += f"\n[The command timed out after {self.command_timeout:g} s and was killed.]"
        elif res.exit_code:
            out += f"\n[exit code {res.exit_code}]"
        out += "".join(f"\n[{n}]" for n in res.notes)
        extra["exit_code"] = res.exit_code
        extra["timed_out"] = res.timed_out
        outcome = Outcome((out or "(no output)") + note, "")
        changed = sorted(p for p in after if p not in before or after[p].digest != before[p].digest)
        removed = sorted(p for p in before if p not in after)
        self._record_changes(before, after, changed)
        cat, target, rng = S.classify_bash(command)
        target = self.ws.norm_target(target)
        ok = res.exit_code == 0
        if cat == "test":
            self.tracker.flags["test_ok" if ok else "test_err"] += 1
            outcome.validation = had_mods
            outcome.first_validation = had_mods and not self.validated
            self.validated = True
            outcome.sig = f"test@{target}:{'ok' if ok else 'error'}"
        else:
            outcome.sig = self._bash_sig(cat, target, rng, ok, before, after, changed, removed)
        return outcome

    def _record_changes(self, before: dict[str, FileState], after: dict[str, FileState],
                        changed: list[str]) -> None:
        """Every real change a command made goes into the RTMC state."""
        for p in changed:
            if p not in before:
                self.tracker.add(p, "C")
            else:
                kind, h = edit_op(before[p], after[p])
                self.tracker.add(p, f"{'I' if kind == 'insert' else 'M'}:{h}")
        if changed:
            self.validated = False

    def _bash_sig(self, cat, target, rng, ok, before, after, changed, removed) -> str:
        """Signature of a non-test command: its category, or the change it made (Table 1)."""
        if cat in ("install", "fileop"):
            if cat == "fileop":
                for p in removed or [target]:
                    self.tracker.add(p, "F")
                return f"fileop@{target}"
            return f"install@{target}:{'ok' if ok else 'error'}"
        if changed:
            created = [p for p in changed if p not in before]
            p = ([q for q in changed if q not in created][:1] or created[:1])[0]
            if p in created:
                return f"create@{p}"
            kind, h = edit_op(before[p], after[p])
            return f"modify:{kind}:{h}@{p}"
        if cat == "view":
            return self._bash_view(target, rng)
        if cat == "search":
            self.tracker.add(target, "S")
            return f"search@{target}"
        self.tracker.flags["exec_ok" if ok else "exec_err"] += 1
        return f"execute@{target}:{'ok' if ok else 'error'}"

    def _bash_view(self, target: str, rng) -> str:
        """Signature of a cat/head/tail/sed-style view. The target comes from the command's text, so
        it is resolved like a file tool's path: only a regular file inside the workspace is read
        (for tail's line count); anything else (/etc/shadow, /proc/kmsg, a FIFO) is never opened
        on the host, and the view is recorded without a line range."""
        host = self.ws.regular_file(target)
        if rng is None or host is None:
            self.tracker.add(target, "Vf")
            return f"view:full@{target}"
        start, end = rng
        if start < 0:  # tail -n N
            try:
                n = len(self.ws.read_text(target, host).splitlines())
            except (ToolError, OSError):
                n = 0
            start, end = max(n + start + 1, 1), max(n, 1)
        bs = S.buckets(start, end)
        for b in bs:
            self.tracker.add(target, f"V[{b}]")
        return f"view:{S.bucket_scope(bs)}@{target}"

    # --- think, finish --------------------------------------------------------------------------
    def _think(self, call: dict, extra: dict) -> Outcome:
        _arg(call, "thought", str, required=False, default="")
        self.tracker.flags["think"] += 1
        return Outcome("Your thought has been logged.", "think")

    def _finish(self, call: dict, extra: dict) -> Outcome:
        return Outcome("Submitted.", "finish", submitted=True)


def _small_utf8(p: Path) -> str | None:
    """The text of a regular UTF-8 file of at most MAX_VIEW_BYTES (never a link or a FIFO)."""
    try:
        st = os.lstat(p)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_VIEW_BYTES:
        return None
    try:
        return p.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
