"""Turns as requests (``ContinuousPlay(requests=...)``, ``agentrl.sampling.Engine.submit`` / ``poll``)
on the HF engine: the tiny model and the counting env with a length per task (a real env, a real
model). The same tests run on vLLM's engine in tests/sampling/test_vllm_engine.py, where requests
really generate on their own; here ``poll`` runs one batched generate over what is queued, so this
checks the bookkeeping: episodes of different lengths leave in the order they end (not the order
they were submitted), a freed slot is taken by a queued task while longer episodes go on, and
every turn's tokens, behaviour log-probs and version are recorded.

Runtime: ~10 s.
"""

from __future__ import annotations

import math

import pytest
import torch

import tests.trainer.count_env  # noqa: F401  (registers agentrl-test/Count-v0)
from agentrl.rollout import RolloutSettings
from agentrl.rollout.continuous import ContinuousPlay, EngineRequests, request_key
from agentrl.rollout.env_pool import LocalEnvs
from agentrl.sampling import HFEngine, SamplingSpec, end_token_ids
from agentrl.sampling.hf import batch_seed
from agentrl.sampling.keys import sampling_seed

COUNT = "agentrl-test/Count-v0"


@pytest.fixture(scope="module")
def tiny():
    import tempfile

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.models import build_tiny_model

    torch.set_num_threads(1)
    d = build_tiny_model(tempfile.mkdtemp() + "/m", texts=["Say 1. <action>1</action> Say 2."] * 40, vocab_size=300,
                         hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1)
    return AutoModelForCausalLM.from_pretrained(d), AutoTokenizer.from_pretrained(d)


def test_hf_submit_queues_and_poll_generates_what_is_queued(tiny):
    model, tok = tiny
    spec = SamplingSpec(max_new_tokens=5, end_token_ids=(tok.eos_token_id,))
    short = SamplingSpec(max_new_tokens=2)
    engine = HFEngine.of(model, tok, spec)
    prompts = [tok.encode("Say 1."), tok.encode("Say 2. Say 3.")]
    a = engine.submit(prompts, spec, seeds=[3, 4])
    b = engine.submit(prompts[:1], short, seeds=[5])
    assert (a, b, engine.unfinished()) == ([0, 1], [2], 3)
    done = {f.request_id: f for f in engine.poll()}
    assert sorted(done) == [0, 1, 2] and engine.unfinished() == 0 and engine.poll() == []
    # one generate per spec, keyed by its requests' keys in order: the blocking call's tokens
    ids, lps = engine.generate(prompts, spec, seed=batch_seed([3, 4]))
    assert [done[0].completion_ids, done[1].completion_ids] == ids
    assert [done[0].logprobs, done[1].logprobs] == lps
    assert len(done[2].completion_ids) <= 2 and done[2].version is None
    assert batch_seed([3, None]) is None and batch_seed([3, 4]) == sampling_seed(3, 4)


def _tasks(group: str, length: int, n: int = 2) -> list[dict]:
    return [{"seed": 0, "options": {"length": length, "parity": True}, "group_id": group} for _ in range(n)]


def test_episodes_leave_as_they_end_and_a_freed_slot_is_taken_at_once(tiny):
    model, tok = tiny
    spec = SamplingSpec(max_new_tokens=4, end_token_ids=tuple(sorted(end_token_ids(model, tok))))
    engine = HFEngine.of(model, tok, spec)
    settings = RolloutSettings(COUNT, max_turns=8, max_prompt_tokens=100_000)
    envs = LocalEnvs(COUNT, {}, 4)
    play = ContinuousPlay(None, tok, settings, envs, 4, version=lambda: 7, requests=EngineRequests(engine, spec, seed=1))
    try:
        # 4 slots: the long group (5 turns) and a short one (1 turn) start; the second short group
        # waits in the queue for the slots the first frees, and still ends before the long one
        play.submit(_tasks("long", 5) + _tasks("short", 1) + _tasks("short2", 2))
        play.tick()  # the first turn of all 4: the short group has ended, its slots are free
        assert [s.ep.group_id for s in play.slots] == ["long", "long"] and len(play.queue) == 2
        assert len(play.complete) == 1 and sorted(play.free) == [2, 3]
        groups = play.take(3)
    finally:
        envs.close()
    assert [g[0].group_id for g in groups] == ["short", "short2", "long"]
    for g in groups:
        want = {"long": 5, "short": 1, "short2": 2}[g[0].group_id]
        for ep in g:
            assert ep.length == want and ep.error is None and not ep.truncated
            assert [r.t for r in ep.steps] == list(range(want))
            for r in ep.steps:
                assert r.action_token_ids and len(r.behaviour_logps) == len(r.action_token_ids)
                assert all(math.isfinite(x) and x <= 0 for x in r.behaviour_logps)
                assert r.policy_version == 7  # the HF engine tags nothing: the play's version
            assert ep.tokens.completion_ids == [r.action_token_ids for r in ep.steps]
    assert not play.waiting and not play.slots and play.groups_in_flight == 0
    assert request_key("long/0") == request_key("long/0") != request_key("long/1")
