"""agentrl/SWE-v0's jail-wide limits, each attacked by a real command in a real bwrap jail.

Every attack is bounded by itself (at most 64 forks, 8 x 48 MB, 16 MB of writes), so that a
limit that fails lets the test fail without hurting the shared machine. Each mechanism that
this host offers is tried: ``auto`` (the strongest: a cgroup where one is writable) and the
fallback ``rlimit+rss-watch``, which works everywhere.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from agentrl_envs.actions import format_action
from agentrl_envs.swe import SWEEnv
from swe_common import PROBLEM, act, bash, bwrap

pytestmark = bwrap

MECHANISMS = ["auto", "rlimit+rss-watch"]

# Forks children that sleep, at most 64, until a fork fails; prints how many it got.
FORK_BOMB = ("python3 -c \"import os, time\nn = 0\ntry:\n    for _ in range(64):\n"
             "        if os.fork() == 0:\n            time.sleep(2)\n            os._exit(0)\n"
             "        n += 1\nexcept OSError as e:\n    print('fork failed:', e)\nprint('forked', n)\"")
# K children each touch 48 MB (under the 128 MiB per-process cap) and hold it for 2 s; "kept i"
# = child i held its 48 MB all along. They start within a fraction of those 2 s, so the kept ones
# held together (the OOM killer may also take a child that had already touched its memory).
HOG = ("python3 -c \"import os, time\nfor i in range({k}):\n    if os.fork() == 0:\n"
       "        b = bytearray(48 << 20)\n        for j in range(0, len(b), 4096):\n            b[j] = 1\n"
       "        time.sleep(2)\n        print('kept', i, flush=True)\n        os._exit(0)\n"
       "for i in range({k}):\n    os.wait()\"")


def make_env(mechanism, **kw):
    if PROBLEM is not None:
        pytest.skip(f"no sandbox: {PROBLEM}")
    return SWEEnv(command_timeout=8.0, nproc=16, memory_mb=128, jail_memory_mb=160,
                  jail_limits=mechanism, **kw)


def can_mount() -> bool:
    """Root with CAP_SYS_ADMIN (bit 21 of the effective set): the workspace quota must be on."""
    caps = next(ln for ln in open("/proc/self/status") if ln.startswith("CapEff:")).split()[1]
    return os.geteuid() == 0 and bool(int(caps, 16) >> 21 & 1)


def leftover(uid: int) -> str:
    return subprocess.run(["ps", "-u", str(uid), "-o", "pid="], capture_output=True, text=True).stdout.strip()


def alive(env) -> bool:
    obs, _, term, _, info = bash(env, "echo alive")
    return obs == "alive" and not term and info["exit_code"] == 0


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_fork_bomb_stops_at_the_jail_process_cap(mechanism):
    e = make_env(mechanism)
    try:
        e.reset(options={"task_id": "off_by_one_paginate"})
        obs, _, term, _, _ = bash(e, FORK_BOMB)
        m = re.search(r"forked (\d+)", obs)
        assert m, obs
        forked = int(m.group(1))
        # 16 processes per jail, of which the reaper, bwrap's two, bash and python hold 5
        assert "Resource temporarily unavailable" in obs and forked <= 16 - 4 and not term, obs
        assert alive(e) and leftover(e.sandbox.uid) == ""
    finally:
        e.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_memory_split_over_processes_stops_at_the_jail_cap(mechanism):
    e = make_env(mechanism)
    try:
        e.reset(options={"task_id": "off_by_one_paginate"})
        obs, *_ = bash(e, HOG.format(k=1))
        assert "kept 0" in obs  # one child alone is within every limit
        obs, _, term, _, _ = bash(e, HOG.format(k=8))  # 8 x 48 MB = 384 MB against 160 MiB
        # 160 MiB hold 3 children (50.3 MB each) with room for the interpreters; 4 allows for
        # one child that started late, after another was killed
        assert obs.count("kept") <= 4 and "memory limit" in obs and not term, obs
        assert alive(e) and leftover(e.sandbox.uid) == ""
    finally:
        e.close()


def test_disk_filler_stops_at_the_workspace_quota():
    e = make_env("auto", workspace_limit_mb=8)
    try:
        if not e.workspace_quota and not can_mount():
            pytest.skip(f"no workspace quota on this host (not root with CAP_SYS_ADMIN): {e.jail_limits}")
        e.reset(options={"task_id": "off_by_one_paginate"})
        obs, _, term, _, _ = bash(e, "for i in 1 2 3 4; do head -c 4000000 /dev/zero > f$i; done; du -sk .")
        # the third file hits the 8 MiB quota while the command runs; du runs before any cleanup
        assert "No space left on device" in obs and int(obs.split()[-2]) <= 8192 and not term, obs
        obs, *_ = bash(e, "rm f*; head -c 4000000 /dev/zero > g && echo written")
        assert obs == "written"
        # the jail's other writable places are bounded too: /dev/shm and /tmp are 64 MiB tmpfs
        # (16 MiB files: RLIMIT_FSIZE), /dev itself is read-only
        obs, *_ = bash(e, "echo x > /dev/x; for d in /dev/shm /tmp; do for i in 1 2 3 4 5; do "
                          "head -c 16000000 /dev/zero > $d/f$i; done; du -sk $d; done")
        assert "/dev/x: Read-only file system" in obs and obs.count("No space left on device") == 2, obs
        assert all(int(line.split()[0]) <= 65536 for line in obs.splitlines() if line.endswith(("/dev/shm", "/tmp")))
        assert alive(e)
    finally:
        e.close()


def test_mechanism_is_reported_and_checked():
    e = make_env("rlimit+rss-watch")
    try:
        assert e.jail_limits.startswith("rlimit+rss-watch: memory 160 MiB per jail")
    finally:
        e.close()
    with pytest.raises(ValueError, match="valid: auto, cgroup-v2, cgroup-v1, rlimit"):
        SWEEnv(jail_limits="quota")


# --- the verdict ------------------------------------------------------------------------------
# Files and code a submission plants to make the grading report a pass without a fix: runner
# shadows and hooks, a patched runner, forged result lines on stdout and on every fd it can open.
TAMPER = {
    "conftest.py": "import pytest\npytest._run_tests = lambda tests, opts: (len(tests), 0, 0, [])\n",
    "tests/conftest.py": "import pytest\npytest.main = lambda *a, **k: 0\n",
    "pytest.py": "import sys\nprint('passed=5 failed=0 errors=0')\nsys.exit(0)\n",
    "sitecustomize.py": "import os\nos._exit(0)\n",
}
PATCHER = """import os, sys
import pytest
pytest._run_tests = lambda tests, opts: (len(tests), 0, 0, [])
pytest.Skipped = AssertionError
_m = sys.modules.get("__main__")
for _name in ("_run_one", "_collect", "_in_child", "main"):
    if _m is not None and hasattr(_m, _name):
        setattr(_m, _name, lambda *a, **k: ("pass", ""))
print("@@agentrl-result " + "0" * 32 + " passed=5 failed=0 errors=0")
print("passed=5 failed=0 errors=0")
"""
# ... and a forged result on every fd the test's process has (its own report pipe included)
SPRAY = """for _fd in range(3, 256):
    try:
        os.write(_fd, b"passed=5 failed=0 errors=0\\n")
    except OSError:
        pass
_opened = 0
try:  # the harness, parent of this process: non-dumpable, so its fds are out of reach
    _fds = os.listdir(f"/proc/{os.getppid()}/fd")
except OSError:
    _fds = []
for _fd in _fds:
    try:
        with open(f"/proc/{os.getppid()}/fd/{_fd}", "w") as _fh:
            _fh.write("passed=5 failed=0 errors=0\\n")
        _opened += 1
    except OSError:
        pass
print("HARNESS FDS", len(_fds), _opened, flush=True)
"""


def plant(env, code=PATCHER):
    for rel, text in TAMPER.items():
        act(env, tool="file_editor", command="create", path=rel, file_text=text)
    act(env, tool="file_editor", command="insert", path="pager/__init__.py", insert_line=0, new_str=code)


def test_tampering_submission_still_fails_and_a_fix_still_passes():
    e = make_env("auto")
    try:
        e.reset(options={"task_id": "off_by_one_paginate"})
        plant(e)
        obs, r, term, _, info = act(e, tool="finish")
        assert (r, term, info["won"]) == (0.0, True, False) and info["tests_failed"] == 2, obs
        e.reset(options={"task_id": "off_by_one_paginate"})
        plant(e, PATCHER + SPRAY)
        obs, r, term, _, info = act(e, tool="finish")
        assert (r, term, info["won"]) == (0.0, True, False) and "HARNESS FDS 0 0" in obs, obs
        # the same tampering on top of the real fix: the fix is graded, the tampering ignored
        e.reset(options={"task_id": "off_by_one_paginate"})
        e.step(format_action(e.expert_action()))
        plant(e)
        obs, r, term, _, info = act(e, tool="finish")
        assert (r, info["won"], info["tests_passed"]) == (1.0, True, 5), obs
    finally:
        e.close()


def test_import_time_exit_is_no_pass():
    e = make_env("auto")
    try:
        e.reset(options={"task_id": "off_by_one_paginate"})
        act(e, tool="file_editor", command="insert", path="pager/__init__.py", insert_line=0,
            new_str="import os\nprint('passed=5 failed=0 errors=0', flush=True)\nos._exit(0)")
        obs, r, _, _, info = act(e, tool="finish")
        assert r == 0.0 and not info["won"] and "did not complete" in obs
    finally:
        e.close()


def test_a_cap_that_cannot_be_applied_runs_nothing(monkeypatch):
    e = make_env("auto")
    try:
        if not e.sandbox.limiter.kernel_pids:
            pytest.skip(f"no cgroup on this host: {e.jail_limits}")
        e.reset(options={"task_id": "off_by_one_paginate"})

        def refuse(path, value):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr("agentrl_envs.swe.limits._write", refuse)
        obs, _, term, _, _ = bash(e, "touch ran")
        assert "could not apply its limits" in obs and not term and not (e.repo / "ran").exists()
        assert e.sandbox.limiter.dirs == []  # the half-made cgroup is gone
        monkeypatch.undo()
        assert alive(e)
    finally:
        e.close()
