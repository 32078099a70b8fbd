"""Rollout timing (``RolloutTiming``) on real envs, and fingerprints computed once after the
rollout (the vLLM path) equal to the ones captured during each turn's generate.

Runtime: ~10 s.
"""

import time

import pytest
import torch
from count_env import ENV_ID

from agentrl.rollout import RolloutSettings, hf_generate_fn, run_episodes, truncated_forward_fingerprints
from agentrl.rollout.env_pool import WorkerEnvs
from agentrl.rollout.episodes import RolloutTiming
from tests.rollout.crash_envs import SLEEP_ID


def _fixed(tok, text, sleep_s=0.0):
    """A policy that always answers ``text`` (token ids of it), after ``sleep_s`` per call."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    calls = []

    def gen(prompts):
        calls.append(len(prompts))
        time.sleep(sleep_s)
        return [list(ids) for _ in prompts]

    gen.calls = calls
    return gen


@pytest.mark.parametrize("workers", [0, 1])
def test_env_time_of_a_sleeping_env(tiny, workers):
    """Sleep-v0 sleeps 30 ms per reset and per step: 2 episodes of 2 steps in this process are
    2 x (1 + 2) x 30 ms = 180 ms of env time at least; in one worker the same calls run one after
    another there, so the bound holds too. The policy sleeps 50 ms per call: 2 turns, 100 ms of
    generate time at least. Both are inside the wall time. (Lower bounds: load only adds time.)"""
    _, tok = tiny
    tasks = [{"seed": i, "options": {"length": 2, "sleep_ms": 30}, "group_id": "a"} for i in range(2)]
    gen = _fixed(tok, "1</action><|im_end|>", sleep_s=0.05)
    timing = RolloutTiming()
    settings = RolloutSettings(SLEEP_ID, max_turns=5)
    if workers:
        with WorkerEnvs("tests.rollout.crash_envs:" + SLEEP_ID, {}, 2, workers=1) as pool:
            eps = run_episodes(tasks, gen, tok, settings, envs=pool, timing=timing)
    else:
        eps = run_episodes(tasks, gen, tok, settings, timing=timing)
    assert [ep.length for ep in eps] == [2, 2]
    assert timing.turns == 2 and gen.calls == [2, 2]
    assert 0.18 <= timing.env_s <= timing.wall_s
    assert timing.generate_s >= 0.1 and timing.env_s + timing.generate_s <= timing.wall_s
    assert 0 < timing.env_share <= 1


def test_timing_adds_up_across_calls_on_textcraft(tiny):
    """A real env (TextCraft): every call adds to the same timing; env time stays within wall."""
    _, tok = tiny
    tasks = [{"seed": i, "group_id": "a"} for i in range(3)]
    settings = RolloutSettings("agentrl/TextCraft-v0", env_kwargs={"prompt_style": "compact"}, max_turns=2,
                               max_prompt_tokens=100_000)
    timing = RolloutTiming()
    gen = _fixed(tok, "inventory</action><|im_end|>")
    run_episodes(tasks, gen, tok, settings, timing=timing)
    first = (timing.wall_s, timing.env_s)
    eps = run_episodes(tasks, gen, tok, settings, timing=timing)
    assert all(ep.length == 2 and ep.error is None for ep in eps)
    assert timing.turns == 4 and gen.calls == [3] * 4
    assert timing.wall_s > first[0] and timing.env_s > first[1] > 0
    assert timing.env_s <= timing.wall_s


@pytest.mark.parametrize("mode", ["window", "trajectory"])
def test_fingerprints_after_the_rollout_equal_per_turn_ones(tiny, mode):
    """The vLLM path's fingerprints (one truncated forward over every step's prompt after the
    last turn) equal the ones the prefill hook captures during each turn's generate: the same
    hidden state of block 0 at each prompt's last token (greedy decoding: the same episodes)."""
    model, tok = tiny
    tasks = [{"seed": i, "options": {"length": n}, "group_id": "a"} for i, n in enumerate([2, 3, 1])]
    per_turn = run_episodes(tasks, hf_generate_fn(model, tok, max_new_tokens=4, do_sample=False, fingerprint_layer=0),
                            tok, RolloutSettings(ENV_ID, context_mode=mode, max_turns=4))
    calls = []

    def after(prompts):  # 50 ms longer than the forward: the timing must count at least that
        calls.append(len(prompts))
        time.sleep(0.05)
        return truncated_forward_fingerprints(model, prompts, 0, tok.pad_token_id)

    timing = RolloutTiming()
    later = run_episodes(tasks, hf_generate_fn(model, tok, max_new_tokens=4, do_sample=False), tok,
                         RolloutSettings(ENV_ID, context_mode=mode, max_turns=4, fingerprints_after=after),
                         timing=timing)
    recs_a = [r for ep in per_turn for r in ep.steps]
    recs_b = [r for ep in later for r in ep.steps]
    assert len(recs_a) == len(recs_b) >= 4
    assert calls == [len(recs_b)]  # one call for the whole rollout
    assert timing.fingerprint_s >= 0.05
    for a, b in zip(recs_a, recs_b, strict=True):
        assert a.action_token_ids == b.action_token_ids
        assert torch.allclose(torch.tensor(a.fingerprint), torch.tensor(b.fingerprint), atol=1e-4)
