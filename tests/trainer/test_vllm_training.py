"""Training on agentrl's vLLM engine (``use_vllm: true`` where vLLM is its CPU build in .venv-vllm):
synchronous steps with the engine beside the learner, and the asynchronous producer owning one.

The counting env and a tiny Qwen2 model whose head size is 64 (vLLM's CPU attention has no kernel
for the default tiny model's 16). Each run starts one engine server (about 35 s on 2 cores: vLLM's
import and the model load).

Weight sync is checked through the rollout correction's own metric: ``correction/mismatch_k3`` is
the mean over sampled tokens of the k3 estimate of KL(behaviour || learner), (r - 1) - log r with
r = exp(learner - behaviour). When the engine holds the learner's weights of the step, both sides
score the same distribution in fp32 and differ by ~2e-6 per token (tests/sampling/
test_vllm_engine.py), so k3 ~ (2e-6)^2 / 2 = 2e-12; an engine one update (learning rate 1e-2)
behind gives k3 in the 1e-3 range. The bound 1e-6 tells them apart.
"""

from __future__ import annotations

import pytest
import torch

from agentrl.sampling.vllm_engine import vllm_python, vllm_venv

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(vllm_python() is None, reason=f"no vLLM venv at {vllm_venv()} (make vllm-venv)")]

SYNCED_K3 = 1e-6


@pytest.fixture(scope="module")
def model64(tmp_path_factory):
    from conftest import COUNT_CORPUS

    from agentrl.models import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny64") / "model", texts=COUNT_CORPUS, vocab_size=400,
                                hidden_size=128, num_layers=2, num_heads=2, num_kv_heads=1))


def _train(tmp_path, model_dir, **kw):
    from test_trainer import make_cfg, make_trainer

    cfg = make_cfg(tmp_path, model_dir, use_vllm=True, save_rollouts=True, **kw)
    tr = make_trainer(cfg)
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    try:
        tr.train()
    finally:
        if tr.vllm_engine is not None:
            tr.vllm_engine.close()
    moved = any(not torch.equal(before[n], p) for n, p in tr.model.named_parameters())
    return tr, moved


def _logged(tr, key: str) -> list[tuple[int, float]]:
    return [(h["step"], h[key]) for h in tr.state.log_history if key in h]


def test_synchronous_lora_steps_on_the_engine(tmp_path, model64):
    # 2 steps of a LoRA policy: step 1 generates on version 0 (the folder's weights, loaded as
    # version 0), step 2 on version 1 (the adapter after the first update, merged into the base:
    # vLLM holds no adapter); the learner corrects with vLLM's log-probs each step
    # (lora_dropout 0: with dropout the learner's own forward is noisy once B is not 0)
    tr, moved = _train(tmp_path, model64, max_steps=2, use_peft=True, lora_r=4, lora_alpha=8, lora_dropout=0.0)
    assert moved and hasattr(tr.model, "peft_config")
    assert tr.vllm_engine.version == 1  # the engine loaded the learner's weights after step 1
    assert tr.source.player.generation.setup.engine == "vllm"
    rows = tr.last_rollout["rows"]
    generated = rows["completion_mask"].bool()
    logps = rows["behaviour_logps"][generated]
    assert len(logps) >= 8 and bool(torch.isfinite(logps).all()) and float(logps.max()) <= 0  # vLLM's, every token
    # the correction acts on both steps, under TRL's default treatment (sequence mask, C = 3)
    assert tr.args.vllm_importance_sampling_mode == "sequence_mask" and tr.args.vllm_importance_sampling_clip_max == 3
    k3 = _logged(tr, "correction/mismatch_k3")
    assert [s for s, _ in k3] == [1, 2]
    assert all(0 <= v < SYNCED_K3 for _, v in k3), k3  # the engine held each step's merged weights
    assert all(v == 0.0 for _, v in _logged(tr, "correction/masked_frac"))
    assert all(abs(v - 1.0) < 1e-3 for _, v in _logged(tr, "correction/weight_mean"))


def test_async_producer_owns_an_engine_and_loads_each_version(tmp_path, model64):
    # max_staleness 0: iteration b plays on version b, so every step's episodes come from the
    # producer's engine after it loaded the version the learner just published; a version not
    # loaded would leave step 2 and 3 one update behind (k3 ~1e-3, not < 1e-6)
    tr, moved = _train(tmp_path, model64, max_steps=3, rollout_mode="async", max_staleness=0)
    assert moved
    stale = [v for _, v in _logged(tr, "async/staleness_max")]
    assert stale == [0.0, 0.0, 0.0]
    k3 = _logged(tr, "correction/mismatch_k3")
    assert [s for s, _ in k3] == [1, 2, 3]  # vLLM is not the learner: corrected at staleness 0 too
    assert all(0 <= v < SYNCED_K3 for _, v in k3), k3
    assert tr.vllm_engine is None or tr.vllm_engine.proc is None  # the learner's own engine never started



def test_continuous_producer_submits_each_turn_to_the_engine(tmp_path, model64):
    # producer_mode continuous on the engine: each turn a request of its own (continuous batching,
    # PolicyGeneration.submit), counted in async/turn_requests; every iteration's episodes arrive
    # once each, each turn recorded with vLLM's log-probs and a version within max_staleness
    import json
    from pathlib import Path

    tr, moved = _train(tmp_path, model64, max_steps=3, rollout_mode="async", max_staleness=1,
                       producer_mode="continuous", producer_overprovision=1)
    assert moved
    files = sorted((Path(tr.args.output_dir) / "rollouts").glob("iter_*.jsonl"))
    assert [p.name for p in files] == [f"iter_{b:05d}.jsonl" for b in range(3)]
    records = 0
    for b, p in enumerate(files):
        by_traj: dict[str, list[int]] = {}
        for r in (json.loads(x) for x in p.read_text().splitlines()):
            by_traj.setdefault(r["traj_id"], []).append(r["t"])
            assert max(0, b - 1) <= r["policy_version"] <= b, (b, r["policy_version"])
            lps = r["behaviour_logps"]
            assert len(lps) == len(r["action_token_ids"]) > 0 and all(x <= 0 for x in lps)  # vLLM's, finite
            records += 1
        assert sorted(by_traj) == sorted(f"s{b}:r0:{j}" for j in range(len(by_traj)))
        assert all(ts == list(range(len(ts))) for ts in by_traj.values())
    # every recorded turn was one request (and the iteration carried past the last step sent more)
    sent = [v for _, v in _logged(tr, "async/turn_requests")]
    assert len(sent) == 3 and sum(sent) >= records
    assert all(v <= 1.0 for _, v in _logged(tr, "async/staleness_max"))
    assert [s for s, _ in _logged(tr, "correction/mismatch_k3")] == [1, 2, 3]
