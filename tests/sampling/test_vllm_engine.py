"""vLLM's CPU engine (agentrl.sampling.vllm_engine) against the learner, on a tiny random Qwen2 model.

One engine for the module (the server imports vLLM and loads the model in about 35 s on a loaded
2-core machine). The model's head size is 64: vLLM's CPU attention has no kernel for the default
tiny model's 16 (``Unsupported CPU attention configuration: head_dim=16``).

What is proven: weight sync (after ``load_weights`` of a version, vLLM's greedy continuations are
HF greedy decoding's with those weights, and not the previous version's), and the sampled tokens'
processed log-probs equal the learner's recomputation (an HF fp32 forward scored under the same
processing, ``agentrl.sampling.processed_logprobs``) within a tolerance measured here. Requests
(``submit`` / ``poll``, continuous batching): they finish on their own, follow their keys whatever
they are batched with, carry the version that drew them, and a load waits for none in flight;
``ContinuousPlay`` and the producer's ``PolicyGeneration`` on them.
"""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.sampling import HFEngine, SamplingSpec, processed_logprobs
from agentrl.sampling.keys import sampling_seed
from agentrl.sampling.vllm_engine import (
    VLLMEngine,
    VLLMError,
    merged_state_dict,
    sampling_params,
    vllm_python,
    vllm_venv,
)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(vllm_python() is None, reason=f"no vLLM venv at {vllm_venv()} (make vllm-venv)")]

PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [40, 41, 42, 43, 44, 45]]
LOGPROB_TOL = 2e-4
"""vLLM's processed log-probs vs the learner's fp32 recomputation: the largest difference measured
here was 2e-6 (different kernels, both fp32); 100x that leaves room for another CPU's vector
width while still failing on any change of distribution (a dropped top-k moves them by ~1)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from agentrl.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny64"), hidden_size=128, num_heads=2, num_kv_heads=1)


@pytest.fixture(scope="module")
def engine(model_dir):
    with VLLMEngine(model_dir, max_model_len=256, threads=1) as e:
        yield e


def _hf(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def _nudged(model, seed: int, scale: float = 0.05):
    """The model with every weight moved by seeded noise (a learner a few steps on)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


def _hf_greedy(model, spec):
    ids, _ = HFEngine(model, pad_id=0).generate(PROMPTS, spec.as_greedy(), seed=None)
    return ids


def test_sampling_params_carry_the_spec():
    # the spec's knobs pass through unchanged; the end tokens are the only stops (ignore_eos: the
    # checkpoint's own end token does not stop a turn the spec does not end there); greedy is T=0
    spec = SamplingSpec(temperature=0.7, top_k=5, top_p=0.9, min_p=0.05, max_new_tokens=12, end_token_ids=(2, 7))
    p = sampling_params(spec)
    assert (p["temperature"], p["top_k"], p["top_p"], p["min_p"], p["max_tokens"]) == (0.7, 5, 0.9, 0.05, 12)
    assert p["stop_token_ids"] == [2, 7] and p["ignore_eos"] and p["logprobs"] == 0
    assert sampling_params(spec.as_greedy())["temperature"] == 0.0 and "top_k" not in sampling_params(spec.as_greedy())


def test_weight_sync_greedy_equals_hf_and_each_version_is_loaded(engine, model_dir):
    spec = SamplingSpec(max_new_tokens=10, end_token_ids=(2,), greedy=True)
    base = _hf(model_dir)
    v0_hf = _hf_greedy(base, spec)
    v0, _ = engine.generate(PROMPTS, spec, seed=0)
    assert v0 == v0_hf  # the folder's own weights, before any sync

    learner = _nudged(_hf(model_dir), seed=1)
    v1_hf = _hf_greedy(learner, spec)
    assert v1_hf != v0_hf  # the nudge changes greedy decoding (else the test below proves nothing)
    assert engine.load_weights(learner.state_dict(), version=1) >= 20  # 2 layers x 12 tensors + embed + norm
    v1, _ = engine.generate(PROMPTS, spec, seed=0)
    assert engine.version == engine.loaded_version() == 1
    assert v1 == v1_hf and v1 != v0

    # back to the folder's weights as version 2: every version is loaded, not only the first
    engine.load_weights(base.state_dict(), version=2)
    v2, _ = engine.generate(PROMPTS, spec, seed=0)
    assert v2 == v0_hf and engine.loaded_version() == 2


def _learner_logprobs(model, prompts, completions, spec):
    """The learner's recomputation: an fp32 forward over prompt + completion, each completion
    token scored under ``spec``'s processing of the logits that predicted it."""
    out = []
    with torch.no_grad():
        for p, c in zip(prompts, completions, strict=True):
            ids = torch.tensor([p + c])
            logits = model(ids).logits[0, len(p) - 1:len(p) - 1 + len(c)]
            out.append(processed_logprobs(logits, torch.tensor(c), spec).tolist())
    return out


@pytest.mark.parametrize("knobs", [dict(temperature=1.0), dict(temperature=0.7, top_k=5, top_p=0.9)],
                         ids=["full", "topk5-topp0.9"])
def test_sampled_logprobs_equal_the_learners(engine, model_dir, knobs):
    learner = _nudged(_hf(model_dir), seed=3)
    engine.load_weights(learner.state_dict(), version=3)
    spec = SamplingSpec(max_new_tokens=12, end_token_ids=(2,), **knobs)
    ids, logps = engine.generate(PROMPTS, spec, seed=7)
    again, _ = engine.generate(PROMPTS, spec, seed=7)
    assert again == ids  # a seed is a key: the same tokens
    mine = _learner_logprobs(learner, PROMPTS, ids, spec)
    diffs = [abs(a - b) for row_v, row_l in zip(logps, mine, strict=True) for a, b in zip(row_v, row_l, strict=True)]
    assert len(diffs) >= 4 * 5 and max(diffs) < LOGPROB_TOL, max(diffs)
    if "top_k" in knobs:
        # the truncated distribution, not the full one: renormalised over the kept tokens, a
        # log-prob sits -log S above the full softmax's (S the kept mass); on this near-uniform
        # 405-token model S is about 5/405, so about log(81) = 4.4 above
        full = _learner_logprobs(learner, PROMPTS, ids, SamplingSpec(temperature=0.7, max_new_tokens=12))
        gap = [a - b for row_v, row_f in zip(logps, full, strict=True) for a, b in zip(row_v, row_f, strict=True)]
        assert min(gap) > 1.0


def test_merged_state_dict_folds_a_lora_adapter_in(model_dir):
    # W' = W + (alpha / r) B A: with B set to ones and A to 0.01, alpha 2, r 2 every entry of a
    # q_proj weight moves by (2/2) * sum_k 1 * 0.01 = r * 0.01 = 0.02
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_hf(model_dir), LoraConfig(r=2, lora_alpha=2, target_modules=["q_proj"]))
    for n, p in model.named_parameters():
        if "lora_A" in n:
            p.data.fill_(0.01)
        if "lora_B" in n:
            p.data.fill_(1.0)
    merged = merged_state_dict(model)
    base = _hf(model_dir).state_dict()
    assert set(merged) == set(base)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert torch.allclose(merged[q] - base[q], torch.full_like(base[q], 0.02), atol=1e-6)
    k = "model.layers.0.self_attn.k_proj.weight"
    assert torch.equal(merged[k], base[k]) and not math.isnan(float(merged[q].sum()))


# ---------------------------------------------------------------------- requests (continuous batching)
def _drain(engine, n: int) -> list:
    """Poll until ``n`` requests have come back, each poll's batch in order."""
    polls = []
    while sum(len(p) for p in polls) < n:
        polls.append(engine.poll(timeout=None))
    return polls


def test_requests_finish_on_their_own_and_follow_their_keys(engine, model_dir):
    engine.load_weights(_hf(model_dir).state_dict(), version=5)
    long = SamplingSpec(max_new_tokens=48)  # no end token: all 48 tokens
    short = SamplingSpec(max_new_tokens=2)
    a = engine.submit(PROMPTS[:2], long, seeds=[11, 12])
    b = engine.submit(PROMPTS[2:], short, seeds=[13, 14])
    assert engine.unfinished() == 4
    # a weight load under requests in flight is refused (their tokens would mix two versions)
    with pytest.raises(VLLMError, match="in flight"):
        engine.load_weights(_hf(model_dir).state_dict(), version=6)
    polls = _drain(engine, 4)
    # submitted after the long ones, the short ones come back first, while the long ones generate
    assert sorted(f.request_id for f in polls[0]) == b
    done = {f.request_id: f for p in polls for f in p}
    assert [len(done[i].completion_ids) for i in a + b] == [48, 48, 2, 2]
    assert all(f.version == 5 for f in done.values()) and engine.unfinished() == 0 and engine.poll() == []
    # a request's draws follow its key, not its batch: alone, the first long request gives the
    # same tokens (vLLM: one generator per request); the blocking call keys prompt i by
    # sampling_seed(seed, i), and a request with that key draws what it draws
    (alone,) = engine.submit(PROMPTS[:1], long, seeds=[11])
    (again,) = _drain(engine, 1)[0]
    assert again.request_id == alone and again.completion_ids == done[a[0]].completion_ids
    assert max(abs(x - y) for x, y in zip(again.logprobs, done[a[0]].logprobs, strict=True)) < 1e-5
    ids, _ = engine.generate(PROMPTS[:2], short, seed=9)
    engine.submit(PROMPTS[1:2], short, seeds=[sampling_seed(9, 1)])
    assert _drain(engine, 1)[0][0].completion_ids == ids[1]


def test_seeded_requests_beyond_one_steps_token_budget(engine, model_dir):
    """More prompt tokens at once than one engine step schedules (vLLM-CPU's budget: 4096): with
    chunked prefill a prompt would be split across steps and vLLM would rewind its seeded
    generator, which a CPU generator cannot do ("CPU Generator does not use offset"); the server
    runs without chunked prefill, so every prompt is prefilled whole."""
    engine.load_weights(_hf(model_dir).state_dict(), version=7)
    prompts = [[5 + (i + j) % 90 for j in range(200)] for i in range(24)]  # 4,800 prompt tokens
    ids = engine.submit(prompts, SamplingSpec(max_new_tokens=4), seeds=list(range(100, 124)))
    done = {f.request_id: f for p in _drain(engine, len(ids)) for f in p}
    assert sorted(done) == sorted(ids) and all(len(f.completion_ids) == 4 for f in done.values())


@pytest.mark.parametrize("workers", [0, 2], ids=["inline", "env-workers"])
def test_continuous_play_on_vllm_requests(engine, model_dir, workers):
    # episodes of 5, 1 and 2 turns in 4 slots (the counting env with a length per task): each
    # turn a request of its own; the short groups end first, the second one in the slots the
    # first freed, while the long episodes go on; every turn records vLLM's tokens, their
    # processed log-probs and the version the engine held; the env steps run here or in the env
    # pool's worker processes
    from transformers import AutoTokenizer

    import tests.trainer.count_env  # noqa: F401  (registers agentrl-test/Count-v0)
    from agentrl.rollout import RolloutSettings
    from agentrl.rollout.continuous import ContinuousPlay, EngineRequests, request_key
    from agentrl.rollout.env_pool import LocalEnvs, WorkerEnvs

    class Recorded(EngineRequests):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.sent = {}

        def submit(self, prompts, keys):
            ids = super().submit(prompts, keys)
            self.sent.update(zip(keys, prompts, strict=True))
            return ids

    engine.load_weights(_nudged(_hf(model_dir), seed=4).state_dict(), version=8)
    tok = AutoTokenizer.from_pretrained(model_dir)
    spec = SamplingSpec(temperature=0.9, max_new_tokens=6, end_token_ids=(tok.eos_token_id,))
    envs = (WorkerEnvs("agentrl-test/Count-v0", {}, 4, workers=workers, timeout_s=120) if workers
            else LocalEnvs("agentrl-test/Count-v0", {}, 4))
    requests = Recorded(engine, spec, seed=2)
    play = ContinuousPlay(None, tok, RolloutSettings("agentrl-test/Count-v0", max_turns=8, max_prompt_tokens=100_000),
                          envs, 4, requests=requests)
    lengths = {"long": 5, "short": 1, "short2": 2}
    try:
        play.submit([{"seed": 0, "options": {"length": n, "parity": True}, "group_id": g}
                     for g, n in lengths.items() for _ in range(2)])
        groups = play.take(3)
    finally:
        envs.close()
    assert [g[0].group_id for g in groups] == ["short", "short2", "long"]
    eps = {ep.traj_id: ep for g in groups for ep in g}
    for ep in eps.values():
        assert ep.length == lengths[ep.group_id] and ep.error is None
        for r in ep.steps:
            assert r.action_token_ids and len(r.behaviour_logps) == len(r.action_token_ids)
            assert all(math.isfinite(x) and x <= 0 for x in r.behaviour_logps)
            assert r.policy_version == 8
        assert ep.tokens.completion_ids == [r.action_token_ids for r in ep.steps]
    assert engine.unfinished() == 0 and not play.waiting and len(requests.sent) == 2 * (5 + 1 + 2)
    # keyed by (episode, turn): a turn of a long episode, submitted alone with its key, draws the
    # tokens it drew among the others
    key = (request_key("long/1"), 3)
    engine.submit([requests.sent[key]], spec, seeds=[sampling_seed(2, *key)])
    assert _drain(engine, 1)[0][0].completion_ids == eps["long/1"].steps[3].action_token_ids


def test_policy_generation_loads_a_new_version_between_requests(engine, model_dir):
    # the producer's generation (PolicyGeneration.submit/poll): requests submitted before the
    # learner's new version run on the old weights; those submitted after it are held until the
    # old ones have drained, then the engine loads the new version and they run on it; each
    # comes back with the version that drew all of its tokens
    from accelerate import Accelerator
    from transformers import GenerationConfig

    from agentrl.producer.generation import GenerationSetup, PolicyGeneration

    model, version = _hf(model_dir), [10]
    spec = SamplingSpec(max_new_tokens=24)
    setup = GenerationSetup(model=lambda: model, accelerator=Accelerator(cpu=True), pad_id=0, eos_ids=[],
                            generation_config=GenerationConfig(max_new_tokens=24), engine="vllm", vllm=engine, spec=spec)
    gen = PolicyGeneration(setup, version=lambda: version[0])
    assert gen.submits
    old = gen.submit(PROMPTS[:2], [(1, 0), (2, 0)])  # version 10 loaded first (the engine held another)
    assert engine.loaded_version() == 10
    _nudged(model, seed=5)
    version[0] = 11  # the learner's next version arrives while those generate
    new = gen.submit(PROMPTS[2:], [(3, 0), (4, 0)])
    assert engine.unfinished() == 2  # held: the old requests are in flight
    done = {}
    while len(done) < 4:
        done.update((f.request_id, f) for f in gen.poll(timeout=None))
    assert [done[i].version for i in old + new] == [10, 10, 11, 11]
    assert engine.loaded_version() == 11 and gen.requests == 4
    # the held ones ran on version 11's weights: their keys (run seed 0, rank 0, training) alone
    # on the engine, now at 11, draw the same tokens
    engine.submit(PROMPTS[2:3], spec, seeds=[sampling_seed(0, 0, 1, 3, 0)])
    assert _drain(engine, 1)[0][0].completion_ids == done[new[0]].completion_ids
