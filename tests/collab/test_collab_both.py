"""``role_schedule: both`` with separate policies (full weights, LoRA): every rollout trains both
roles, in role-ordered optimizer steps (``agentrl.algorithms.role_steps``).

The exact reference: two copies of the initial model, each with its own AdamW, replay the
micro-batches the trainer trained on, the Thinker's on one copy and the Solver's on the other
(without the trainer's old log-probs: at ratio 1 the loss is the on-policy one, so wrong old
log-probs would show). Each policy must end equal to its copy.

Runtime: ~15 s on 1 thread (4 tests, idle machine).
"""

from __future__ import annotations

import copy

import pytest
import torch
from test_collab_trainer import PolicySnapshots, _changed, build, make_cfg

BOTH = dict(role_schedule="both", steps_per_generation=2, per_device_train_batch_size=4, max_steps=4)
"""One rollout = 8 collaborations (2 groups of 4) = 2 optimizer steps: the Thinker's 8 rows, then
the Solver's 8 rows; 4 steps = 2 rollouts."""


def _lora(policies):
    return dict(collab_policies=policies, use_peft=policies == "lora", lora_r=4, lora_alpha=8, lora_dropout=0.0)


def _spy_micro_batches(tr):
    """Record every micro-batch the trainer computes a loss on, with the policy trained then;
    returns the list and the trainer's own compute_loss."""
    seen = []
    real = tr.compute_loss

    def compute_loss(model, inputs, *a, **kw):
        seen.append((tr.algorithm.policies.swaps.trained, {k: v.detach().clone() if torch.is_tensor(v) else v
                                           for k, v in inputs.items()}))
        return real(model, inputs, *a, **kw)

    tr.compute_loss = compute_loss
    return seen, real


def _replay(tr, loss_fn, refs, seen, lrs):
    from agentrl.trainer.logprobs import completion_logps

    """Each policy's optimizer steps on its own copy of the initial model, with its own AdamW."""
    a = tr.args
    assert a.weight_decay == 0 and a.gradient_accumulation_steps == 1
    opts = {name: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=a.learning_rate,
                                    betas=(a.adam_beta1, a.adam_beta2), eps=a.adam_epsilon, weight_decay=0.0)
            for name, m in refs.items()}
    for (policy, inputs), lr in zip(seen, lrs, strict=True):
        m, opt = refs[policy], opts[policy]
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.no_grad():  # the old log-probs are the generating policy's: this copy's now
            mine = completion_logps(m, inputs)[0]
        mask = inputs["completion_mask"].bool()
        assert torch.allclose(inputs["old_logps"][mask], mine[mask], rtol=0, atol=1e-5), policy
        loss_fn(m, inputs).backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), a.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("policies", ["full", "lora"])
def test_both_roles_train_every_rollout_each_on_its_own_rows(tmp_path, collab_model_dir, policies):
    tr = build(make_cfg(tmp_path, collab_model_dir, **BOTH, **_lora(policies)))
    refs = {name: copy.deepcopy(tr.model).train() for name in tr.algorithm.policies.names}
    seen, loss_fn = _spy_micro_batches(tr)
    cb = PolicySnapshots(tr)
    snaps = [cb.snap()]
    tr.add_callback(cb)
    tr.train()
    snaps += cb.steps
    # steps 1 and 3 train the Thinker, 2 and 4 the Solver: both policies move in every rollout
    order = ["thinker", "solver", "thinker", "solver"]
    assert [p for p, _ in seen] == order
    for k, trained in enumerate(order, start=1):
        other = "solver" if trained == "thinker" else "thinker"
        assert _changed(snaps[k - 1][trained], snaps[k][trained]) and not _changed(snaps[k - 1][other], snaps[k][other])
    logged = [h for h in tr.state.log_history if "loss" in h]
    assert [h["collab/trained_role"] for h in logged] == [0, 1, 0, 1]
    # every step's rows are its role's turns (8 a step, nothing else)
    tok = tr.processing_class
    for policy, inputs in seen:
        prompts = [tok.decode(ids[:start]) for ids, start in zip(inputs["input_ids"], inputs["completion_start"],
                                                                   strict=True)]
        assert len(prompts) == 8 and all(f"You are the {policy.capitalize()}" in p for p in prompts), policy
    # each policy equals its own copy trained on its own rows only
    _replay(tr, loss_fn, refs, seen, [h["learning_rate"] for h in logged])
    # 1e-5 under LoRA: lora_A's gradients are tiny while lora_B is near 0 and Adam scales them to
    # full-size steps, so the replay's float rounding shows (1.05e-6 in CI); each copy replayed on
    # the other role's rows is 5.6e-3 off (measured)
    tol = 1e-5 if policies == "lora" else 1e-6
    for name, m in refs.items():
        want = {n: p for n, p in m.named_parameters() if p.requires_grad}
        with tr.algorithm.policies.use_policy(name):
            for n, p in tr.algorithm.policies.swaps.params:
                assert torch.allclose(p, want[n], rtol=0, atol=tol), (name, n, (p - want[n]).abs().max())


@pytest.mark.parametrize("policies", ["full", "lora"])
def test_both_resume_between_rollouts_is_exact(tmp_path, collab_model_dir, policies):
    kw = dict(BOTH, **_lora(policies))
    ref = build(make_cfg(tmp_path, collab_model_dir, save_strategy="steps", save_steps=2, **kw))
    ref.train()
    ckpt = tmp_path / "out" / "checkpoint-2"  # after the first rollout's Solver step
    res = build(make_cfg(tmp_path, collab_model_dir, overwrite_output_dir=False, **kw))
    res.train(resume_from_checkpoint=str(ckpt))
    assert res.algorithm_state == ref.algorithm_state and res.algorithm_state.delta.updates == 2
    assert [h["collab/trained_role"] for h in res.state.log_history if "loss" in h][-2:] == [0, 1]
    for name in ("thinker", "solver"):
        with ref.algorithm.policies.use_policy(name), res.algorithm.policies.use_policy(name):
            for (n, p), (_, q) in zip(ref.algorithm.policies.swaps.params, res.algorithm.policies.swaps.params, strict=True):
                assert torch.allclose(p, q, rtol=0, atol=1e-6), (name, n)
