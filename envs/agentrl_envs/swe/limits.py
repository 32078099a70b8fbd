"""Jail-wide caps on memory and process count for the SWE sandbox, by the strongest means the host has.

Per-process rlimits (RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NPROC; set by the sandbox on
every command) do not bound a jail as a whole: a command that splits its memory over many
processes, each under RLIMIT_AS, can hold nproc x memory_mb. So every command also runs under one
of these, chosen once per process by :func:`choose` (strongest first):

* ``CgroupV2``: a cgroup of its own per command (``memory.max``, ``memory.swap.max = 0``,
  ``pids.max``) under our own cgroup, when that subtree is writable and delegates the ``memory``
  and ``pids`` controllers. The kernel enforces both at allocation and fork time.
* ``CgroupV1``: the same with the v1 ``memory`` (``memory.limit_in_bytes``, plus
  ``memory.memsw.limit_in_bytes`` where swap is accounted) and ``pids`` hierarchies, when both
  are mounted and writable (a privileged container with v1 mounts, for instance).
* ``RssWatch`` (no writable cgroup): the process count rests on RLIMIT_NPROC, which covers the
  whole jail because the jail runs as a uid of its own when we are root (sandbox.py); memory
  rests on a supervisor that sums the resident set of every process in the jail every
  ``POLL_S`` seconds and kills the whole jail when the sum is over the cap. Resident size counts
  shared pages once per process, so the sum over-counts (a conservative cap); between two polls a
  command can overshoot by what it allocates in ``POLL_S``, and never beyond nproc x RLIMIT_AS.
  Files in the jail's private tmpfs (/tmp, /dev/shm: ``Limits.tmp_mb`` each) are not resident
  sets and come on top; a cgroup charges them to the jail.

A command first parks in the sandbox's reaper until the host has moved it into its cgroup (a
sync pipe), so no process of the jail is ever outside the cap.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from pathlib import Path

POLL_S = 0.05  # RssWatch's sampling period: 20 scans a second of a handful of /proc files
_PAGE = os.sysconf("SC_PAGE_SIZE")
_counter = itertools.count()


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _event(path: Path, key: str) -> int:
    """The counter ``key`` of a flat-keyed cgroup file such as memory.events (0 when absent)."""
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return 0


def _own_cgroups() -> dict[str, str]:
    """{controller (or "" for v2): path of our cgroup} from /proc/self/cgroup."""
    out = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in (ctrls.split(",") if ctrls else [""]):
            out[c] = path
    return out


def _mounts() -> dict[str, str]:
    """{"cgroup2" or a v1 controller: mount point} from /proc/self/mountinfo."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fields, fs = pre.split(), post.split()
        if len(fs) < 3 or len(fields) < 5:
            continue
        if fs[0] == "cgroup2":
            out.setdefault("cgroup2", fields[4])
        elif fs[0] == "cgroup":
            for opt in fs[2].split(","):
                out.setdefault(opt, fields[4])
    return out


class JailLimiter:
    """One jail-wide cap mechanism; one ``start .. finish`` cycle per command."""

    name = "none"
    kernel_pids = False
    """True when the kernel (a pids cgroup) caps the process count, not RLIMIT_NPROC."""

    def __init__(self, memory_mb: int, nproc: int):
        self.memory_mb = int(memory_mb)
        self.nproc = int(nproc)

    def describe(self) -> str:
        return f"{self.name}: memory {self.memory_mb} MiB and {self.nproc} processes per jail"

    def start(self, pid: int) -> None:
        """Put the parked command (its first process ``pid``) under the cap."""

    def poll(self, pid: int) -> bool:
        """Called while the command runs; True = over the cap, kill the jail."""
        return False

    def finish(self) -> list[str]:
        """After the command: kill what is left, release the cap; notes for the observation."""
        return []

    # the notes every mechanism shares
    def _mem_note(self) -> str:
        return (f"The jail's memory limit ({self.memory_mb} MiB for all its processes together) "
                "was reached: a process was killed.")

    def _pids_note(self) -> str:
        return f"The jail's process limit ({self.nproc}) was reached: a fork or thread creation failed."


class _Cgroup(JailLimiter):
    """What v1 and v2 share: one directory per command per hierarchy, killed and removed after."""

    kernel_pids = True

    def __init__(self, memory_mb: int, nproc: int, parents: dict[str, Path]):
        super().__init__(memory_mb, nproc)
        self.parents = parents  # {"memory": dir, "pids": dir}; v2 has the same dir twice
        self.dirs: list[Path] = []

    def _make(self) -> dict[str, Path]:
        name = f"agentrl-swe-{os.getpid()}-{next(_counter)}"
        made = {}
        for ctrl, parent in self.parents.items():
            d = parent / name
            if d not in self.dirs:
                d.mkdir()
                self.dirs.append(d)
            made[ctrl] = d
        return made

    def finish(self) -> list[str]:
        notes = self._notes() if len(self.dirs) == len(set(self.parents.values())) else []
        for d in self.dirs:
            for _ in range(100):  # a process may be forking as we kill: repeat until empty
                try:
                    pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for p in pids:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.01)
        for d in self.dirs:
            for _ in range(100):  # rmdir fails (EBUSY) until the killed tasks are reaped
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        self.dirs = []
        return notes

    OOM_FILE = ""
    """The memory controller's file that counts ``oom_kill`` events."""

    def _notes(self) -> list[str]:
        notes = []
        if _event(self._mem / self.OOM_FILE, "oom_kill"):
            notes.append(self._mem_note())
        if _event(self._pids / "pids.events", "max"):
            notes.append(self._pids_note())
        return notes


class CgroupV2(_Cgroup):
    name = "cgroup-v2"
    OOM_FILE = "memory.events"

    def start(self, pid: int) -> None:
        d = self._mem = self._pids = self._make()["memory"]  # one unified directory
        _write(d / "memory.max", str(self.memory_mb << 20))
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
        _write(d / "pids.max", str(self.nproc))
        _write(d / "cgroup.procs", str(pid))


class CgroupV1(_Cgroup):
    name = "cgroup-v1"
    OOM_FILE = "memory.oom_control"

    def start(self, pid: int) -> None:
        made = self._make()
        mem, pids = self._mem, self._pids = made["memory"], made["pids"]
        _write(mem / "memory.limit_in_bytes", str(self.memory_mb << 20))
        if (mem / "memory.memsw.limit_in_bytes").exists():  # must follow limit_in_bytes
            _write(mem / "memory.memsw.limit_in_bytes", str(self.memory_mb << 20))
        _write(pids / "pids.max", str(self.nproc))
        for d in (mem, pids):
            _write(d / "cgroup.procs", str(pid))


def jail_pids(root: int) -> list[int]:
    """``root`` and all its descendants (every thread's children), from /proc."""
    out, frontier = [], [root]
    while frontier and len(out) < 100_000:
        pid = frontier.pop()
        out.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                frontier += [int(k) for k in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
            except OSError:
                pass
    return out


def resident_bytes(pids: list[int]) -> int:
    """Sum of the resident set sizes of ``pids`` (statm's second field, in pages)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            pass
    return total


class RssWatch(JailLimiter):
    name = "rlimit+rss-watch"

    def describe(self) -> str:
        return (f"{self.name}: memory {self.memory_mb} MiB per jail (resident sets summed every "
                f"{POLL_S:g} s), {self.nproc} processes per jail (RLIMIT_NPROC of the jail's own uid)")

    def start(self, pid: int) -> None:
        self._killed = False
        self._next = 0.0

    def poll(self, pid: int) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + POLL_S
        if resident_bytes(jail_pids(pid)) > self.memory_mb << 20:
            self._killed = True
        return self._killed

    def finish(self) -> list[str]:
        if self._killed:
            return [f"The command was killed: the jail's processes held more than {self.memory_mb} MiB "
                    "in total (the jail's memory limit)."]
        return []


def _probe_v2(mounts, own) -> dict[str, Path] | None:
    if "cgroup2" not in mounts or "" not in own:
        return None
    d = Path(mounts["cgroup2"] + own[""])
    try:
        ctrl = (d / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(ctrl):
            # a delegated leaf that we may open up; fails (EBUSY) when we live in it ourselves
            _write(d / "cgroup.subtree_control", "+memory +pids")
        probe = d / f"agentrl-probe-{os.getpid()}"
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return None
    return {"memory": d, "pids": d}


def _probe_v1(mounts, own) -> dict[str, Path] | None:
    parents = {}
    for ctrl in ("memory", "pids"):
        if ctrl not in mounts or ctrl not in own:
            return None
        d = Path(mounts[ctrl] + own[ctrl])
        try:
            probe = d / f"agentrl-probe-{os.getpid()}"
            probe.mkdir()
            probe.rmdir()
        except OSError:
            return None
        parents[ctrl] = d
    return parents


MECHANISMS = ("auto", "cgroup-v2", "cgroup-v1", "rlimit+rss-watch")
_FOUND: dict[str, dict[str, Path] | None] = {}  # probed once per process
_PROBE_LOCK = threading.Lock()  # envs built in parallel threads must not race on the probe dir


def choose(memory_mb: int, nproc: int, mechanism: str = "auto") -> JailLimiter:
    """The strongest mechanism the host allows (``auto``), or the one named (``ValueError`` when
    it is unknown or unavailable here). Probing is done once per process."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown jail limit mechanism {mechanism!r}; valid: {', '.join(MECHANISMS)}")
    with _PROBE_LOCK:
        if not _FOUND:
            try:
                mounts, own = _mounts(), _own_cgroups()
            except OSError:
                mounts, own = {}, {}
            _FOUND.update({"cgroup-v2": _probe_v2(mounts, own), "cgroup-v1": _probe_v1(mounts, own)})
    found = _FOUND
    if mechanism == "auto":
        mechanism = next((m for m in ("cgroup-v2", "cgroup-v1") if found[m]), "rlimit+rss-watch")
    if mechanism == "rlimit+rss-watch":
        return RssWatch(memory_mb, nproc)
    if not found[mechanism]:
        raise ValueError(f"jail limit mechanism {mechanism!r} is not available on this host "
                         "(no writable cgroup with the memory and pids controllers)")
    cls = CgroupV2 if mechanism == "cgroup-v2" else CgroupV1
    return cls(memory_mb, nproc, found[mechanism])


# --- disk: the writable workspace as a size-limited tmpfs ---------------------------------------
# The workspace is bound into every jail read-write; a bind mount carries no size limit of its
# own, and RLIMIT_FSIZE caps one file, not their total. Where we may mount (root with
# CAP_SYS_ADMIN in our mount namespace) the host workspace directory is itself a tmpfs of the
# workspace's size, so a write past it fails in the jail with ENOSPC while the command runs, and
# the host's file tools see the same files. Elsewhere the total is enforced right after each
# command (Workspace.enforce_limits), and only RLIMIT_FSIZE holds while it runs.
_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def mount_quota(path: Path, size_bytes: int, inodes: int, uid: int) -> str | None:
    """Mount a tmpfs of ``size_bytes`` and ``inodes`` entries, owned by ``uid``, at ``path``; None on
    success, else why not. The inode cap keeps a command from making millions of empty files,
    which the size cap would not stop and the host would then have to walk."""
    if os.geteuid() != 0:
        return "not root: cannot mount a size-limited workspace"
    opts = f"size={int(size_bytes)},nr_inodes={int(inodes)},mode=0755,uid={uid},gid={uid}".encode()
    if _libc().mount(b"tmpfs", str(path).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts) != 0:
        import ctypes

        return f"mount(tmpfs) failed: {os.strerror(ctypes.get_errno())}"
    return None


def unmount(path: Path) -> None:
    """Detach a workspace tmpfs (lazily: a process still inside cannot keep it alive)."""
    _libc().umount2(str(path).encode(), _MNT_DETACH)
