"""Env workers (``agentrl/rollout/env_pool.py``): crash isolation, reuse, and results equal to
the in-process path, per env.

``RefEnvs`` below is the reference: today's in-process path written plainly (``gym.make`` a
fresh env at every reset, calls one after another, an exception ends the episode with
``"op: Type: message"``). The pool reuses its envs across resets, so equality with ``RefEnvs``
also checks that a reset of a used env is as good as a new one. Runtime ~20 s on a loaded
2-core machine (ALFWorld's case is marked slow).
"""

from __future__ import annotations

import time

import agentrl_envs  # noqa: F401 - registers agentrl/* ids
import gymnasium as gym
import pytest
from agentrl_envs.actions import format_action

from agentrl.rollout.env_pool import EnvFailure, LocalEnvs, WorkerEnvs
from agentrl.rollout.prompts import turn_message, user_prompt
from tests.rollout.crash_envs import CRASH_ID


class RefEnvs:
    """The env-batch interface in this process, a fresh env per reset (the reference)."""

    def __init__(self, env_id, env_kwargs, n):
        self.env_id, self.kw = env_id, dict(env_kwargs or {})
        self.envs = [gym.make(env_id, **self.kw) for _ in range(n)]

    def reset_many(self, items):
        out = []
        for slot, seed, options in items:
            self.envs[slot].close()
            self.envs[slot] = gym.make(self.env_id, **self.kw)
            try:
                out.append(self.envs[slot].reset(seed=seed, options=options))
            except Exception as e:
                out.append(EnvFailure(f"reset: {type(e).__name__}: {e}"))
        return out

    def step_many(self, items):
        out = []
        for slot, response in items:
            try:
                out.append(self.envs[slot].step(response))
            except Exception as e:
                out.append(EnvFailure(f"step: {type(e).__name__}: {e}"))
        return out

    def user_prompt(self, i, obs, info, history, t, h):
        return user_prompt(self.envs[i].unwrapped, obs, info, history, t, h)

    def turn_message(self, i, obs, info, t):
        return turn_message(self.envs[i].unwrapped, obs, info, t)

    def expert_actions(self, slots):
        return [self.envs[s].unwrapped.expert_action() for s in slots]

    def max_episode_steps(self):
        return self.envs[0].spec.max_episode_steps

    def close(self):
        for e in self.envs:
            e.close()


@pytest.fixture
def pools():
    """Make pools through ``make(...)``; every one is closed (its processes stopped) at the end."""
    made = []

    def make(*args, workers=2, **kw):
        """``workers`` = 0: the in-process ``LocalEnvs`` the trainer keeps for ``env_workers: 0``."""
        made.append(WorkerEnvs(*args, workers=workers, **kw) if workers else LocalEnvs(*args))
        return made[-1]

    yield make
    for p in made:
        procs = [w.proc for w in getattr(p, "_workers", [])]
        p.close()
        assert all(proc.poll() is not None for proc in procs)


def _count(t: int) -> str:
    return format_action(str(t))


def test_abort_fails_its_worker_calls_only_and_the_worker_is_replaced(pools):
    pool = pools(CRASH_ID, {}, 4, workers=2, timeout_s=60)
    ref = RefEnvs(CRASH_ID, {}, 4)
    resets = [(s, s, {"length": 3}) for s in range(4)]
    first = pool.reset_many(resets)
    ref.reset_many(resets)
    # worker 0 holds slots 0 and 2 (answered in this order), worker 1 slots 1 and 3
    out = pool.step_many([(2, _count(1)), (0, format_action("abort")), (1, _count(1)), (3, _count(1))])
    assert out[1] == EnvFailure("env worker died (signal 6)")
    assert out[0] == ref.step_many([(2, _count(1))])[0]  # answered before the abort: kept
    assert out[2:] == ref.step_many([(1, _count(1)), (3, _count(1))])  # the other worker: untouched
    assert pool.replaced == 1
    # slot 2's env died with its worker: it fails until reset; slot 1 goes on
    again = pool.step_many([(2, _count(2)), (1, _count(2))])
    assert again[0] == EnvFailure("env worker died (signal 6)")
    assert again[1] == ref.step_many([(1, _count(2))])[0]
    fresh = pool.reset_many([(0, 0, {"length": 3}), (2, 2, {})])
    assert fresh[0][0] != first[0][0]  # a new process made a new env (pid in the observation)
    assert pool.step_many([(0, _count(1))])[0][1:4] == (1.0, False, False)
    ref.close()


@pytest.mark.parametrize("workers", [2, 0])
def test_step_started_then_finished_equals_step_many(pools, workers):
    """``step_many_start`` sends the steps and returns at once (the Sleep env's 3 s steps run
    in the workers meanwhile); ``step_many_finish`` gives what ``step_many`` gives. No other call
    while steps are in flight."""
    from tests.rollout.crash_envs import SLEEP_ID

    pool = pools("tests.rollout.crash_envs:" + SLEEP_ID, {}, 2, workers=workers, timeout_s=60)
    ref = RefEnvs(SLEEP_ID, {}, 2)
    resets = [(s, s, {"sleep_ms": 3000 if workers else 0, "length": 2}) for s in range(2)]
    pool.reset_many(resets)  # the observations carry the process id: not compared
    ref.reset_many([(s, seed, {**o, "sleep_ms": 0}) for s, seed, o in resets])
    steps = [(0, _count(1)), (1, format_action("raise"))]
    t0 = time.monotonic()
    pool.step_many_start(steps)
    if workers:
        # sending two short requests takes milliseconds; waiting for the steps would take 3 s
        # (the bound leaves a loaded machine 1.5 s of slack)
        assert time.monotonic() - t0 < 1.5
        with pytest.raises(RuntimeError, match="in flight"):
            pool.step_many([(0, _count(2))])
    assert pool.step_many_finish() == ref.step_many(steps)
    with pytest.raises(RuntimeError, match="no step_many_start"):
        pool.step_many_finish()
    ref.close()


def test_hang_times_out_and_the_pool_goes_on(pools):
    pool = pools(CRASH_ID, {}, 4, workers=2, timeout_s=60)  # starting workers on a loaded machine takes > 1.5 s
    pool.reset_many([(s, s, {}) for s in range(4)])
    pool.timeout_s = 1.5
    t0 = time.monotonic()
    out = pool.step_many([(s, format_action("hang") if s == 1 else _count(1)) for s in range(4)])
    assert time.monotonic() - t0 < 30
    assert out[1] == out[3] == EnvFailure("env call timed out after 1.5 s")  # worker 1: slots 1, 3
    assert [r[1] for r in (out[0], out[2])] == [1.0, 1.0]
    assert pool.replaced == 1
    pool.timeout_s = 60  # the replacement worker starts and makes its envs in the next call
    assert all(isinstance(r, tuple) for r in pool.reset_many([(s, s, {}) for s in range(4)]))
    assert [r[1] for r in pool.step_many([(s, _count(1)) for s in range(4)])] == [1.0] * 4


def test_the_timeout_is_per_call_not_per_batch(pools):
    """One worker owes four 0.6 s steps: 2.4 s in all, past the 1.5 s limit, while each call
    stays 0.9 s under it. Per call (the docstring's promise), every step answers and no worker
    is replaced; a per-batch deadline would fail the last ones."""
    from tests.rollout.crash_envs import SLEEP_ID

    pool = pools("tests.rollout.crash_envs:" + SLEEP_ID, {}, 4, workers=1, timeout_s=60)
    pool.reset_many([(s, s, {"sleep_ms": 600, "length": 3}) for s in range(4)])
    pool.timeout_s = 1.5
    t0 = time.monotonic()
    out = pool.step_many([(s, _count(1)) for s in range(4)])
    assert time.monotonic() - t0 >= 2.4  # the four calls ran one after another, past one call's limit
    assert [r[1:4] for r in out] == [(1.0, False, False)] * 4
    assert pool.replaced == 0


def test_an_env_that_raises_ends_its_episode_and_keeps_its_worker(pools):
    pool = pools(CRASH_ID, {}, 2, workers=1, timeout_s=60)
    ref = RefEnvs(CRASH_ID, {}, 2)
    items = [(0, 0, {}), (1, 1, {"length": 2})]
    pool.reset_many(items)
    ref.reset_many(items)
    steps = [(0, format_action("raise")), (1, _count(1))]
    assert pool.step_many(steps) == ref.step_many(steps)
    assert pool.step_many(steps)[0] == EnvFailure("step: RuntimeError: crash env failure (test)")
    assert pool.replaced == 0
    ref.close()


def test_an_info_that_cannot_be_pickled_fails_that_call_only(pools):
    """Pickling an ``info`` back to the trainer fails with ``TypeError`` (a lock) or
    ``AttributeError`` (a local function), not only ``pickle.PicklingError``: either fails that
    one call, and the worker, its other slots and that slot's env go on."""
    pool = pools(CRASH_ID, {}, 3, workers=1, timeout_s=60)  # one worker holds slots 0, 1, 2
    ref = RefEnvs(CRASH_ID, {}, 3)
    resets = [(s, s, {"length": 3}) for s in range(3)]
    pool.reset_many(resets)
    ref.reset_many(resets)
    # the worker answers slot 0 first: a worker that died on it would fail slots 1 and 2 as well
    out = pool.step_many([(0, format_action("lock")), (1, _count(1)), (2, format_action("local"))])
    assert out[0] == EnvFailure("result: cannot pickle '_thread.lock' object")
    assert out[1] == ref.step_many([(1, _count(1))])[0]  # "Say 2.", reward 1.0
    assert out[2] == EnvFailure("result: Can't pickle local object 'CrashEnv._execute.<locals>.<lambda>'")
    assert pool.replaced == 0
    # "lock" and "local" do not count a step, so slots 0 and 2 still expect 1 (reward 1.0, "Say 2."
    # from the same envs: a rebuilt worker would answer "env worker died" until a reset)
    again = pool.step_many([(0, _count(1)), (1, _count(2)), (2, _count(1))])
    assert [r[:2] for r in again] == [("Say 2.", 1.0), ("Say 3.", 1.0), ("Say 2.", 1.0)]
    assert pool.replaced == 0
    ref.close()


def test_envs_are_reused_across_resets_and_resize_keeps_them(pools):
    pool = pools(CRASH_ID, {}, 2, workers=2)
    made = [o for o, _ in pool.reset_many([(0, 0, {}), (1, 1, {})])]
    for seed in (5, 6):
        again = [o for o, _ in pool.reset_many([(0, seed, {}), (1, seed, {})])]
        assert [o.split("pid")[1] for o in again] == [o.split("pid")[1] for o in made]  # same process, made 1
    pool.resize(5)
    assert pool.n == 5 and pool.max_episode_steps() == 20
    out = pool.reset_many([(s, s, {}) for s in range(5)])
    assert [o[-7:-1] for o, _ in out] == ["made 3", "made 2"] * 2 + ["made 3"]  # slots 0, 2, 4 on worker 0
    pool.resize(1)
    assert pool.reset_many([(0, 9, {})])[0][0].endswith(out[0][0].split("pid")[1])  # no env made


def test_an_interrupted_call_leaves_no_stale_answers(pools, monkeypatch):
    import agentrl.rollout.env_pool as env_pool

    pool = pools(CRASH_ID, {}, 2, workers=2)
    pool.reset_many([(0, 0, {}), (1, 1, {})])

    def interrupt(*a, **kw):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(env_pool, "wait", interrupt)
        with pytest.raises(KeyboardInterrupt):
            pool.step_many([(0, _count(1)), (1, _count(1))])
    assert pool.replaced == 2  # both owed an answer: replaced, their slots lost until reset
    assert pool.step_many([(0, _count(2))]) == [EnvFailure("env call interrupted")]
    pool.reset_many([(0, 0, {}), (1, 1, {})])
    assert [r[1] for r in pool.step_many([(0, _count(1)), (1, _count(1))])] == [1.0, 1.0]


def test_workers_do_not_import_torch():
    """A worker imports env_pool; with torch in it every worker would carry torch (and its
    threads) for nothing: ``agentrl/rollout/__init__.py`` must keep generation lazy."""
    import subprocess
    import sys

    code = "import sys, agentrl.rollout.env_pool, agentrl_envs; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bad_id_or_kwargs_is_one_line_value_error(pools):
    with pytest.raises(ValueError, match="agentrl/Nope-v0"):
        pools("agentrl/Nope-v0", {}, 2, workers=1)
    with pytest.raises(ValueError, match="cannot make env .*no_such_kwarg"):
        pools(CRASH_ID, {"no_such_kwarg": 1}, 2, workers=1)


def test_prompts_match_in_process_and_prompt_errors_are_raised(pools):
    pool = pools(CRASH_ID, {}, 2, workers=2)
    ref = RefEnvs(CRASH_ID, {}, 2)
    (obs, info), _ = pool.reset_many([(0, 0, {}), (1, 1, {})])
    ref.reset_many([(0, 0, {}), (1, 1, {})])
    hist = [("Say 1.", "1"), ("Say 2.", "2"), ("Say 3.", "3")]
    for h in (0, 2):
        assert pool.user_prompt(0, obs, info, hist, 3, h) == ref.user_prompt(0, obs, info, hist, 3, h)
    assert pool.turn_message(0, obs, info, 1) == ref.turn_message(0, obs, info, 1)
    with pytest.raises(AttributeError):  # what the env's prompt raised, re-raised here
        pool.user_prompt(1, obs, None, hist, 1, 1)
    many = pool.user_prompt_many([(0, obs, info, hist, 3, 2), (1, obs, None, hist, 1, 1)])
    assert many[0] == ref.user_prompt(0, obs, info, hist, 3, 2) and isinstance(many[1], AttributeError)
    ref.close()


def test_local_envs_is_the_same_interface_in_process():
    local = LocalEnvs(CRASH_ID, {}, 2)
    try:
        out = local.reset_many([(0, 0, {}), (1, 1, {})])
        assert all(isinstance(r, tuple) for r in out)
        assert local.step_many([(0, format_action("raise"))])[0] == EnvFailure(
            "step: RuntimeError: crash env failure (test)")
        assert local.expert_actions([1]) == ["1"]
        # persistent: resets reuse the envs made (the first observation counts them), resize
        # makes only the new slots' envs
        made = [int(r[0].rsplit("made ", 1)[1].rstrip(")")) for r in local.reset_many([(0, 5, {}), (1, 6, {})])]
        local.resize(3)
        again = local.reset_many([(0, 7, {}), (1, 8, {}), (2, 9, {})])
        assert [int(r[0].rsplit("made ", 1)[1].rstrip(")")) for r in again] == [made[1] + 1] * 3
        local.resize(1)
        assert local.step_many([(1, format_action("1"))])[0] == EnvFailure(
            "step: RuntimeError: slot 1 has no env (not reset since it was made)")
    finally:
        local.close()


# --- results equal to the in-process path, per env -------------------------------------------------

def _swe_marks():
    from agentrl_envs.swe.sandbox import sandbox_problem

    problem = sandbox_problem()
    return [pytest.mark.bwrap, pytest.mark.skipif(problem is not None, reason=f"no sandbox: {problem}")]


def _alfworld_marks():
    try:
        import alfworld  # noqa: F401
    except ImportError:
        return [pytest.mark.slow, pytest.mark.alfworld, pytest.mark.skip(reason="alfworld extra not installed")]
    return [pytest.mark.slow, pytest.mark.alfworld]


ENVS = [
    pytest.param("agentrl/TextCraft-v0", 4, 6, id="textcraft"),
    pytest.param("agentrl/WebShop-v0", 4, 6, id="webshop"),
    pytest.param("agentrl/SWE-v0", 2, 5, id="swe", marks=_swe_marks()),
    pytest.param("agentrl/ALFWorld-v0", 2, 6, id="alfworld", marks=_alfworld_marks()),
]


@pytest.mark.parametrize("workers", [2, 0])
@pytest.mark.parametrize("env_id,n,turns", ENVS)
def test_results_equal_the_in_process_path(pools, env_id, n, turns, workers):
    """Two rounds of episodes (the second on reused envs): obs, reward, flags, info and prompts
    equal; the expert drives, with a malformed and an inadmissible reply mixed in. Also for the
    persistent in-process envs (0 workers)."""
    pool = pools(env_id, {}, n, workers=workers, timeout_s=120)
    ref = RefEnvs(env_id, {}, n)
    assert pool.max_episode_steps() == ref.max_episode_steps()
    try:
        for round_ in range(2):
            items = [(s, 100 * round_ + s, {}) for s in range(n)]
            got, want = pool.reset_many(items), ref.reset_many(items)
            assert got == want
            live = list(range(n))
            for t in range(turns):
                assert pool.expert_actions(live) == ref.expert_actions(live)
                experts = ref.expert_actions(live)
                acts = [format_action(a) if a is not None and (t + s) % 4 else
                        ("no tags here" if s % 2 else format_action("fly to the moon"))
                        for s, a in zip(live, experts, strict=True)]
                steps = list(zip(live, acts, strict=True))
                got, want = pool.step_many(steps), ref.step_many(steps)
                assert got == want
                for s, (obs, _, _, _, info) in zip(live, want, strict=True):
                    hist = [("o", "a")] * t
                    assert pool.user_prompt(s, obs, info, hist, t + 1, 2) == ref.user_prompt(
                        s, obs, info, hist, t + 1, 2)
                    assert pool.turn_message(s, obs, info, t + 1) == ref.turn_message(s, obs, info, t + 1)
                live = [s for s, r in zip(live, want, strict=True) if not (r[2] or r[3])]
                if not live:
                    break
    finally:
        ref.close()
