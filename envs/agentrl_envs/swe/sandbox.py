"""Bubblewrap jail that runs the SWE env's shell commands and test suites.

Every command runs as ``bwrap --unshare-all --die-with-parent`` (no network, own pid/ipc/uts
namespaces) with read-only system directories and /dev, private sized tmpfs ``/tmp`` and
``/dev/shm``, the task's workspace
bound read-write at ``/testbed`` (the only writable place that outlives the command) and our
runtime (a pytest-compatible runner) read-only at ``/opt/swe``. Limits: address space, CPU
time, processes, file size (``prlimit``, inherited by bwrap and everything inside), wall
time (the whole namespace is killed), and memory and process count for the jail as a whole
(``limits.py``: a cgroup per command where the host allows one, else RLIMIT_NPROC of the jail's
own uid and a supervisor that sums resident sets).

Root is exempt from RLIMIT_NPROC, so when we are root the jail runs as an
unprivileged uid of its own (one per Sandbox, so that envs do not share a process budget);
``/root`` is mode 700, so the jail uses the world-readable ``/usr/bin/python3``. Inside the jail's
user namespace that host uid is always mapped to ``JAIL_ID`` (1000), so what a command sees
(``id -u``, ``ls -ln``) does not depend on which env instance runs it.
"""

from __future__ import annotations

import itertools
import os
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentrl_envs.swe.limits import POLL_S, RssWatch, choose

INSTALL_HINT = ("bubblewrap (bwrap) is required by agentrl/SWE-v0: every tool command runs in a "
                "bubblewrap sandbox. Install it with `apt-get install -y bubblewrap` (Debian/Ubuntu).")

JAIL_PYTHON = "/usr/bin/python3"
WORKDIR = "/testbed"
RUNTIME_MOUNT = "/opt/swe"
JAIL_ID = 1000  # uid and gid of the jail's user as seen inside (fixed: observations are reproducible)
# RLIMIT_NPROC's headroom over pids.max when a cgroup caps the jail's process count
NPROC_BACKSTOP = 16
JAIL_PATH = f"{RUNTIME_MOUNT}/bin:/usr/bin:/bin:/usr/local/bin:/usr/sbin:/sbin"

# /etc entries a shell and Python may want; bound read-only when present (no passwd/shadow).
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "alternatives", "localtime", "nsswitch.conf")

_uid_counter = itertools.count()

# bwrap's outer process exits without reaping the namespace's pid 1, which is then re-parented to
# init; where init does not reap (a container whose pid 1 is python), the zombies would count
# against the jail uid's RLIMIT_NPROC. So every command runs under this tiny reaper: a child
# subreaper (prctl PR_SET_CHILD_SUBREAPER = 36) that reaps all descendants and exits with the
# command's status. It first waits for one byte on the sync fd (argv[1]): the host writes it once
# the reaper is inside the jail's cgroup, so every process of the jail starts under the cap.
_REAPER = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)\n"
    "sync = int(sys.argv[1])\n"
    "if os.read(sync, 1) != b'1':\n"
    "    sys.exit(125)\n"
    "os.close(sync)\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    try:\n"
    "        os.execvp(sys.argv[2], sys.argv[2:])\n"
    "    finally:\n"
    "        os._exit(127)\n"
    "code = 1\n"
    "while True:\n"
    "    try:\n"
    "        p, st = os.waitpid(-1, 0)\n"
    "    except ChildProcessError:\n"
    "        break\n"
    "    if p == pid:\n"
    "        code = os.waitstatus_to_exitcode(st)\n"
    "sys.exit(code if code >= 0 else 128 - code)\n"
)


def bwrap_path() -> str | None:
    """Path of the bwrap binary, or None."""
    return shutil.which("bwrap")


_PROBED: dict[str, str | None] = {}


def sandbox_problem() -> str | None:
    """None when the sandbox can run here, else a one-line reason (cached per process)."""
    if "result" in _PROBED:
        return _PROBED["result"]
    if bwrap_path() is None:
        reason = INSTALL_HINT
    elif shutil.which("prlimit") is None:
        reason = "prlimit (util-linux) is required by agentrl/SWE-v0 to set the sandbox's limits."
    elif not os.access(JAIL_PYTHON, os.X_OK):
        reason = f"{JAIL_PYTHON} is required inside the SWE sandbox (Debian's python3 package)."
    else:
        reason = None
        try:
            p = subprocess.run([bwrap_path(), "--unshare-all", "--unshare-user", "--uid", str(JAIL_ID),
                                "--gid", str(JAIL_ID), "--ro-bind", "/usr", "/usr",
                                "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                                "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
                                JAIL_PYTHON, "-c", "print('ok')"],
                               capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
            if p.stdout.strip() != "ok":
                reason = ("bubblewrap is installed but cannot create a sandbox here (unprivileged user "
                          f"namespaces off?): {p.stderr.strip()[:300]}")
        except (OSError, subprocess.SubprocessError) as e:
            reason = f"bubblewrap failed to start: {e}"
    _PROBED["result"] = reason
    return reason


@dataclass
class Limits:
    """Resource limits of one sandboxed command."""

    wall_s: float = 10.0
    """Wall-clock limit in seconds; the command's whole pid namespace is killed after it."""
    cpu_s: int = 20
    """RLIMIT_CPU per process, seconds."""
    memory_mb: int = 512
    """RLIMIT_AS per process, MiB."""
    jail_memory_mb: int = 1024
    """Memory of all the jail's processes together, MiB (``limits.py``)."""
    nproc: int = 16
    """Processes (threads) of the whole jail: pids.max of its cgroup, else RLIMIT_NPROC of its uid."""
    jail_mechanism: str = "auto"
    """How the jail-wide caps are enforced: one of ``limits.MECHANISMS`` (auto = the strongest)."""
    fsize_mb: int = 16
    """RLIMIT_FSIZE: largest file a command may write, MiB."""
    tmp_mb: int = 64
    """Size of each of the private tmpfs at /tmp and /dev/shm, MiB."""
    output_bytes: int = 65536
    """Bytes of output kept (head and tail halves); the rest is counted and dropped."""


@dataclass
class RunResult:
    """Outcome of one sandboxed command."""

    output: str
    exit_code: int | None
    """None when the command was killed for running past its wall time."""
    timed_out: bool
    dropped_bytes: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    """A jail-wide limit that the command ran into, one line each."""
    extra: dict = field(default_factory=dict)


def _count_own_processes(uid: int) -> int:
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = os.stat(f"/proc/{d}/task")
                if st.st_uid == uid:
                    n += len(os.listdir(f"/proc/{d}/task"))
            except OSError:
                pass
    return n


class Sandbox:
    """Runs commands in a bubblewrap jail over one host workspace directory."""

    def __init__(self, workspace: str | Path, runtime_dir: str | Path, limits: Limits | None = None,
                 jail_uid: int | None = None):
        problem = sandbox_problem()
        if problem is not None:
            raise RuntimeError(problem)
        self.workspace = Path(workspace)
        self.runtime_dir = Path(runtime_dir)
        self.limits = limits or Limits()
        self.limiter = choose(self.limits.jail_memory_mb, self.limits.nproc, self.limits.jail_mechanism)
        self.is_root = os.geteuid() == 0
        if self.is_root:
            # A uid of our own: RLIMIT_NPROC counts per uid, and root ignores it.
            self.uid = int(jail_uid) if jail_uid is not None else \
                200_000 + ((os.getpid() % 10_000) * 64 + next(_uid_counter) % 64)
        else:
            self.uid = os.getuid()

    # --- ownership of files the host writes ----------------------------------------------------
    def give(self, path: str | Path) -> None:
        """Hand a host-written file or tree to the jail's uid (no-op when not root)."""
        if not self.is_root:
            return
        path = str(path)
        os.lchown(path, self.uid, self.uid)
        if os.path.isdir(path) and not os.path.islink(path):
            for root, dirs, files in os.walk(path):
                for n in dirs + files:
                    os.lchown(os.path.join(root, n), self.uid, self.uid)

    # --- running -------------------------------------------------------------------------------
    def _argv(self, command: list[str], workspace: Path, env: dict[str, str], sync_fd: int,
              writable: bool = True, as_pid_1: bool = False) -> list[str]:
        lim = self.limits
        nproc = lim.nproc
        if self.limiter.kernel_pids:
            # pids.max is the cap; RLIMIT_NPROC stays as a backstop with headroom, so that what
            # stops a fork bomb (and what the tests check) is the cgroup
            nproc += NPROC_BACKSTOP
        if not self.is_root:
            nproc += _count_own_processes(self.uid)
        argv = [JAIL_PYTHON, "-I", "-S", "-c", _REAPER, str(sync_fd),
                "prlimit", f"--nproc={nproc}", f"--as={lim.memory_mb << 20}", f"--cpu={lim.cpu_s}",
                f"--fsize={lim.fsize_mb << 20}", "--core=0", "--",
                bwrap_path(), "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
                "--hostname", "sandbox", "--unshare-user", "--uid", str(JAIL_ID), "--gid", str(JAIL_ID),
                "--ro-bind", "/usr", "/usr"]
        for link, target in (("/bin", "usr/bin"), ("/lib", "usr/lib"), ("/lib64", "usr/lib64"),
                             ("/sbin", "usr/sbin")):
            if os.path.islink(link):
                argv += ["--symlink", target, link]
            elif os.path.isdir(link):
                argv += ["--ro-bind", link, link]
        for name in _ETC_FILES:
            if os.path.exists(f"/etc/{name}"):
                argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        # bwrap's /dev is an unbounded tmpfs that the jail's uid owns: /dev/shm gets a sized tmpfs
        # of its own and /dev itself is made read-only (its device nodes still work)
        if as_pid_1:
            argv.append("--as-pid-1")
        argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(lim.tmp_mb << 20), "--tmpfs", "/dev/shm",
                 "--remount-ro", "/dev", "--size", str(lim.tmp_mb << 20), "--tmpfs", "/tmp",
                 "--ro-bind", str(self.runtime_dir), RUNTIME_MOUNT,
                 "--bind" if writable else "--ro-bind", str(workspace), WORKDIR, "--chdir", WORKDIR]
        base_env = {"PATH": JAIL_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "TERM": "dumb",
                    "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
                    "PYTHONPATH": f"{RUNTIME_MOUNT}/lib", "PYTHONUNBUFFERED": "1"}
        base_env.update(env)
        for k, v in sorted(base_env.items()):
            argv += ["--setenv", k, v]
        return argv + list(command)

    def run(self, command: list[str], workspace: str | Path | None = None,
            env: dict[str, str] | None = None, wall_s: float | None = None,
            writable: bool = True, pass_fd: int | None = None) -> RunResult:
        """Run ``command`` (argv inside the jail) and return its merged, capped output.

        The command's standard input is /dev/null. ``writable``: bind the workspace read-write (else read-only). ``pass_fd``: an fd of ours
        that the command inherits under the same number (the grading harness's result pipe); the
        command then runs as the namespace's pid 1 (``--as-pid-1``), since bwrap's own pid 1 would
        hold a copy of the fd that any process of the jail could open through /proc/1/fd.
        """
        lim = self.limits
        wall = lim.wall_s if wall_s is None else float(wall_s)
        kw: dict = {}
        if self.is_root:
            kw = {"user": self.uid, "group": self.uid, "extra_groups": []}
        sync_r, sync_w = os.pipe()
        try:
            argv = self._argv(command, Path(workspace or self.workspace), env or {}, sync_r, writable,
                              as_pid_1=pass_fd is not None)
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    process_group=0, pass_fds=(sync_r,) if pass_fd is None else (sync_r, pass_fd),
                                    **kw)
        except BaseException:
            os.close(sync_w)
            raise
        finally:
            os.close(sync_r)
        unlimited = None
        try:
            try:
                self.limiter.start(proc.pid)  # the reaper waits on the sync pipe meanwhile
                os.write(sync_w, b"1")
            except OSError as e:  # e.g. the cgroup cannot be made: the command never starts
                unlimited = f"The sandbox could not apply its limits ({e}); the command was not run."
            finally:
                os.close(sync_w)  # unreleased, the reaper reads EOF and exits 125
            res = self._collect(proc, t0, wall)
        finally:
            notes = self.limiter.finish()
        res.notes = notes + ([unlimited] if unlimited else [])
        return res

    def _collect(self, proc: subprocess.Popen, t0: float, wall: float) -> RunResult:
        """Read the command's output until it exits, runs out of time or breaks a jail-wide cap."""
        half = self.limits.output_bytes // 2
        head, tail = bytearray(), bytearray()
        dropped = 0
        timed_out = over_cap = False
        tick = POLL_S if isinstance(self.limiter, RssWatch) else 0.5
        fd = proc.stdout.fileno()
        deadline = t0 + wall
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if self.limiter.poll(proc.pid):
                over_cap = True
                break
            ready, _, _ = select.select([fd], [], [], min(left, tick))
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            if len(head) < half:
                take = half - len(head)
                head += chunk[:take]
                chunk = chunk[take:]
            if chunk:
                tail += chunk
                if len(tail) > half:
                    dropped += len(tail) - half
                    del tail[: len(tail) - half]
        if timed_out or over_cap:
            self._kill(proc)
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        proc.stdout.close()
        text = head.decode("utf-8", "replace")
        if dropped:
            text += f"\n[... {dropped} bytes of output dropped ...]\n"
        text += tail.decode("utf-8", "replace")
        return RunResult(output=text, exit_code=None if timed_out else code, timed_out=timed_out,
                         dropped_bytes=dropped, seconds=time.monotonic() - t0)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        """Kill the jail: the namespace's pid 1 first (the kernel then kills everything in the
        namespace), then bwrap, then the reaper's process group."""
        pids: list[int] = []
        frontier = [proc.pid]
        for _ in range(3):  # reaper -> bwrap (via prlimit's exec) -> the namespace's pid 1
            kids = []
            for pid in frontier:
                try:
                    kids += [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
                except OSError:
                    pass
            pids += kids
            frontier = kids
        for pid in reversed(pids):  # innermost first
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
