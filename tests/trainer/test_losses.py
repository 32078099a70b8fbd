"""The registered policy losses (agentrl/losses) against hand-worked values, the registry, the
non-finite report, and the default path against TRL 1.16's own ``_compute_loss`` on one batch.

Runtime: ~15 s (the TRL comparison builds a tiny trainer).
"""

from __future__ import annotations

import math

import pytest
import torch
import yaml

from agentrl import losses
from agentrl.losses import LossBatch, LossSettings

LN15, LN05 = math.log(1.5), math.log(0.5)


def _batch(**kw) -> LossBatch:
    # 2 rows x 2 tokens; log-ratios ln 1.5, ln 0.5 / ln 1.5, 0; advantages +1 -1 / -1 +1; the last
    # token of row 1 carries no loss
    logps = torch.tensor([[-1.0, -2.0], [-1.5, -0.5]], requires_grad=True)
    old = logps.detach() - torch.tensor([[LN15, LN05], [LN15, 0.0]])
    d = dict(logps=logps, old_logps=old, advantages=torch.tensor([[1.0, -1.0], [-1.0, 1.0]]),
             mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    d.update(kw)
    return LossBatch(**d)


# Per token with eps 0.2 (ratio r, clipped c = clip(r, 0.8, 1.2), loss -min(r A, c A)):
#   (0,0) r 1.5, A +1: -min(1.5, 1.2) = -1.2     (0,1) r 0.5, A -1: -min(-0.5, -0.8) = 0.8
#   (1,0) r 1.5, A -1: -min(-1.5, -1.2) = 1.5     (1,1) masked
# masked sum 1.1 over 3 loss tokens; row means (-1.2 + 0.8) / 2 = -0.2 and 1.5
@pytest.mark.parametrize("name, settings, want", [
    ("dapo", dict(tokens=3.0), 1.1 / 3),
    # the optimizer step's loss tokens (6 over its micro-batches), not this micro-batch's 3
    ("dapo", dict(tokens=6.0), 1.1 / 6),
    # clip-higher (eps_low 0.2, eps_high 0.6): (0,0) r 1.5 is inside [0.8, 1.6]: -1.5; sum -1.5 + 0.8 + 1.5
    ("dapo", dict(tokens=3.0, epsilon_low=0.2, epsilon_high=0.6), 0.8 / 3),
    ("bnpo", dict(accumulation=2.0), 1.1 / 3 / 2),
    ("grpo", dict(accumulation=1.0), (-0.2 + 1.5) / 2),
    ("dr_grpo", dict(max_completion_length=4, accumulation=1.0), 1.1 / (2 * 4)),
    # dual clip delta 1.3: (1,0) becomes -min(-1.3, -1.2) = 1.3; sum 0.9
    ("dapo", dict(tokens=3.0, delta=1.3), 0.9 / 3),
    # GSPO: row 0's ratio exp((ln 1.5 + ln 0.5) / 2) = sqrt(0.75) = 0.866 (inside the clip): -0.866 + 0.866 = 0;
    # row 1 (one loss token): r 1.5, A -1 -> 1.5; sum 1.5
    ("dapo", dict(tokens=3.0, ratio_level="sequence"), 1.5 / 3),
])
def test_each_reduction_by_hand(name, settings, want):
    out, bad = losses.compute(name, _batch(), LossSettings(**settings))
    assert bad == []
    assert out.loss.item() == pytest.approx(want, abs=1e-6)


def test_kl_term_and_its_bias_correction_by_hand():
    # ref - logp = ln 2 everywhere: k3 = 2 - ln 2 - 1 = 0.306853 per token, 3 loss tokens
    b = _batch()
    b.ref_logps = b.logps.detach() + math.log(2.0)
    k3 = 1 - math.log(2.0)
    out, _ = losses.compute("dapo", b, LossSettings(tokens=3.0, beta=0.1))
    assert out.loss.item() == pytest.approx((1.1 + 0.1 * 3 * k3) / 3, abs=1e-6)
    s, c = out.means["kl"]
    assert (s / c).item() == pytest.approx(k3, abs=1e-6)
    # times the ratio: 1.5 k3 + 0.5 k3 + 1.5 k3 = 3.5 k3
    out, _ = losses.compute("dapo", b, LossSettings(tokens=3.0, beta=0.1, kl_bias_correction=True))
    assert out.loss.item() == pytest.approx((1.1 + 0.1 * 3.5 * k3) / 3, abs=1e-6)


def test_gradient_flows_only_through_unclipped_tokens():
    # (0,0) and (0,1) sit on the clipped side (constant in logp); (1,0) is -r A: d/dlogp = -A r = 1.5,
    # over 3 tokens = 0.5; (1,1) is masked
    b = _batch()
    out, _ = losses.compute("dapo", b, LossSettings(tokens=3.0))
    out.loss.backward()
    assert b.logps.grad.tolist() == [[0.0, 0.0], [pytest.approx(0.5), 0.0]]


def test_clip_metrics_by_hand():
    out, _ = losses.compute("dapo", _batch(), LossSettings(tokens=3.0))
    mean = {k: (s / c).item() for k, (s, c) in out.means.items()}
    # low: r < 0.8 with A < 0 -> (0,1); high: r > 1.2 with A > 0 -> (0,0); of 3 loss tokens
    assert mean["clip_ratio/low_mean"] == pytest.approx(1 / 3)
    assert mean["clip_ratio/high_mean"] == pytest.approx(1 / 3)
    assert mean["clip_ratio/region_mean"] == pytest.approx(2 / 3)
    # per row: low 0.5 / 0, high 0.5 / 0
    kind, v = out.extremes["clip_ratio/low_min"]
    assert kind == "min" and v.tolist() == [0.5, 0.0]
    assert out.extremes["clip_ratio/high_max"][1].tolist() == [0.5, 0.0]


def test_losses_run_in_fp32():
    b = _batch()
    b.logps = b.logps.detach().to(torch.bfloat16).requires_grad_()
    out, _ = losses.compute("dapo", b, LossSettings(tokens=3.0))
    assert out.loss.dtype == torch.float32


def test_a_non_finite_input_is_named():
    b = _batch()
    b.ref_logps = b.logps.detach().clone()
    b.ref_logps[1, 0] = float("inf")  # a loss token: its KL term is inf - inf = NaN
    out, bad = losses.compute("dapo", b, LossSettings(tokens=3.0, beta=0.1))
    assert not math.isfinite(out.loss.item())
    assert bad == ["ref_logps", "kl term"]
    b = _batch()
    b.ref_logps = b.logps.detach().clone()
    b.ref_logps[1, 1] = float("inf")  # not a loss token: it reaches neither the loss nor its gradient
    out, bad = losses.compute("dapo", b, LossSettings(tokens=3.0, beta=0.1))
    assert bad == [] and math.isfinite(out.loss.item())
    out.loss.backward()
    assert bool(torch.isfinite(b.logps.grad).all())


def test_registry_refuses_a_taken_name_and_names_the_registered():
    assert {"bnpo", "dapo", "dr_grpo", "grpo"} <= set(losses.policy_loss_names())
    with pytest.raises(ValueError, match="policy loss 'dapo' is already registered"):
        losses.register_policy_loss("dapo")(lambda b, s: None)
    with pytest.raises(KeyError, match="unknown policy loss 'cispo'; registered: .*dapo"):
        losses.get_policy_loss("cispo")


# ------------------------------------------------------------------ against TRL's own loss
def _trainer(tiny_model_dir, tmp_path, **kw):
    from agentrl.config import load_recipe
    from agentrl.trainer import AgentGRPOTrainer

    d = dict(model_name_or_path=tiny_model_dir, env_id="agentrl-test/Count-v0", task_split="", num_tasks=4,
             num_generations=2, per_device_train_batch_size=2, max_steps=1, bf16=False, gradient_checkpointing=False,
             report_to="none", output_dir=str(tmp_path / "o"), use_cpu=True, gradient_accumulation_steps=2,
             steps_per_generation=2)
    d.update(kw)
    rec = tmp_path / "r.yaml"
    rec.write_text(yaml.safe_dump(d))
    return AgentGRPOTrainer(model=tiny_model_dir, args=load_recipe(str(rec), []))


def _rows():
    from agentrl.rollout.contexts import Row

    return [Row(prompt=[5, 6, 7], completion=[8, 9, 10], loss_mask=[1, 0, 1], adv=[0.5, 100.0, 0.5]),
            Row(prompt=[7], completion=[11, 12], loss_mask=[1, 1], adv=[-2.0, -1.0])]


def _trl_layout(rows, pad):
    from trl.trainer.utils import pad as trl_pad

    p = [torch.tensor(r.prompt) for r in rows]
    c = [torch.tensor(r.completion) for r in rows]
    return {"prompt_ids": trl_pad(p, padding_value=pad, padding_side="left"),
            "prompt_mask": trl_pad([torch.ones_like(t) for t in p], padding_value=0, padding_side="left"),
            "completion_ids": trl_pad(c, padding_value=pad, padding_side="right"),
            "completion_mask": trl_pad([torch.ones_like(t) for t in c], padding_value=0, padding_side="right"),
            "tool_mask": trl_pad([torch.tensor(r.loss_mask) for r in rows], padding_value=0, padding_side="right"),
            "advantages": trl_pad([torch.tensor(r.adv) for r in rows], padding_value=0.0, padding_side="right")}


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "grpo", "dr_grpo"])
def test_the_default_path_is_trls_loss(tiny_model_dir, tmp_path, loss_type):
    # one micro-batch off-policy (old log-probs 0.05 below the current ones on row 0, 0.3 above on
    # row 1, so both clip sides are hit) with the KL term on: our loss on the packed rows equals
    # TRL 1.16's _compute_loss on its left-padded layout, and so does the gradient
    from trl import GRPOTrainer

    from agentrl.rollout.rows import pack_rows
    from agentrl.trainer.logprobs import completion_logps

    tr = _trainer(tiny_model_dir, tmp_path, loss_type=loss_type, beta=0.04, epsilon=0.2)
    tr.model.train()
    tr.current_gradient_accumulation_steps = 2
    pad = tr.processing_class.pad_token_id
    ours = pack_rows(_rows(), pad)
    ours["num_items_in_batch"] = torch.tensor(4.0)
    with torch.no_grad():
        now = completion_logps(tr.model, ours)[0]
    shift = torch.tensor([[0.05, 0.05, 0.05], [-0.3, -0.3, 0.0]])
    ours["old_logps"] = now - shift
    ours["ref_logps"] = now + 0.1
    theirs = _trl_layout(_rows(), pad)
    theirs.update(num_items_in_batch=torch.tensor(4.0), old_per_token_logps=ours["old_logps"],
                  ref_per_token_logps=ours["ref_logps"])
    loss = tr._compute_loss(tr.model, ours)
    loss.backward()
    g_ours = {n: p.grad.clone() for n, p in tr.model.named_parameters() if p.grad is not None}
    tr.model.zero_grad()
    want = GRPOTrainer._compute_loss(tr, tr.model, theirs)
    want.backward()
    assert loss.item() == pytest.approx(want.item(), abs=1e-6)
    for n, p in tr.model.named_parameters():
        if p.grad is not None:
            assert torch.allclose(g_ours[n], p.grad, atol=1e-6), n
