"""agentrl/SWE-v0: tasks, tools, RTMC signatures, grading and the bubblewrap sandbox.

Tests marked ``bwrap`` need bubblewrap (CI installs it: `apt-get install -y bubblewrap`); they are
skipped, with the reason, only where it is missing. Runtime ~30 s on a loaded 2-core machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import statistics
import subprocess
import threading
import time
import tracemalloc

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentrl.envs  # noqa: F401 - registers agentrl/SWE-v0
from agentrl.actions import format_action
from agentrl.envs import expert_trace
from agentrl.envs.swe import SWEEnv, families, load_tasks, sandbox
from agentrl.envs.swe import signatures as S
from agentrl.envs.swe.grading import parse_result as _parse_result
from agentrl.envs.swe.sandbox import sandbox_problem
from agentrl.envs.swe.workspace import MAX_DEPTH
from agentrl.envs.swe.workspace import rmtree as _rmtree
from agentrl.envs.swe.workspace import scan as _scan

PROBLEM = sandbox_problem()
bwrap = [pytest.mark.bwrap, pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox: {PROBLEM}")]

TASKS = load_tasks()
PAGES = "pager/pages.py"
OLD_LINE = "    start = page * per_page\n"
NEW_LINE = "    start = (page - 1) * per_page\n"
# RTMC Sec. 4.2: 4-char MD5 of old + new text; the paginate fix changes exactly this one line.
PAGES_HASH = hashlib.md5((OLD_LINE + NEW_LINE).encode()).hexdigest()[:4]
FLAGS0 = "(think=0,test_ok=0,test_err=0,exec_ok=0,exec_err=0)"


def act(env, **call):
    return env.step(format_action(json.dumps(call)))


def bash(env, command):
    return act(env, tool="bash", command=command)


@pytest.fixture(scope="module")
def env():
    if PROBLEM is not None:
        pytest.skip(f"no sandbox: {PROBLEM}")
    e = SWEEnv(command_timeout=3.0)
    yield e
    e.close()


# --- task catalogue (no sandbox needed) -------------------------------------------------------
def test_catalogue_has_twenty_tasks_of_six_bug_kinds():
    assert len(TASKS) >= 20
    assert families() == ["exception_handling", "missing_edge_case", "off_by_one", "string_handling",
                          "wrong_default", "wrong_operator"]
    for fam in families():
        splits = {t.split for t in TASKS if t.family == fam}
        assert splits == {"train", "valid"}, fam
    for t in TASKS:
        modules = [p for p in t.files if p.endswith(".py") and not p.endswith("__init__.py") and p not in t.tests]
        assert 1 <= len(modules) <= 3 and len(t.tests) == 1, t.id
        fixed = t.fixed_files()  # raises unless each patch text occurs exactly once
        assert fixed != t.files and all(fixed[p] == t.files[p] for p in t.tests), t.id
        assert t.patch_states(t.patch[0]["path"])[-1] == fixed[t.patch[0]["path"]]


# --- signatures (pure functions) --------------------------------------------------------------
def test_edit_hash_and_line_diff():
    assert S.edit_hash("a", "b") == "187e"  # md5("ab") = 187ef443...
    assert S.line_diff("a\nb\nc\n", "a\nB\nc\n") == ("b\n", "B\n")
    assert S.line_diff("a\nc\n", "a\nb\nc\n") == ("", "b\n")
    assert S.edit_op("a\nc\n", "a\nb\nc\n") == ("insert", hashlib.md5(b"b\n").hexdigest()[:4])
    # Paper's example: lines 100-299 are buckets [1-2].
    assert S.buckets(100, 299) == [1, 2] and S.bucket_scope([1, 2]) == "partial[1-2]"
    assert S.buckets(1, 40) == [0] and S.bucket_scope([0]) == "partial[0]"


@pytest.mark.parametrize("command,expected", [
    ("cat pkg/core.py", ("view", "pkg/core.py", None)),
    ("head -n 150 pkg/core.py", ("view", "pkg/core.py", (1, 150))),
    ("sed -n '120,180p' pkg/core.py", ("view", "pkg/core.py", (120, 180))),
    ("grep -rn 'def mean' pkg", ("search", "pkg", None)),
    ("find . -name '*.py'", ("search", ".", None)),
    ("ls", ("search", ".", None)),
    ("cd /testbed && python -m pytest tests/test_x.py::test_a -q 2>&1 | tail -5", ("test", "tests/test_x.py", None)),
    ("pytest", ("test", ".", None)),
    ("pip install numpy", ("install", "numpy", None)),
    ("python repro.py", ("execute", "repro.py", None)),
    ("python3 -c 'print(1)'", ("execute", "-c", None)),
    ("rm -f repro.py", ("fileop", "repro.py", None)),
    ("cat pkg/a.py | grep foo", ("view", "pkg/a.py", None)),
])
def test_bash_commands_map_to_table1_categories(command, expected):
    assert S.classify_bash(command) == expected


def test_state_signature_is_order_invariant():
    a, b = S.SignatureTracker(), S.SignatureTracker()
    for path, op in [("b.py", "Vf"), ("a.py", "M:1234"), ("a.py", "V[0]"), ("b.py", "S")]:
        a.add(path, op)
    for path, op in [("b.py", "S"), ("a.py", "V[0]"), ("b.py", "Vf"), ("a.py", "M:1234"), ("b.py", "Vf")]:
        b.add(path, op)
    expected = "a.py:M:1234,V[0] | b.py:S,Vf | " + FLAGS0
    assert a.state_sig() == b.state_sig() == expected
    assert a.modified and not S.SignatureTracker().modified


def test_missing_bwrap_refuses_to_start(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sandbox, "_PROBED", {})
    with pytest.raises(RuntimeError, match="apt-get install -y bubblewrap"):
        SWEEnv()


# --- every task: fails before, the expert's reference patch passes ------------------------------
@pytest.mark.bwrap
@pytest.mark.parametrize("task_id", [t.id for t in TASKS])
def test_task_fails_before_and_expert_reaches_reward_one(env, task_id):
    task = next(t for t in TASKS if t.id == task_id)
    env.reset(options={"task_id": task_id})
    obs, reward, term, _, info = act(env, tool="finish")
    assert (reward, term, info["won"]) == (0.0, True, False)
    assert info["tests_failed"] >= 1 and "not resolved" in obs
    env.reset(options={"task_id": task_id})
    calls = []
    for _ in range(10):
        a = env.expert_action()
        calls.append(json.loads(a)["tool"])
        obs, reward, term, _, info = env.step(format_action(a))
        if term:
            break
    assert calls == ["file_editor"] * len(task.patch) + ["bash", "finish"]
    assert (reward, info["won"], info["tests_passed"], info["tests_failed"]) == (1.0, True, task.num_tests, 0)
    assert env.expert_action() is None


class TestEpisode:
    pytestmark = bwrap

    def test_reused_env_plays_like_a_fresh_one(self, env):
        # envs persist across episodes (reset, not rebuilt): after other episodes, one left
        # with an edited file and a stray one, the module's env replays a task as a new one does
        env.reset(options={"task_id": "off_by_one_paginate"})
        act(env, tool="file_editor", command="str_replace", path=PAGES, old_str=OLD_LINE, new_str="    start = 0\n")
        bash(env, "echo x > stray.txt && pytest -q")
        options = {"split": "valid", "families": ["wrong_operator"]}
        reused = expert_trace(env, 1, options)
        fresh = SWEEnv(command_timeout=3.0)
        try:
            assert expert_trace(fresh, 1, options) == reused
        finally:
            fresh.close()
        assert reused[-1][1] == 1.0 and reused[-1][4]["won"] and len(reused) > 3

    def test_expert_trajectory_signatures(self, env):
        obs, info = env.reset(options={"task_id": "off_by_one_paginate"})
        assert obs.startswith("Repository /testbed:\npager/\n  __init__.py\n  pages.py\ntests/\n")
        assert info["state_sig"] == FLAGS0 and "action_sig" not in info
        a = json.loads(env.expert_action())
        assert a == {"tool": "file_editor", "command": "str_replace", "path": PAGES,
                     "old_str": OLD_LINE, "new_str": NEW_LINE}
        _, r, _, _, info = act(env, **a)
        assert info["action_sig"] == f"modify:replace:{PAGES_HASH}@{PAGES}"
        assert info["state_sig"] == f"{PAGES}:M:{PAGES_HASH} | {FLAGS0}"
        _, r, _, _, info = env.step(format_action(env.expert_action()))
        assert info["action_sig"] == "test@.:ok" and r == 0.0
        assert info["state_sig"] == f"{PAGES}:M:{PAGES_HASH} | (think=0,test_ok=1,test_err=0,exec_ok=0,exec_err=0)"
        _, r, term, _, info = env.step(format_action(env.expert_action()))
        assert (info["action_sig"], r, term) == ("finish", 1.0, True)
        obs, r, term, _, _ = act(env, tool="think", thought="again")
        assert (r, term) == (0.0, True) and "episode is over" in obs

    @pytest.mark.parametrize("damage", ["sed -i 's/pages start at 1/no/' pager/pages.py", "rm pager/pages.py",
                                        ": > pager/pages.py", "rm pager/pages.py && mkdir pager/pages.py"])
    def test_expert_recovers_from_other_edits(self, env, damage):
        env.reset(options={"task_id": "off_by_one_paginate"})
        bash(env, damage)
        for _ in range(6):
            _, r, term, _, info = env.step(format_action(env.expert_action()))
            if term:
                break
        assert r == 1.0 and info["won"]

    def test_view_search_think_signatures(self, env):
        env.reset(options={"task_id": "off_by_one_paginate"})
        obs, _, _, _, info = act(env, tool="file_editor", command="view", path=PAGES, view_range=[13, -1])
        assert obs.splitlines()[1] == "    13\tdef paginate(items, page, per_page=10):"
        assert info["action_sig"] == f"view:partial[0]@{PAGES}"
        obs, _, _, _, info = act(env, tool="file_editor", command="view", path="/testbed/pager/pages.py")
        assert info["action_sig"] == f"view:full@{PAGES}" and "     1\t" in obs
        obs, _, _, _, info = act(env, tool="search", pattern="per_page", path="pager")
        assert info["action_sig"] == "search@pager"
        # per_page is on lines 6, 8, 9, 10, 13, 14, 17, 18 of pages.py (counted by hand)
        assert obs.startswith("8 match(es)")
        assert f"{PAGES}:17: start = page * per_page" in obs
        _, _, _, _, info = act(env, tool="think", thought="the start index is off by one page")
        _, _, _, _, info = bash(env, "head -n 5 pager/pages.py")
        assert info["action_sig"] == f"view:partial[0]@{PAGES}"
        _, _, _, _, info = bash(env, "python3 -c 'import pager; print(pager.paginate([1, 2, 3], 1, 2))'")
        assert info["action_sig"] == "execute@-c:ok"
        assert info["state_sig"] == (f"pager:S | {PAGES}:V[0],Vf | "
                                     "(think=1,test_ok=0,test_err=0,exec_ok=1,exec_err=0)")

    def test_same_edit_same_signature_with_any_tool(self, env):
        env.reset(options={"task_id": "off_by_one_paginate"})
        _, _, _, _, via_editor = act(env, tool="file_editor", command="str_replace", path=PAGES,
                                     old_str="page * per_page", new_str="(page - 1) * per_page")
        env.reset(options={"task_id": "off_by_one_paginate"})
        _, _, _, _, via_sed = bash(env, "sed -i 's/= page \\* per_page/= (page - 1) * per_page/' pager/pages.py")
        assert via_editor["action_sig"] == via_sed["action_sig"] == f"modify:replace:{PAGES_HASH}@{PAGES}"
        assert via_sed["state_sig"] == f"{PAGES}:M:{PAGES_HASH} | {FLAGS0}"
        _, _, _, _, info = bash(env, "printf 'print(1)\\n' > repro.py && python repro.py")
        # "python repro.py" would be execute, but a file was created: create wins (module docstring).
        assert info["action_sig"] == "create@repro.py"
        _, _, _, _, info = act(env, tool="file_editor", command="insert", path="repro.py", insert_line=1,
                               new_str="print(2)")
        assert info["action_sig"] == "modify:insert:" + hashlib.md5(b"print(2)\n").hexdigest()[:4] + "@repro.py"
        obs, _, _, _, info = bash(env, "python repro.py")
        assert obs == "1\n2" and info["action_sig"] == "execute@repro.py:ok"

    def test_determinism(self, env):
        runs = []
        for _ in range(2):
            obs, info = env.reset(seed=7)
            trace = [obs, info["task_id"]]
            for call in [{"tool": "bash", "command": "pytest -q; ls -l"},
                         {"tool": "file_editor", "command": "view", "path": "."}]:
                o, r, _, _, i = act(env, **call)
                trace += [o, r, i["state_sig"], i["action_sig"]]
            runs.append(trace)
        assert runs[0] == runs[1]
        train = sorted(t.id for t in TASKS if t.split == "train")
        assert runs[0][1] == train[7 % len(train)]
        valid = [t for t in TASKS if t.split == "valid"]
        for seed in range(len(valid)):
            _, info = env.reset(seed=seed, options={"split": "valid"})
            assert info["task_id"] == valid[seed].id
        _, info = env.reset(seed=1, options={"families": ["wrong_default"]})
        assert info["task_family"] == "wrong_default"

    def test_bad_reset_options(self, env):
        # one wording for every env (agentrl.envs.base.parse_reset_options)
        with pytest.raises(ValueError, match="^unknown task family 'typo'; valid: .*off_by_one"):
            env.reset(seed=0, options={"families": ["typo"]})
        with pytest.raises(ValueError, match="^families must not be empty; valid: .*off_by_one"):
            env.reset(seed=0, options={"families": []})
        with pytest.raises(ValueError, match="^unknown split 'test'; valid: train, valid$"):
            env.reset(seed=0, options={"split": "test"})
        with pytest.raises(ValueError, match=r"^unknown reset option\(s\) \['level'\]; valid: split, families, task_id$"):
            env.reset(seed=0, options={"level": 3})
        with pytest.raises(ValueError, match="^unknown task_id 'nope'; valid: .*off_by_one_paginate"):
            env.reset(seed=0, options={"task_id": "nope"})

    @pytest.mark.parametrize("response", [
        "no tags at all",
        "<action>view pager/pages.py</action>",
        "<action>[1, 2]</action>",
        '<action>{"tool": "editor", "command": "view", "path": "a.py"}</action>',
        '<action>{"tool": "file_editor", "command": "delete", "path": "pager/pages.py"}</action>',
        '<action>{"tool": "file_editor", "command": "view"}</action>',
        '<action>{"tool": "file_editor", "command": "insert", "path": "pager/pages.py", "insert_line": "3", "new_str": "x"}</action>',
        '<action>{"tool": "file_editor", "command": "view", "path": "pager/pages.py", "view_range": [1]}</action>',
        '<action>{"tool": "file_editor", "command": "view", "path": "/etc/passwd"}</action>',
        '<action>{"tool": "file_editor", "command": "create", "path": "../escape.py", "file_text": ""}</action>',
        '<action>{"tool": "search", "pattern": "root", "path": "/root"}</action>',
        '<action>{"tool": "bash"}</action>',
        '<action>{"tool": "bash", "command": ""}</action>',
    ])
    def test_invalid_actions_are_penalised_and_the_episode_goes_on(self, env, response):
        env.reset(options={"task_id": "off_by_one_paginate"})
        obs, reward, term, trunc, info = env.step(response)
        assert (reward, term, trunc, info["action_valid"]) == (-0.1, False, False, False)
        assert obs.startswith("Invalid")
        assert info["action_sig"] == "invalid" and info["state_sig"] == FLAGS0
        _, reward, _, _, info = act(env, tool="think", thought="ok")
        assert reward == 0.0 and info["action_valid"]

    def test_failed_tool_calls_are_errors_without_penalty(self, env):
        env.reset(options={"task_id": "off_by_one_paginate"})
        for call, sig in [
            (dict(command="str_replace", path=PAGES, old_str="not there", new_str="x"), f"modify:replace@{PAGES}:error"),
            (dict(command="str_replace", path=PAGES, old_str="per_page", new_str="x"), f"modify:replace@{PAGES}:error"),
            (dict(command="view", path="missing.py"), "view@missing.py:error"),
            (dict(command="create", path=PAGES, file_text="x"), f"create@{PAGES}:error"),
            (dict(command="insert", path=PAGES, insert_line=999, new_str="x"), f"modify:insert@{PAGES}:error"),
        ]:
            obs, reward, _, _, info = act(env, tool="file_editor", **call)
            assert obs.startswith("ERROR") and reward == 0.0 and info["action_valid"], call
            assert info["action_sig"] == sig and info["state_sig"] == FLAGS0

    def test_validation_shaping(self):
        env = SWEEnv(validation_shaping=True)
        try:
            for every, bonuses in [(True, [0.0, 0.05, 0.05]), (False, [0.0, 0.05, 0.0])]:
                env.shape_every_validation = every
                env.reset(options={"task_id": "off_by_one_paginate"})
                got = [bash(env, "pytest -q")[1]]  # no modification yet: Eq. 12 gives nothing
                act(env, tool="file_editor", command="str_replace", path=PAGES, old_str=OLD_LINE, new_str=NEW_LINE)
                got += [bash(env, "python -m pytest -q")[1], bash(env, "pytest")[1]]
                assert got == pytest.approx(bonuses)
        finally:
            env.close()

    def test_step_limit_grades_the_repository(self):
        env = SWEEnv(max_steps=3)
        try:
            env.reset(options={"task_id": "off_by_one_paginate"})
            env.step(format_action(env.expert_action()))
            _, r, term, _, _ = act(env, tool="think", thought="done")
            assert (r, term) == (0.0, False)
            obs, r, term, _, info = env.step("a malformed last step")
            assert term and info["won"] and info["graded_at_step_limit"]
            assert r == pytest.approx(1.0 - 0.1) and "Step limit reached" in obs
            env.reset(options={"task_id": "off_by_one_paginate"})
            for _ in range(3):
                _, r, term, _, info = act(env, tool="think", thought="...")
            assert (r, term, info["won"]) == (0.0, True, False)
        finally:
            env.close()

    def test_grading_uses_pristine_tests(self, env):
        env.reset(options={"task_id": "off_by_one_paginate"})
        bash(env, "printf 'def test_ok():\\n    pass\\n' > tests/test_pages.py && pytest -q")
        _, r, _, _, info = act(env, tool="finish")
        assert r == 0.0 and info["tests_failed"] >= 1
        env.reset(options={"task_id": "off_by_one_paginate"})
        act(env, tool="file_editor", command="insert", path="pager/__init__.py", insert_line=0,
            new_str="import os\nos._exit(0)")
        obs, r, _, _, _ = act(env, tool="finish")
        assert r == 0.0 and "did not complete" in obs

    def test_pytest_runner_in_the_jail(self, env):
        env.reset(options={"task_id": "off_by_one_paginate"})
        obs, *_ = bash(env, "pytest tests/test_pages.py::test_page_count -q")
        assert obs == ".\n1 passed"
        obs, *_ = bash(env, "python -m pytest -q -k zero")
        assert obs == ".\n1 passed"
        obs, *_ = bash(env, "pytest -x -q")
        assert obs.startswith("F\n") and obs.endswith("1 failed, 0 passed\n[exit code 1]")
        assert "where: [10, 11, 12, 13, 14, 15, 16, 17, 18, 19] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in obs
        obs, *_ = bash(env, "pytest -v tests")
        assert "tests/test_pages.py::test_first_page FAILED" in obs and "2 failed, 3 passed" in obs
        obs, *_ = bash(env, "printf 'import nope\\n' > tests/test_bad.py; pytest tests/test_bad.py")
        assert "ERROR collecting tests/test_bad.py" in obs and obs.endswith("[exit code 2]")

    def test_observations_are_truncated(self, env):
        env.reset(options={"task_id": "off_by_one_paginate"})
        obs, *_ = bash(env, "seq 1 200000")
        assert len(obs) <= env.max_obs_chars + 60 and "characters truncated" in obs
        assert obs.startswith("1\n2\n3\n") and obs.endswith("199999\n200000")

    def test_prompt_and_check_env(self):
        e = gym.make("agentrl/SWE-v0")
        try:
            assert e.spec.max_episode_steps == 30
            check_env(e.unwrapped)
            obs, info = e.reset(seed=0)
            text = e.unwrapped.prompt(obs, info, [], 0)
            assert info["task"] in text and '{"tool": "finish"}' in text
            assert text.endswith("Reply with your next command inside <action>...</action>.")
        finally:
            e.close()


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
        assert "Resource temporarily unavailable" in obs and dt < 10
        obs, info, dt = timed_bash(jail, ":(){ :|:& };:")
        assert dt < 10

    def test_memory_is_bounded(self, jail):
        obs, info, _ = timed_bash(jail, "python3 -c \"x = bytearray(4 << 30)\"")
        assert "MemoryError" in obs and info["exit_code"] == 1

    def test_endless_loops_are_killed(self, jail):
        obs, info, dt = timed_bash(jail, "(setsid sleep 1000 &); python3 -c 'while True: pass'")
        assert info["timed_out"] and "timed out after 2 s" in obs and 1.9 < dt < 6
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
    """reset and a bash step stay fast (medians; generous bounds for a loaded CI machine)."""
    resets, steps = [], []
    for i in range(5):
        t = time.perf_counter()
        env.reset(seed=i)
        resets.append(time.perf_counter() - t)
        t = time.perf_counter()
        bash(env, "ls")
        steps.append(time.perf_counter() - t)
    assert statistics.median(resets) < 0.5 and statistics.median(steps) < 2.0


# --- hardening (review findings; each test failed before its fix) -----------------------------
# Code planted in the repository's package: it runs when the grading run imports the tests. It
# looks for the result nonce wherever a process can read it cheaply (environment, argv of the
# jail's processes, stdin) and prints a result line for every candidate: a forged verdict
# ("forged", then os._exit(0)) or a garbled one ("malformed").
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
        assert "CANDIDATES 0" in obs  # the nonce is in no environment, argv or stdin
        assert not (env._base / "grade").exists()

    def test_result_line_is_parsed_defensively(self):
        n = "0123456789abcdef" * 2
        ok = f"3 passed\n@@agentrl-result {n} passed=3 failed=0 errors=0\n"
        assert _parse_result(ok, n, 0) == ((3, 0, 0), ["3 passed"])
        assert _parse_result(ok, n, 1)[0] is None  # exit code disagrees with the counts
        assert _parse_result(ok, n, None)[0] is None  # timed out
        assert _parse_result(ok.replace(n, "f" * 32), n, 0)[0] is None  # another nonce
        assert _parse_result(ok + "after\n", n, 0)[0] is None  # not the last line
        assert _parse_result(f"@@agentrl-result {n} passed=0 failed=0 errors=0", n, 0)[0] is None
        assert _parse_result(f"@@agentrl-result {n} passed=1 failed=2 errors=0", n, 1) == ((1, 2, 0), [])
        for bad in ["passed=1=2", "x=1", "passed=3 failed=0", "passed=9999999999 failed=0 errors=0",
                    "passed=\u0663 failed=0 errors=0", "passed=3 failed=0 errors=0 extra=1"]:
            assert _parse_result(f"@@agentrl-result {n} {bad}\n", n, 0)[0] is None, bad
        assert _parse_result("", n, 0) == (None, [])

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
        e = SWEEnv(workspace_limit_mb=4, workspace_limit_files=200)
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
