"""Lossless resume on agentrl's vLLM engine (``use_vllm: true``, vLLM's CPU build in .venv-vllm):
a continuous run with partial rollouts (``producer_mode: continuous``, ``max_staleness: 1``,
over-provisioned) killed mid-episode resumes with no episode lost or played twice; a producer
whose engine process dies stops the run in one line, after which ``--resume_from_checkpoint auto``
ends the run with every episode played exactly once; a producer process that dies is restarted
and the run loses nothing.

The resume matrix's machinery (``tests/trainer/test_resume_matrix.py``: ``run_cell``,
``no_episode_lost_or_twice``) on the counting env and a tiny Qwen2 model whose head size is 64
(vLLM's CPU attention has no kernel for the default tiny model's 16). Every run's producer starts
one vLLM server (about 35 s on 2 idle cores, more when several start at once).

Runtime on 2 cores (measured): the kill/resume cell 110-200 s (3 killed runs, then their 3
resumes, each wave in parallel), the engine crash 60-80 s (one run, its resume), the producer
restart 60-70 s (one run, two servers); 3-6 min for the file, the longer on a loaded machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.sampling.vllm_engine import vllm_python, vllm_venv

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(vllm_python() is None, reason=f"no vLLM venv at {vllm_venv()} (make vllm-venv)")]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


@pytest.fixture(scope="module")
def model64(tmp_path_factory):
    from conftest import COUNT_CORPUS

    from agentrl.models import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny64") / "model", texts=COUNT_CORPUS, vocab_size=400,
                                hidden_size=128, num_layers=2, num_heads=2, num_kv_heads=1))


def _recipe(**kw) -> dict:
    from test_resume_matrix import COUNT

    return dict(COUNT, use_vllm=True, rollout_mode="async", max_staleness=1, producer_mode="continuous",
                producer_overprovision=1, **kw)


def test_a_continuous_vllm_run_killed_mid_episode_resumes_its_episodes_in_flight(tmp_path, model64):
    """Killed by SIGKILL in a save (checkpoint 2 in place, older ones not rotated), in a step, and
    while the learner waits for a batch still in play (the engine then holds requests in flight:
    they die with it, and the checkpoint's episodes submit those turns again under the same keys);
    resumed with ``--resume_from_checkpoint auto``: every step logged once, every iteration's
    rollouts hold its trajectories once each, and each episode the checkpoint held in flight goes
    on from it (its first turns in the trained rollouts are the checkpoint's: tokens, vLLM's
    behaviour log-probs, versions)."""
    from test_resume_matrix import Cell, run_cell

    cell = Cell(_recipe(), [("before_rotate", 2), ("mid_step", 3), ("mid_wait", 2)], exact=False)
    checked = run_cell("vllm_continuous_partial_k1", cell, tmp_path, model64)
    print("vLLM: turns of episodes in flight continued after each resume:", checked)
    assert sum(checked) > 0  # some checkpoint held episodes mid-way (timing decides which)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])


STEPS = 6
"""The crash runs' steps: iterations 4 and 5 need versions 3 and 4, so the producer must generate
after a kill once checkpoint 2 is in place."""


def _killed_at_checkpoint_2(tmp_path: Path, model: str, what: str):
    """A run whose producer's vLLM server (``what`` 'engine') or producer process ('producer': the
    server's parent) is killed by SIGKILL once checkpoint 2 is in place, while the producer plays
    iterations 2-3 with turns in flight in the engine; (exit code, its output, the pid killed,
    the run's folder, its recipe, its environment)."""
    import yaml
    from test_resume_matrix import Cell, _env

    out, rec = tmp_path / "out", tmp_path / "r.yaml"
    rec.write_text(yaml.safe_dump(dict(_recipe(max_steps=STEPS), model_name_or_path=model, output_dir=str(out))))
    env = _env(Cell(_recipe(), []))
    err_path = tmp_path / "crash.out"  # stdout and stderr (a restart's warning is printed)
    with open(err_path, "w") as err:
        p = subprocess.Popen([sys.executable, "-m", "agentrl.train", str(rec)], cwd=REPO, env=env,
                             stdout=err, stderr=subprocess.STDOUT, text=True)
    try:
        t0 = time.monotonic()
        while not (out / "checkpoint-2").is_dir():
            assert p.poll() is None, ("the run ended before checkpoint 2", err_path.read_text()[-3000:])
            assert time.monotonic() - t0 < 900, "no checkpoint 2 within 900 s"
            time.sleep(0.2)
        servers = [c for c in _descendants(p.pid) if "vllm_server.py" in _cmdline(c)]
        assert len(servers) == 1, [(c, _cmdline(c)) for c in _descendants(p.pid)]  # the producer's engine only
        victim = servers[0] if what == "engine" else _ppid(servers[0])
        assert victim != p.pid
        os.kill(victim, signal.SIGKILL)
        rc = p.wait(timeout=600)  # the learner does not hang
    finally:
        if p.poll() is None:
            p.kill()
    return rc, err_path.read_text(), victim, out, rec, env


def _logged_steps(out: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()
            if x.strip() and "loss" in json.loads(x)]


def test_a_producer_whose_engine_dies_stops_the_run_in_one_line_and_the_resume_loses_nothing(tmp_path, model64):
    """The producer's vLLM server killed mid-run: the learner does not hang and trains on no part of
    the iteration it was waiting for; the run stops with exit code 2 and one line that names the
    cause (the engine's death, its pid and signal; before the fix it said ``BrokenPipeError``).
    ``--resume_from_checkpoint auto`` then ends the run: every step logged once, every iteration's
    trajectories trained once each, the checkpoint's episodes in flight going on from it."""
    from test_resume_matrix import _resumed_from, no_episode_lost_or_twice

    rc, err, server, out, rec, env = _killed_at_checkpoint_2(tmp_path, model64, "engine")
    said = [x for x in err.splitlines() if x.startswith("agentrl train: error:")]
    assert rc == 2, err[-3000:]
    assert len(said) == 1, said
    assert "async producer (rank 0) failed" in said[0] and "vLLM server" in said[0], said
    assert f"(pid {server}) died (killed by signal 9)" in said[0], said
    # what the crashed run trained: whole iterations only, each trajectory once (none of the one in play)
    logged = _logged_steps(out)
    assert 2 <= len(logged) < STEPS, logged
    no_episode_lost_or_twice(out, len(logged), 1, None, "the crashed run")
    # the resume: from the newest checkpoint, to the end, every episode once
    r = subprocess.run([sys.executable, "-m", "agentrl.train", str(rec), "--resume_from_checkpoint", "auto"], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    resumed_from = _resumed_from(r.stderr)
    assert resumed_from is not None and resumed_from.name.startswith("checkpoint-"), r.stderr[-1500:]
    checked = no_episode_lost_or_twice(out, STEPS, 1, resumed_from, "the resumed run")
    print(f"engine crash: {said[0]}\nresumed from {resumed_from.name}; turns of episodes in flight continued: "
          f"{checked}")


def test_a_producer_process_killed_mid_episode_is_restarted_and_loses_nothing(tmp_path, model64):
    """The producer's process killed mid-run (its engine server goes with it, ``die_with_parent``):
    the learner restarts it (``async_max_restarts``) at the first iteration it has not taken, on the
    newest version, with a server of its own; the episodes that were in flight are played again from
    their reset (none of their turns reached the learner), so the run ends (exit 0) with every step
    logged once and every iteration's trajectories once each."""
    from test_resume_matrix import no_episode_lost_or_twice

    rc, err, producer, out, _, _ = _killed_at_checkpoint_2(tmp_path, model64, "producer")
    assert rc == 0, err[-3000:]
    assert "async producer (rank 0) died (exit code -9); restarting it (1 of 2)" in err, err[-3000:]
    no_episode_lost_or_twice(out, STEPS, 1, None, "the restarted producer's run")
