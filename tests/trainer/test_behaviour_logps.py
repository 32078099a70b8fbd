"""Behaviour log-probs: the sampler's own log-prob of every token it drew, carried from generation
to the loss, and the rollout correction acting only where the sampler can differ from the learner.

Checked: HF generate draws the same tokens when it also returns the processed scores (same seed),
and its log-probs are those of the distribution each token was drawn from (temperature, top-k,
checked against an independent full forward); with the sampler equal to the learner (CPU, fp32,
same weights) behaviour and learner log-probs agree to 1e-5 at every model token in window,
trajectory and branch contexts (roles: tests/collab/test_collab_behaviour.py), and every
correction mode's weights are 1 to that precision; the plain HF path keeps its update as it was
(no column, no extra forward); a bf16 sampler (``sampler_dtype``) makes the correction act.
vLLM's per-position lists and continuous batching's missing log-probs become NaN.

Runtime: ~60 s on 2 shared cores.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_trainer import make_cfg, make_trainer

from agentrl.losses import CorrectionSettings, correction_weights, rollout_correction_names
from agentrl.rollout.branching import branch_task
from agentrl.rollout.generation import cut_rows, left_pad, sample_with_logprobs
from agentrl.trainer.logprobs import completion_logps

AGREE = 1e-5
"""Behaviour vs learner log-probs at every model token, sampler = learner (fp32 CPU)."""


# ----------------------------------------------------------------------------- HF generate
def _prompts(tok):
    return [tok("count from 1 to 3 Say 1. <action>", add_special_tokens=False)["input_ids"],
            tok("Say 2. <action>", add_special_tokens=False)["input_ids"]]


def _generate(model, tok, logprobs: bool, seed: int = 3, **sampling):
    from transformers import GenerationConfig

    ids, att = left_pad(_prompts(tok), tok.pad_token_id, "cpu")
    sampling = {"top_k": 0, **sampling}  # GenerationConfig's own default is top-k 50
    cfg = GenerationConfig(max_new_tokens=8, do_sample=True, pad_token_id=tok.pad_token_id,
                           eos_token_id=tok.eos_token_id, **sampling)
    torch.manual_seed(seed)
    with torch.no_grad():
        if logprobs:
            return sample_with_logprobs(model, input_ids=ids, attention_mask=att, generation_config=cfg)
        return model.generate(input_ids=ids, attention_mask=att, generation_config=cfg)[:, ids.shape[1]:], None


def _full_forward_logps(model, tok, new: torch.Tensor, temperature: float) -> torch.Tensor:
    """(B, n, V) log-softmax of logits / T at each generated position, from one forward over
    prompt + completion (no KV cache, no logits processor)."""
    ids, att = left_pad(_prompts(tok), tok.pad_token_id, "cpu")
    seq = torch.cat([ids, new], 1)
    mask = torch.cat([att, torch.ones_like(new)], 1)
    with torch.no_grad():
        logits = model(input_ids=seq, attention_mask=mask).logits.float()
    return torch.log_softmax(logits[:, ids.shape[1] - 1:-1] / temperature, -1)


@pytest.mark.parametrize("sampling", [dict(temperature=0.7), dict(temperature=1.3, top_k=5, top_p=0.9,
                                                                     repetition_penalty=1.3)])
def test_hf_generate_draws_the_same_tokens_when_it_returns_their_logprobs(tiny, sampling):
    model, tok = tiny
    plain, _ = _generate(model, tok, False, **sampling)
    new, logps = _generate(model, tok, True, **sampling)
    assert torch.equal(plain, new)
    assert logps.shape == new.shape and bool(torch.isfinite(logps).all()) and bool((logps <= 0).all())


def test_hf_logprobs_are_those_of_the_processed_distribution(tiny):
    model, tok = tiny
    # temperature only: log p = log_softmax(logits / T)[token], the full forward's value
    new, logps = _generate(model, tok, True, temperature=0.7)
    ref = _full_forward_logps(model, tok, new, 0.7).gather(2, new.unsqueeze(2)).squeeze(2)
    assert (logps - ref).abs().max() < AGREE
    # top-k 3 renormalises over the 3 likeliest tokens: log p = log_softmax(x)[t] - logsumexp of
    # log_softmax(x) over the top 3, so every behaviour log-prob is above the full one
    new, logps = _generate(model, tok, True, temperature=0.7, top_k=3)
    full = _full_forward_logps(model, tok, new, 0.7)
    ref = full.gather(2, new.unsqueeze(2)).squeeze(2) - torch.logsumexp(full.topk(3, -1).values, -1)
    assert (logps - ref).abs().max() < AGREE
    assert bool((logps > full.gather(2, new.unsqueeze(2)).squeeze(2)).all())
    # top-k 1: every token is the only one it could have been, log p = 0 exactly
    _, logps = _generate(model, tok, True, top_k=1)
    assert bool((logps == 0).all())


def test_cut_rows_keeps_each_row_through_its_first_eos_with_its_logprobs():
    tokens = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8]])
    logps = torch.tensor([[-0.5, -1.0, -2.0, -3.0], [-0.1, -0.2, -0.3, -0.4]])
    ids, lps = cut_rows(tokens, logps, [2, None])
    assert ids == [[5, 2], [5, 6, 7, 8]] and lps == [[-0.5, -1.0], pytest.approx([-0.1, -0.2, -0.3, -0.4])]
    assert cut_rows(tokens, None, [7])[1] is None


def test_vllm_logprobs_take_the_sampled_tokens_and_none_is_nan():
    from agentrl.producer.generation import vllm_sampled_logprobs

    out = vllm_sampled_logprobs([[[-0.25], [None], [-1.5]], [[-3.0]]], [[4, 5, 6], [7]])
    assert out[0][0] == -0.25 and math.isnan(out[0][1]) and out[0][2] == -1.5 and out == [out[0], [-3.0]]
    assert all(math.isnan(x) for x in vllm_sampled_logprobs(None, [[1, 2]])[0])


def _policy_generation(model, tok, engine="hf", **setup):
    from accelerate import Accelerator
    from transformers import GenerationConfig

    from agentrl.producer.generation import GenerationSetup, PolicyGeneration

    cfg = GenerationConfig(max_new_tokens=6, do_sample=True, top_k=0, temperature=0.7, pad_token_id=tok.pad_token_id,
                           eos_token_id=tok.eos_token_id)
    cb = None
    if engine == "cb":
        from transformers import ContinuousBatchingConfig

        cb = ContinuousBatchingConfig()
    return PolicyGeneration(GenerationSetup(model=lambda: model, accelerator=Accelerator(cpu=True),
                                            pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id], generation_config=cfg,
                                            engine=engine, cb_config=cb, **setup), version=lambda: 0)


def test_policy_generation_returns_each_engines_logprobs(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    out = _policy_generation(model, tok)(prompts)
    from agentrl.producer.generation import sampling_seed

    # the trained policy's HF path draws what plain generate draws from its call's keyed seed:
    # (run seed 0, rank 0, step 0, training, play 0, call 0)
    torch.manual_seed(sampling_seed(0, 0, 0, 1, 0, 0))
    ids, att = left_pad(prompts, tok.pad_token_id, "cpu")
    plain = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=6, do_sample=True, top_k=0, temperature=0.7,
                           pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)[:, ids.shape[1]:]
    assert out.completion_ids == cut_rows(plain, None, [tok.eos_token_id])[0]
    assert [len(x) for x in out.logprobs] == [len(c) for c in out.completion_ids]
    assert all(math.isfinite(x) and x <= 0 for row in out.logprobs for x in row)
    # continuous batching returns no log-probs: NaN for every token it drew
    cb = _policy_generation(model, tok, "cb")(prompts)
    assert [len(x) for x in cb.logprobs] == [len(c) for c in cb.completion_ids] and all(
        math.isnan(x) for row in cb.logprobs for x in row)
    # which engines the learner corrects: those whose distribution can differ and that give log-probs
    assert not _policy_generation(model, tok).differs_from_learner
    assert _policy_generation(model, tok, sampler_dtype=torch.bfloat16).differs_from_learner
    assert not _policy_generation(model, tok, "cb", sampler_dtype=torch.bfloat16).differs_from_learner
    assert _policy_generation(model, tok, "vllm").differs_from_learner


# ----------------------------------------------------------------------------- the trainer, sampler = learner
def _task_rows(tr, n_tasks=2, g=4):
    return [tr.train_dataset[i // g] for i in range(n_tasks * g)]


def _batch(tr):
    tr.model.train()
    return tr.make_iteration_batch(_task_rows(tr))


def _learner_logps(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return completion_logps(model, batch)[0]


def _assert_agree(behaviour: torch.Tensor, learner: torch.Tensor, mask: torch.Tensor) -> float:
    """Behaviour = learner at every loss token, NaN everywhere else; returns the largest gap."""
    m = mask.bool()
    assert int(m.sum()) > 0
    assert not bool(torch.isnan(behaviour[m]).any())
    assert bool(torch.isnan(behaviour[~m]).all())  # env tokens, fillers, padding
    gap = float((behaviour[m] - learner[m]).abs().max())
    assert gap < AGREE, gap
    return gap


def _weights_are_one(learner, behaviour, mask) -> None:
    """Every registered correction mode's weights at TRL's default bounds (C_max 3) and a tight
    two-sided one: 1 to 1e-5 at each loss token (measured: 9.5e-7 at most, window and trajectory),
    none truncated or masked."""
    for mode in rollout_correction_names():
        for lo, hi in ((None, 3.0), (0.999, 1.001)):
            c = correction_weights(learner, behaviour, mask, CorrectionSettings(mode=mode, clip_min=lo, clip_max=hi))
            w = c.weights[mask.bool()]
            assert float((w - 1).abs().max()) < AGREE, (mode, lo, hi)
            for k in ("correction/truncated_frac", "correction/masked_frac"):
                assert float(c.means[k][0]) == 0.0, (mode, k)


@pytest.mark.parametrize("context", ["window", "trajectory"])
def test_sampler_equal_to_learner_gives_its_logprobs(tmp_path, tiny_model_dir, context):
    cfg = make_cfg(tmp_path, tiny_model_dir, context_mode=context, temperature=0.7, max_completion_length=5)
    tr = make_trainer(cfg)
    batch = _batch(tr)
    assert not tr.correcting  # HF generate in the learner's dtype: the sampler is the learner
    learner = _learner_logps(tr.model, batch)
    _assert_agree(batch["behaviour_logps"], learner, batch["loss_mask"])
    _weights_are_one(learner, batch["behaviour_logps"], batch["loss_mask"])
    # the records and the context's tokens carry the same values as the rows
    eps = tr.last_rollout["episodes"]
    rec = eps[0].steps[0]
    assert len(rec.behaviour_logps) == len(rec.action_token_ids)
    first = eps[0].tokens.behaviour_logps[0] if context == "window" else eps[0].tokens.behaviour_logps
    assert first[:len(rec.behaviour_logps)] == rec.behaviour_logps
    if context == "trajectory":  # NaN exactly at the env tokens
        st = eps[0].tokens
        assert [math.isnan(x) for x in st.behaviour_logps] == [m == 0 for m in st.env_mask]
    # no correction: the micro-batches carry no behaviour log-probs and no old log-probs
    mbs = tr.micro_batches(batch, "train")
    assert all("behaviour_logps" not in mb and "old_logps" not in mb for mb in mbs)


def test_branch_tokens_carry_their_parent_and_their_own_logprobs(tmp_path, tiny_model_dir):
    cfg = make_cfg(tmp_path, tiny_model_dir, context_mode="trajectory", temperature=0.7, max_completion_length=5)
    tr = make_trainer(cfg)
    tr.model.train()
    player = tr.source.player
    tasks = [{"seed": 0, "options": {"length": 3, "parity": True}, "group_id": "g", "traj_id": f"p{k}"} for k in range(2)]
    parents = player.play(tasks)
    parent = max(parents, key=lambda ep: len(ep.steps))
    s, e = parent.tokens.step_spans[1]  # a branch inside step 1: the replay, the resumed prefix, new turns
    (branch,) = player.play([branch_task(parent, s + (e - s) // 2, 0)], context_mode="branch")
    st = branch.tokens
    assert branch.steps and st.behaviour_logps[:s + (e - s) // 2 + 1] == parent.tokens.behaviour_logps[:s + (e - s) // 2 + 1]
    learner, _, _ = tr.completion_logps([st.prompt_ids], [st.completion_ids])
    mask = torch.tensor([st.env_mask])
    _assert_agree(torch.tensor([st.behaviour_logps]), torch.from_numpy(learner), mask)


# ----------------------------------------------------------------------------- a sampler that differs
def test_bf16_sampler_makes_the_correction_act_and_the_run_trains(tmp_path, tiny_model_dir):
    cfg = make_cfg(tmp_path, tiny_model_dir, sampler_dtype="bfloat16", temperature=0.7, max_steps=2)
    tr = make_trainer(cfg)
    assert tr.source.player.generation.differs_from_learner
    batch = _batch(tr)
    assert tr.correcting
    mbs = tr.micro_batches(batch, "train")
    assert all("behaviour_logps" in mb and "old_logps" in mb for mb in mbs)
    mb = mbs[0]
    m = mb["loss_mask"].bool()
    d = (mb["old_logps"] - mb["behaviour_logps"])[m]
    # bf16 rounds the logits to 8 mantissa bits: the sampler's log-probs differ from the learner's
    # by far more than the 1e-5 of an fp32 sampler, and the weights leave 1
    assert float(d.abs().max()) > 1e-3
    c = correction_weights(mb["old_logps"], mb["behaviour_logps"], mb["loss_mask"], CorrectionSettings(mode="token_truncate"))
    assert float((c.weights[m] - 1).abs().max()) > 1e-3
    tr.train()
    losses = [h["loss"] for h in tr.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    logged = {k for h in tr.state.log_history for k in h}
    assert {"correction/mismatch_k3", "correction/ess", "correction/masked_frac"} <= logged, sorted(logged)
    k3 = [h["correction/mismatch_k3"] for h in tr.state.log_history if "correction/mismatch_k3" in h]
    assert all(x > 0 for x in k3) and np.isfinite(k3).all()


def test_sampler_dtype_is_refused_outside_hf_generate(tmp_path, tiny_model_dir):
    from agentrl.recipe_file import RecipeError

    with pytest.raises(RecipeError, match="sampler_dtype applies to transformers' generate"):
        make_cfg(tmp_path, tiny_model_dir, sampler_dtype="bfloat16", use_transformers_continuous_batching=True)
    with pytest.raises(RecipeError, match="sampler_dtype"):
        make_cfg(tmp_path, tiny_model_dir, sampler_dtype="float64")
