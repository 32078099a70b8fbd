"""agentrl/SWE-v0's sandbox: isolation, latency, and hardening against the agent's own code.

Tests need bubblewrap (CI installs it: `apt-get install -y bubblewrap`); they are skipped, with
the reason, only where it is missing.
"""

from __future__ import annotations

import hashlib
import os
import stat
import statistics
import subprocess
import threading
import time
import tracemalloc

import agentrl_envs  # noqa: F401 - registers agentrl/SWE-v0
import pytest
from agentrl_envs.actions import format_action
from agentrl_envs.swe import SWEEnv
from agentrl_envs.swe import signatures as S
from agentrl_envs.swe.grading import parse_result as _parse_result
from agentrl_envs.swe.workspace import MAX_DEPTH
from agentrl_envs.swe.workspace import rmtree as _rmtree
from agentrl_envs.swe.workspace import scan as _scan
from swe_common import (
    PAGES,
    PROBLEM,
    act,
    bash,
    open_env,
)


@pytest.fixture(scope="module")
def env():
    yield from open_env(command_timeout=3.0)


# --- isolation --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jail():
    if PROBLEM is not None:
        pytest.skip(f"no sandbox: {PROBLEM}")
    e = SWEEnv(command_timeout=2.0)
    e.reset(options={"task_id": "wrong_operator_temperature"})
    yield e
    e.close()


def timed_bash(env, command):
    t = time.monotonic()
    obs, _, _, _, info = bash(env, command)
    return obs, info, time.monotonic() - t


@pytest.mark.bwrap
@pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox: {PROBLEM}")
class TestIsolation:
    def test_no_network(self, jail):
        obs, info, _ = timed_bash(jail, "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=1)\"")
        assert info["exit_code"] == 1 and "Network is unreachable" in obs
        obs, _, _ = timed_bash(jail, "cat /sys/class/net/*/address 2>/dev/null; ls /sys/class/net 2>&1")
        assert "eth" not in obs

    def test_cannot_write_outside_or_read_root(self, jail):
        obs, _, _ = timed_bash(jail, "echo x > /usr/evil; echo x > /evil; echo x > /etc/evil; "
                                     "ls /root; ls /work; id -u; echo ok > /tmp/scratch")
        assert "/usr/evil: Read-only file system" in obs
        assert "cannot access '/root'" in obs and "cannot access '/work'" in obs
        assert "\n0\n" not in f"\n{obs}\n"  # not uid 0
        obs, _, _ = timed_bash(jail, "cat /tmp/scratch")  # /tmp is private to each command
        assert "No such file" in obs
        _, _, _, _, info = act(jail, tool="file_editor", command="view", path="/root/.bashrc")
        assert not info["action_valid"]
        timed_bash(jail, "ln -sf /etc/passwd pw; ln -sfn /root rootlink; mkfifo fifo")
        for path in ("pw", "rootlink/.bashrc"):
            obs, r, _, _, info = act(jail, tool="file_editor", command="view", path=path)
            assert not info["action_valid"] and "outside the workspace" in obs
        obs, _, _, _, info = act(jail, tool="file_editor", command="view", path="fifo")  # must not block
        assert obs.startswith("ERROR") and "not a regular file" in obs
        timed_bash(jail, "mkdir -p d && ln -sfn /etc d/etclink && ln -sfn .. d/loop")
        obs, _, _, _, info = act(jail, tool="search", pattern="root:x:0")  # /etc/passwd's first line
        assert obs.startswith("No matches") and info["action_valid"]
        for bad in ("a\x00b", "/testbed/../etc/passwd"):
            _, r, _, _, info = act(jail, tool="file_editor", command="view", path=bad)
            assert r == -0.1 and not info["action_valid"]
        _, _, _, _, info = act(jail, tool="file_editor", command="create", path="s.py", file_text="\ud800")
        assert not info["action_valid"] and not (jail.repo / "s.py").exists()

    def test_fork_bomb_is_contained(self, jail):
        obs, info, dt = timed_bash(jail, "python3 -c \"import os\nwhile True:\n    os.fork()\"")
        # the jail's 2 s command timeout ends both; 30 s leaves a loaded machine room and still
        # shows that nothing waits on the forked children
        assert "Resource temporarily unavailable" in obs and dt < 30
        obs, info, dt = timed_bash(jail, ":(){ :|:& };:")
        assert dt < 30

    def test_memory_is_bounded(self, jail):
        obs, info, _ = timed_bash(jail, "python3 -c \"x = bytearray(4 << 30)\"")
        assert "MemoryError" in obs and info["exit_code"] == 1

    def test_endless_loops_are_killed(self, jail):
        obs, info, dt = timed_bash(jail, "(setsid sleep 1000 &); python3 -c 'while True: pass'")
        # at least the 2 s limit; far less than the orphaned sleep's 1000 s (room for a loaded machine)
        assert info["timed_out"] and "timed out after 2 s" in obs and 1.9 < dt < 30
        uid = jail.sandbox.uid
        left = subprocess.run(["ps", "-u", str(uid), "-o", "pid="], capture_output=True, text=True).stdout
        assert left.strip() == ""  # nothing left running, no zombies

    def test_big_files_are_cut(self, jail):
        obs, info, _ = timed_bash(jail, "head -c 100000000 /dev/zero > big.bin; ls -l big.bin; rm big.bin")
        assert " 16777216 " in obs  # RLIMIT_FSIZE = 16 MiB stopped the write

    def test_env_still_works_after_the_attacks(self, jail):
        while True:
            _, r, term, _, info = jail.step(format_action(jail.expert_action()))
            if term:
                break
        assert r == 1.0 and info["won"]


@pytest.mark.bwrap
@pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox: {PROBLEM}")
def test_latency(env):
    """reset and a bash step stay interactive. The figures are `make bench`'s (`agentrl bench
    envs`: reset 8 ms, a step 116 ms median at load 4.8 on 2 cores); the bounds
    here are 100x and 40x those: a busy machine does not trip them, a gross regression does."""
    resets, steps = [], []
    for i in range(5):
        t = time.perf_counter()
        env.reset(seed=i)
        resets.append(time.perf_counter() - t)
        t = time.perf_counter()
        bash(env, "ls")
        steps.append(time.perf_counter() - t)
    assert statistics.median(resets) < 0.8 and statistics.median(steps) < 5.0


# --- hardening (review findings; each test failed before its fix) -----------------------------
# Code planted in the repository's package: it runs when the grading run imports the tests. It
# looks for a secret wherever a process can read it cheaply (environment, argv of the jail's
# processes, stdin) and prints a result line for every candidate: a forged verdict ("forged",
# then os._exit(0)) or a garbled one ("malformed"). The verdict travels over the harness's pipe,
# not stdout, so neither counts (test_swe_limits.py attacks the pipe and the runner).
FORGER = """import os, re, sys
_c = set()
for _f in ("/proc/self/environ", "/proc/self/cmdline", "/proc/1/environ", "/proc/1/cmdline"):
    try:
        _c |= set(re.findall(r"[0-9a-f]{{16,}}", open(_f, "rb").read().decode("latin-1")))
    except OSError:
        pass
try:
    _c |= set(re.findall(r"[0-9a-f]{{16,}}", sys.stdin.read()))
except (OSError, ValueError):
    pass
print("CANDIDATES", len(_c))
for _n in sorted(_c):
    print({line!r} % _n, flush=True)
if _c and {forged}:
    os._exit(0)
"""


@pytest.mark.bwrap
@pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox: {PROBLEM}")
class TestHardening:
    def test_grading_never_writes_through_an_agent_symlink(self, env, tmp_path):
        victim = tmp_path / "victim"
        victim.mkdir()
        (victim / "keep.txt").write_text("precious")
        env.reset(options={"task_id": "off_by_one_paginate"})
        bash(env, f"rm -rf tests && ln -s {victim} tests")
        obs, r, _, _, info = act(env, tool="finish")
        assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
        assert (victim / "keep.txt").read_text() == "precious"
        assert r == 0.0 and info["tests_failed"] >= 1  # the pristine tests ran (in a real directory)
        assert not (env._base / "grade").exists()
        # the fix plus a planted link: the pristine tests are still restored and pass
        env.reset(options={"task_id": "off_by_one_paginate"})
        env.step(format_action(env.expert_action()))
        bash(env, f"rm -rf tests && ln -s {victim} tests")
        _, r, _, _, info = act(env, tool="finish")
        assert r == 1.0 and info["won"] and sorted(p.name for p in victim.iterdir()) == ["keep.txt"]

    @pytest.mark.parametrize("line,forged", [
        ("@@agentrl-result %s passed=5 failed=0 errors=0", True),
        ("@@agentrl-result %s x=1", False),
        ("@@agentrl-result %s passed=1=2", False),
    ])
    def test_grading_verdict_cannot_be_forged_cheaply(self, env, line, forged):
        env.reset(options={"task_id": "off_by_one_paginate"})
        act(env, tool="file_editor", command="insert", path="pager/__init__.py", insert_line=0,
            new_str=FORGER.format(line=line, forged=forged))
        obs, r, term, _, info = act(env, tool="finish")
        assert (r, term, info["won"]) == (0.0, True, False)
        assert "CANDIDATES 0" in obs  # no secret in any environment, argv or stdin
        assert not (env._base / "grade").exists()

    def test_result_line_is_parsed_defensively(self):
        ok = b"passed=3 failed=0 errors=0\n"
        assert _parse_result(ok, 0) == (3, 0, 0)
        assert _parse_result(ok, 1) is None  # exit code disagrees with the counts
        assert _parse_result(ok, None) is None  # timed out
        assert _parse_result(ok + ok, 0) is None  # one line only
        assert _parse_result(b"passed=0 failed=0 errors=0", 0) is None
        assert _parse_result(b"passed=1 failed=2 errors=0", 1) == (1, 2, 0)
        for bad in [b"passed=1=2", b"x=1", b"passed=3 failed=0", b"passed=9999999999 failed=0 errors=0",
                    "passed=\u0663 failed=0 errors=0".encode(), b"passed=3 failed=0 errors=0 extra=1",
                    b"\xffpassed=3 failed=0 errors=0", b""]:
            assert _parse_result(bad, 0) is None, bad

    def test_bash_view_never_reads_host_files(self, env, tmp_path):
        host = tmp_path / "host.txt"
        host.write_text("x\n" * 250)  # tail -n 3 would be lines 248-250: bucket 2, if it were read
        env.reset(options={"task_id": "off_by_one_paginate"})
        for target in (str(host), f"/testbed/../../../..{host}"):
            _, _, _, _, info = bash(env, f"tail -n 3 {target}")
            assert info["action_sig"].startswith("view:full@") and "V[2]" not in info["state_sig"]
        _, _, _, _, info = bash(env, f"tail -n 3 {PAGES}")  # inside the workspace: still counted
        assert info["action_sig"] == f"view:partial[0]@{PAGES}"
        if os.path.exists("/proc/kmsg"):  # a regular-looking file whose read blocks forever
            done = []
            t = threading.Thread(target=lambda: done.append(bash(env, "tail -n 1 /proc/kmsg")), daemon=True)
            t.start()
            t.join(60)
            assert done and done[0][4]["action_sig"] == "view:full@/proc/kmsg"

    @pytest.mark.parametrize("response", [
        '<action>{"tool": []}</action>',
        '<action>{"tool": {"a": 1}}</action>',
        '<action>{"tool": "think", "thought": ' + "1" * 5000 + "}</action>",
        "<action>" + "[" * 2000 + "]" * 2000 + "</action>",
        '<action>{"tool": "file_editor", "command": ["view"], "path": "pager/pages.py"}</action>',
        '<action>{"tool": "search", "pattern": "x", "path": {"a": 1}}</action>',
    ])
    def test_ill_typed_json_is_an_invalid_action(self, env, response):
        env.reset(options={"task_id": "off_by_one_paginate"})
        obs, reward, term, _, info = env.step(response)
        assert (reward, term, info["action_valid"]) == (-0.1, False, False) and obs.startswith("Invalid")

    def test_deep_directories(self, tmp_path):
        e = SWEEnv()
        try:
            e.reset(options={"task_id": "off_by_one_paginate"})
            for depth, valid in [(2000, False), (MAX_DEPTH + 1, False), (10, True)]:
                _, _, _, _, info = act(e, tool="file_editor", command="create", path="d/" * depth + "x.py",
                                       file_text="x")
                assert info["action_valid"] == valid, depth
            obs, _, _, _, info = bash(e, "python3 -c \"import os\nfor _ in range(1100):\n    os.mkdir('e'); "
                                         "os.chdir('e')\nos.chdir('/testbed')\nfor _ in range(40):\n"
                                         "    os.mkdir('n' * 200); os.chdir('n' * 200)\"")
            assert info["exit_code"] == 0 and "nested deeper than 64 levels" in obs
            entries, too_deep = _scan(e.repo)
            assert too_deep == [] and max(r.count("/") for r, _ in entries) < MAX_DEPTH
            _, r, term, _, _ = act(e, tool="finish")
            assert (r, term) == (0.0, True)
            e.reset(options={"task_id": "off_by_one_paginate"})
            assert sorted(p.name for p in e.repo.iterdir()) == ["pager", "tests"]
            bash(e, "python3 -c \"import os\nfor _ in range(300):\n    os.mkdir('d'); os.chdir('d')\"")
        finally:
            base = e._base
            e.close()
        assert not base.exists()
        # a tree deeper than shutil.rmtree's recursion and longer than PATH_MAX
        fd = os.open(tmp_path, os.O_RDONLY)
        for name in ["d"] * 1100 + ["n" * 200] * 30:
            os.mkdir(name, dir_fd=fd)
            fd2 = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = fd2
        os.close(fd)
        _rmtree(tmp_path / "d")
        assert not (tmp_path / "d").exists()

    def test_workspace_limits_apply_before_the_snapshot(self):
        # without the tmpfs quota (which stops such writes while they happen: test_swe_limits.py)
        e = SWEEnv(workspace_limit_mb=4, workspace_limit_files=200, workspace_quota=False)
        try:
            e.reset(options={"task_id": "off_by_one_paginate"})
            tracemalloc.start()
            obs, _, _, _, info = bash(e, "python3 -c \"import os\nos.mkdir('junk')\nfor i in range(40):\n"
                                         "    open(f'junk/f{i:02d}', 'wb').write(b'a' * 1000000)\"")
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert peak < 10 << 20  # the files' text is never held (40 MB were written)
            assert "exceeded 4 MiB; removed: junk/f39" in obs
            sizes = [st.st_size for _, st in _scan(e.repo)[0] if not stat.S_ISDIR(st.st_mode)]
            assert sum(sizes) <= 4 << 20
            obs, _, _, _, _ = bash(e, "mkdir many && cd many && touch $(seq 1 500)")
            assert "exceeded 200 files and directories" in obs
            assert len(_scan(e.repo)[0]) <= 200 and (e.repo / PAGES).is_file()
            # the snapshot keeps no text of a big file: its edit hash covers the contents' digests
            bash(e, "rm -rf junk many && python3 -c \"open('big.txt', 'w').write('a\\n' * 50000)\"")
            before = (e.repo / "big.txt").read_bytes()
            _, _, _, _, info = bash(e, "sed -i '1s/a/b/' big.txt")
            after = (e.repo / "big.txt").read_bytes()
            h = S.edit_hash(hashlib.md5(before).hexdigest(), hashlib.md5(after).hexdigest())
            assert info["action_sig"] == f"modify:replace:{h}@big.txt"
            while True:
                _, r, term, _, info = e.step(format_action(e.expert_action()))
                if term:
                    break
            assert r == 1.0 and info["won"]
        finally:
            e.close()

    def test_jail_uid_is_the_same_in_every_env(self):
        outs = []
        for _ in range(2):
            e = SWEEnv()
            try:
                e.reset(seed=3)
                outs.append(bash(e, "ls -ln; id -u; id -g")[0])
            finally:
                e.close()
        assert outs[0] == outs[1] and outs[0].endswith("\n1000\n1000")

    def test_every_observation_respects_max_obs_chars(self, env):
        env.reset(options={"task_id": "off_by_one_paginate"})
        for call in [{"tool": "x" * 3500}, {"tool": "file_editor", "command": "view", "path": "/etc/" + "a" * 3500},
                     {"tool": "file_editor", "command": "y" * 3500, "path": "a"},
                     {"tool": "search", "pattern": "z" * 3500, "path": "."}]:
            obs, *_ = act(env, **call)
            assert len(obs) < 400, call  # the argument is echoed cut short
        small = SWEEnv(max_obs_chars=200, max_steps=1)
        try:
            small.reset(options={"task_id": "off_by_one_paginate"})
            obs, *_ = act(small, tool="x" * 3500)
            assert len(obs) <= 200
            small.reset(options={"task_id": "off_by_one_paginate"})
            obs, _, term, _, _ = bash(small, "seq 1 200000")  # graded at the step limit
            assert term and len(obs) <= 200 and "Step limit reached" in obs and obs.endswith("not resolved.")
        finally:
            small.close()
