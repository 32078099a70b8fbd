"""The SWE env's workspace on the host: the task's repository, the paths a tool may touch, the
snapshots that tell what a command changed, and the limits a command's leftovers are held to.

Nothing here runs model code (the sandbox does); everything here reads or writes what the model's
commands left behind, so every walk is iterative, never follows a symlink out of the tree and
stays within MAX_DEPTH / MAX_REL_CHARS.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentrl_envs.base import clip
from agentrl_envs.swe import signatures as S
from agentrl_envs.swe.sandbox import WORKDIR

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

Entries = list[tuple[str, os.stat_result]]


class Refused(Exception):
    """The action is rejected (invalid): bad arguments or a path outside the workspace."""


class ToolError(Exception):
    """A well-formed tool call that failed on the current files (no penalty)."""


def short(value) -> str:
    """repr of an argument echoed in a message, clipped like every env's echoes."""
    return clip(repr(value))


@dataclass(frozen=True)
class FileState:
    """One workspace entry in a snapshot."""

    key: tuple
    """(mode, size, mtime_ns, ctime_ns, inode): unchanged key = unchanged content."""
    digest: str
    """MD5 of the content (of ``-> target`` for a link)."""
    text: str | None
    """The content as text when small enough to keep, else None."""


class Workspace:
    """The repository directory an episode works in (``root``, seen as WORKDIR in the jail).

    ``give`` hands a path we created to the sandbox's uid (so that jailed commands may edit it).
    The limits are enforced right after each command (:meth:`enforce_limits`).
    """

    def __init__(self, root: Path, give: Callable[[Path], None], limit_bytes: int, limit_files: int):
        self.root = root
        self.give = give
        self.limit_bytes = int(limit_bytes)
        self.limit_files = int(limit_files)
        self._snap_cache: dict[str, FileState] = {}

    # --- episode start ------------------------------------------------------------------------
    def materialize(self, files: dict[str, str]) -> None:
        """Replace the workspace by ``files`` ({relative path: text}), fixed mtimes. The root
        directory itself stays: it may be the mount point of the workspace's quota tmpfs."""
        self.root.mkdir(exist_ok=True)
        for child in list(self.root.iterdir()):
            rmtree(child)
        for rel, text in sorted(files.items()):
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        for p in sorted(self.root.rglob("*"), reverse=True):
            os.utime(p, (FIXED_MTIME, FIXED_MTIME))
        os.utime(self.root, (FIXED_MTIME, FIXED_MTIME))
        self.give(self.root)
        self._snap_cache = {}

    # --- paths --------------------------------------------------------------------------------
    def resolve(self, path: str) -> tuple[str, Path]:
        """(path relative to the repo, host path); refuses anything outside the workspace."""
        if not path.strip():
            raise Refused("empty path")
        p = path.strip()
        if p.startswith("/"):
            if p != WORKDIR and not p.startswith(WORKDIR + "/"):
                raise Refused(f"path {short(p)} is outside the workspace {WORKDIR}")
            p = p[len(WORKDIR):].lstrip("/") or "."
        rel = os.path.normpath(p)
        if rel == ".." or rel.startswith("../") or rel.startswith("/"):
            raise Refused(f"path {short(path)} is outside the workspace {WORKDIR}")
        if rel.count("/") >= MAX_DEPTH or len(rel) > MAX_REL_CHARS:
            raise Refused(f"path {short(path)} is too deep (at most {MAX_DEPTH} components, "
                          f"{MAX_REL_CHARS} characters)")
        host = self.root / rel
        real, root = os.path.realpath(host), os.path.realpath(self.root)
        if real != root and not real.startswith(root + os.sep):
            raise Refused(f"path {short(path)} leads outside the workspace {WORKDIR}")
        return ("." if rel == "." else rel), host

    def regular_file(self, target: str) -> Path | None:
        """Host path of ``target`` when it is a regular file inside the workspace, else None."""
        try:
            _, host = self.resolve(target)
            st = os.stat(host)  # symlinks may be followed: resolve checked where they lead
        except (Refused, ValueError, OSError):
            return None
        return host if stat.S_ISREG(st.st_mode) else None

    @staticmethod
    def norm_target(target: str) -> str:
        """A command's target path as the signatures name it (relative to WORKDIR when inside)."""
        if target.startswith(WORKDIR):
            target = target[len(WORKDIR):].lstrip("/") or "."
        if target.startswith("/"):
            return target
        return os.path.normpath(target)

    # --- files --------------------------------------------------------------------------------
    def read_text(self, rel: str, host: Path) -> str:
        try:
            st = os.stat(host)
        except OSError:
            raise ToolError(f"The path {WORKDIR}/{rel} does not exist.") from None
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{WORKDIR}/{rel} is not a regular file.")
        if st.st_size > MAX_VIEW_BYTES:
            raise ToolError(f"{WORKDIR}/{rel} is too large ({st.st_size} bytes) to open.")
        return host.read_bytes().decode("utf-8", "replace")

    def write_text(self, host: Path, text: str) -> None:
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
            self.give(p)

    def tree(self, host: Path, depth: int = 2) -> str:
        """Indented listing of ``host`` (hidden and cache entries left out), ``depth`` levels."""
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

    # --- what a command changed ---------------------------------------------------------------
    def snapshot(self, entries: Entries | None = None) -> dict[str, FileState]:
        """State of every non-directory entry of the workspace (``scan``'s entries, or a new scan).

        Files are hashed by streaming; only small ones keep their text (for RTMC line diffs).
        A file whose (mode, size, mtime, ctime, inode) did not change since the last snapshot is
        not read again (ctime cannot be set by a command)."""
        if entries is None:
            entries, _ = scan(self.root)
        out: dict[str, FileState] = {}
        budget = TEXT_BUDGET
        for rel, st in sorted(entries):
            if stat.S_ISDIR(st.st_mode) or any(part in IGNORED for part in rel.split("/")):
                continue
            key = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            want_text = not stat.S_ISREG(st.st_mode) or st.st_size <= min(MAX_TEXT_BYTES, budget)
            state = self._snap_cache.get(rel)
            if state is None or state.key != key or (want_text and state.text is None):
                state = file_state(self.root / rel, st, key, want_text)
                if state is None:
                    continue
            elif not want_text and state.text is not None:
                state = FileState(key, state.digest, None)
            if state.text is not None and stat.S_ISREG(st.st_mode):
                budget -= st.st_size
            out[rel] = state
        self._snap_cache = out
        return out

    # --- limits -------------------------------------------------------------------------------
    def enforce_limits(self, known: set[str], task_files) -> str:
        """Bring the workspace back within its limits right after a command; returns a note for
        the observation. Directories too deep to walk are removed; then the largest files while
        the total size is over the limit; then entries while their count is over it (those the
        command made, ``known`` = what existed before, go first). The task's files
        (``task_files``) and their directories are never removed."""
        entries, too_deep = scan(self.root)
        notes = []
        for rel in too_deep:
            rmtree(self.root / rel)
        if too_deep:
            gone = set(too_deep)
            entries = [(r, st) for r, st in entries if r not in gone]
            notes.append(f"directories nested deeper than {MAX_DEPTH} levels (or paths longer than "
                         f"{MAX_REL_CHARS} characters) were removed: {names(too_deep)}")
        protected = _with_parents(task_files)
        removed = self._cap_size(entries, protected)
        if removed is not None:
            gone = set(removed)
            entries = [(r, st) for r, st in entries if r not in gone]
            notes.append(f"The workspace exceeded {self.limit_bytes >> 20} MiB; removed: {names(removed)}")
        removed = self._cap_count(entries, protected, known)
        if removed is not None:
            notes.append(f"The workspace exceeded {self.limit_files} files and directories; "
                         f"removed {len(removed)}: {names(removed)}")
        return "".join(f"\n[{n}]" for n in notes)

    def _cap_size(self, entries: Entries, protected: set[str]) -> list[str] | None:
        """Delete the largest unprotected files while the total is over the limit (None: within)."""
        files = [(st.st_size, rel) for rel, st in entries if not stat.S_ISDIR(st.st_mode)]
        total = sum(size for size, _ in files)
        if total <= self.limit_bytes:
            return None
        removed = []
        for size, rel in sorted(files, reverse=True):
            if total <= self.limit_bytes:
                break
            if rel in protected:
                continue
            try:
                os.unlink(self.root / rel)
            except OSError:
                continue
            total -= size
            removed.append(rel)
        return removed

    def _cap_count(self, entries: Entries, protected: set[str], known: set[str]) -> list[str] | None:
        """Delete entries, the newest first, while their count is over the limit (None: within)."""
        count = len(entries)
        if count <= self.limit_files:
            return None
        dirs = {rel for rel, st in entries if stat.S_ISDIR(st.st_mode)}
        rels = [rel for rel, _ in entries if rel not in protected]
        # newest first; reverse order puts a directory's entries before the directory
        order = (sorted((r for r in rels if r not in known), reverse=True)
                 + sorted((r for r in rels if r in known), reverse=True))
        removed = []
        for rel in order:
            if count <= self.limit_files:
                break
            try:
                (os.rmdir if rel in dirs else os.unlink)(self.root / rel)
            except OSError:
                continue
            count -= 1
            removed.append(rel)
        return removed


def _with_parents(rels) -> set[str]:
    """``rels`` and every directory above them (relative paths)."""
    out = set(rels)
    for rel in rels:
        while "/" in rel:
            rel = rel.rpartition("/")[0]
            out.add(rel)
    return out


def scan(root: Path) -> tuple[Entries, list[str]]:
    """Every entry under ``root`` as (relative path, lstat), and the directories not walked.

    Iterative and never follows a symlink. A directory at MAX_DEPTH components, or with a path
    over MAX_REL_CHARS characters, is listed but not entered (second list): a command can nest
    directories thousands deep, which would overflow Python's recursion and PATH_MAX."""
    entries: Entries = []
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


def file_state(path: Path, st: os.stat_result, key: tuple, want_text: bool) -> FileState | None:
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


def edit_op(before: FileState, after: FileState) -> tuple[str, str]:
    """RTMC ('replace'|'insert', hash) of a change; without both texts (a big file) there is no
    line diff, so the hash covers the two contents' digests."""
    if before.text is not None and after.text is not None:
        return S.edit_op(before.text, after.text)
    return "replace", S.edit_hash(before.digest, after.digest)


def names(rels: list[str], limit: int = 10) -> str:
    """A short list of paths for a note."""
    shown = [clip(r) for r in rels[:limit]]
    return ", ".join(shown) + (f" and {len(rels) - limit} more" if len(rels) > limit else "")


def place_file(root: Path, rel: str, text: str) -> None:
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
        rmtree(p)
    elif os.path.lexists(p):
        os.unlink(p)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def rmtree(path: Path) -> None:
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
