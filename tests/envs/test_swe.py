"""agentrl/SWE-v0: tasks, tools, RTMC signatures, grading and a reused env's episodes.

Tests marked ``bwrap`` need bubblewrap (CI installs it: `apt-get install -y bubblewrap`); they are
skipped, with the reason, only where it is missing. The sandbox's isolation and the hardening
against the agent's code are in ``test_swe_sandbox.py``. Runtime ~30 s on a loaded 2-core machine.
"""

from __future__ import annotations

import gc
import hashlib
import json

import agentrl_envs  # noqa: F401 - registers agentrl/SWE-v0
import gymnasium as gym
import pytest
from agentrl_envs import expert_trace
from agentrl_envs.actions import format_action
from agentrl_envs.swe import SWEEnv, families, sandbox
from agentrl_envs.swe import signatures as S
from gymnasium.utils.env_checker import check_env
from swe_common import (
    FLAGS0,
    NEW_LINE,
    OLD_LINE,
    PAGES,
    PAGES_HASH,
    TASKS,
    act,
    bash,
    bwrap,
    open_env,
)


@pytest.fixture(scope="module")
def env():
    yield from open_env(command_timeout=3.0)


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

    def test_a_dropped_env_removes_its_files_at_once(self):
        # no reference cycle through the tools: the files go when the last reference does
        gc.disable()
        try:
            e = SWEEnv()
            e.reset(seed=0)
            base = e._base
            del e
            assert not base.exists()
        finally:
            gc.enable()

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
        # one wording for every env (agentrl_envs.base.parse_reset_options)
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
