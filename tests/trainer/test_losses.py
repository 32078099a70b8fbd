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
from agentrl.losses import CorrectionSettings, LossBatch, LossSettings

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
    # the built-in ones (other test modules register plug-ins of their own into the same tables)
    assert {"bnpo", "cispo", "dapo", "dr_grpo", "grpo", "luspo", "sapo", "vespo"} <= set(losses.policy_loss_names())
    assert {"cispo", "clip", "sapo", "vespo"} <= set(losses.surrogate_names())
    assert {"seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_mean",
            "token_mean_micro"} <= set(losses.reduction_names())
    with pytest.raises(ValueError, match="policy loss 'dapo' is already registered"):
        losses.register_policy_loss("dapo")(lambda b, s: None)
    with pytest.raises(ValueError, match="surrogate 'clip' is already registered .by agentrl.losses.policy.clipped_surrogate."):
        losses.register_surrogate("clip")(lambda b, s, r: None)
    with pytest.raises(ValueError, match="reduction 'token_mean' is already registered"):
        losses.register_reduction("token_mean")(lambda x, m, s: None)
    with pytest.raises(KeyError, match="unknown policy loss 'ppo'; registered: bnpo, cispo"):
        losses.get_policy_loss("ppo")
    with pytest.raises(KeyError, match="unknown reduction 'token_sum' .did you mean 'token_mean'..; registered: seq_mean_token_mean"):
        losses.get_policy_loss("clip+token_sum")


def test_a_loss_type_is_a_surrogate_and_a_reduction():
    # TRL's names are compositions; any "surrogate+reduction" is one too, and computes the same
    assert [(losses.policy_loss(n).surrogate, losses.policy_loss(n).reduction) for n in ("dapo", "luspo", "sapo")] == [
        ("clip", "token_mean"), ("clip", "seq_mean_token_sum"), ("sapo", "seq_mean_token_mean")]
    assert losses.compose("cispo", "token_mean_micro") == "cispo+token_mean_micro"
    a, _ = losses.compute("dr_grpo", _batch(), LossSettings(max_completion_length=4))
    b, _ = losses.compute("clip+seq_mean_token_sum_norm", _batch(), LossSettings(max_completion_length=4))
    assert a.loss.item() == b.loss.item() == pytest.approx(1.1 / 8, abs=1e-6)


def test_split_invariance_is_what_the_reduction_registered_with():
    import agentrl.algorithms.appo  # noqa: F401  (registers the appo surrogate)

    variant = {n: losses.is_split_invariant(n) for n in ("bnpo", "cispo", "dapo", "dr_grpo", "grpo", "luspo", "sapo",
                                                         "vespo")}
    assert variant == {"bnpo": False, "cispo": True, "dapo": True, "dr_grpo": True, "grpo": True, "luspo": True,
                       "sapo": True, "vespo": True}
    assert not losses.is_split_invariant("appo+token_mean_micro") and losses.is_split_invariant("appo+token_mean")
    # a loss registered whole says it itself
    losses.register_policy_loss("test_micro_mean_whole", split_invariant=False)(lambda b, s: None)
    assert not losses.is_split_invariant("test_micro_mean_whole")


def test_loss_params_come_from_trls_keys_and_loss_kwargs():
    from types import SimpleNamespace

    # sapo's temperatures are TRL keys: read from the recipe's top level, defaults filled in
    rec = SimpleNamespace(loss_kwargs={}, sapo_temperature_pos=1.3, sapo_temperature_neg=1.05)
    assert losses.loss_options("sapo", rec) == {"sapo_temperature_pos": 1.3, "sapo_temperature_neg": 1.05}
    assert losses.loss_options("dapo", rec) == {}
    # a param no recipe key holds comes from loss_kwargs (the recipe object lacks vespo's keys here)
    assert losses.loss_options("vespo", SimpleNamespace(loss_kwargs={"vespo_k_pos": 1}))["vespo_k_pos"] == 1.0
    with pytest.raises(ValueError, match="loss_kwargs: sapo_temperature_pos is a recipe key of its own"):
        losses.loss_options("sapo", SimpleNamespace(loss_kwargs={"sapo_temperature_pos": 2.0},
                                                    sapo_temperature_pos=1.0))
    with pytest.raises(ValueError, match="loss_type 'dapo' has no kwarg 'tau' .its kwargs: none"):
        losses.loss_options("dapo", SimpleNamespace(loss_kwargs={"tau": 2.0}))
    with pytest.raises(ValueError, match=r"loss_type 'sapo': kwarg sapo_temperature_neg=0.0 must be >= 1e-06"):
        losses.loss_options("sapo", SimpleNamespace(loss_kwargs={}, sapo_temperature_pos=1.0,
                                                    sapo_temperature_neg=0.0))


# ------------------------------------------------------------------ the new loss types by hand
def test_cispo_by_hand():
    # ratios 1.5, 0.5 / 1.5 capped at epsilon_high 1.2 (the cap itself): 1.2, 0.5 / 1.2; per token
    # -w A logp: (0,0) -1.2 * 1 * -1 = 1.2; (0,1) -0.5 * -1 * -2 = -1.0; (1,0) -1.2 * -1 * -1.5 = -1.8
    # sum -1.6 over 3 tokens; the gradient -w A / 3 reaches every token, the capped ones too
    b = _batch()
    out, _ = losses.compute("cispo", b, LossSettings(tokens=3.0, epsilon_high=1.2))
    assert out.loss.item() == pytest.approx(-1.6 / 3, abs=1e-6)
    out.loss.backward()
    assert b.logps.grad.tolist() == [[pytest.approx(-0.4), pytest.approx(0.5 / 3)], [pytest.approx(0.4), 0.0]]
    s, c = out.means["cispo_clip_ratio"]
    assert (s / c).item() == pytest.approx(1 / 3)  # (0,0): r 1.5 > 1.2 with A > 0


def test_sapo_by_hand():
    # -sigmoid(tau (r - 1)) 4 / tau A, tau 1 where A > 0, 1.05 elsewhere:
    #   (0,0) r 1.5, A 1:  -sigmoid(0.5) 4 = -2.489837
    #   (0,1) r 0.5, A -1: +sigmoid(-0.525) 4 / 1.05 = 1.415938
    #   (1,0) r 1.5, A -1: +sigmoid(0.525) 4 / 1.05 = 2.393585
    # row means (-2.489837 + 1.415938) / 2 = -0.536950 and 2.393585; mean 0.928318
    out, _ = losses.compute("sapo", _batch(), LossSettings())
    assert out.loss.item() == pytest.approx(0.928318, abs=1e-6)
    # a temperature from the options: tau_pos 2 changes (0,0) to -sigmoid(1) 2 = -1.462117;
    # row 0 (-1.462117 + 1.415938) / 2 = -0.023089; mean (-0.023089 + 2.393585) / 2 = 1.185248
    out, _ = losses.compute("sapo", _batch(), LossSettings(options={"sapo_temperature_pos": 2.0}))
    assert out.loss.item() == pytest.approx(1.185248, abs=1e-6)


def test_luspo_by_hand():
    # the clipped surrogate per token -1.2, 0.8 / 1.5; row sums -0.4 and 1.5, mean over rows 0.55,
    # / accumulation 2
    out, _ = losses.compute("luspo", _batch(), LossSettings(accumulation=2.0))
    assert out.loss.item() == pytest.approx(0.55 / 2, abs=1e-6)


def test_vespo_by_hand():
    # row ratios w: row 0 1.5 x 0.5 = 0.75, row 1 1.5; phi(w) = exp(lam + k ln w - lam w):
    #   (0,0) A >= 0, k 2, lam 3: e^3 0.75^2 e^-2.25 = 1.190813
    #   (0,1) A < 0, k 3, lam 2: e^2 0.75^3 e^-1.5 = 0.695554
    #   (1,0) A < 0: e^2 1.5^3 e^-3 = 1.241593
    # per token -phi A logp: 1.190813, -0.695554 * 2 = -1.391109, -1.241593 * 1.5 = -1.862390;
    # sum -2.062686 over 3 tokens; phi carries no gradient: d/dlogp = -phi A / 3
    b = _batch()
    out, _ = losses.compute("vespo", b, LossSettings(tokens=3.0))
    assert out.loss.item() == pytest.approx(-2.062686 / 3, abs=1e-6)
    out.loss.backward()
    assert b.logps.grad[0, 0].item() == pytest.approx(-1.190813 / 3, abs=1e-6)
    s, c = out.means["vespo/phi_seq_mean"]
    assert (s / c).item() == pytest.approx((1.190813 + 0.695554 + 1.241593) / 3, abs=1e-6)
    # VESPO's w is the product of the token ratios whatever the ratio level (GSPO's would be
    # 0.75^(1/2) on row 0)
    out, _ = losses.compute("vespo", _batch(), LossSettings(tokens=3.0, ratio_level="sequence"))
    assert out.loss.item() == pytest.approx(-2.062686 / 3, abs=1e-6)
    # A = 0 takes the positive pair (k 2, lam 3): (0,0)'s phi stays 1.190813
    out, _ = losses.compute("vespo", _batch(advantages=torch.tensor([[0.0, -1.0], [-1.0, 1.0]])), LossSettings())
    s, c = out.means["vespo/phi_seq_mean"]
    assert (s / c).item() == pytest.approx((1.190813 + 0.695554 + 1.241593) / 3, abs=1e-6)


# ------------------------------------------------------------------ the rollout correction in the loss
def _behaviour(b: LossBatch, ln_ratios) -> torch.Tensor:
    # behaviour log-probs whose learner / behaviour ratios (learner = the old log-probs) are given
    return b.old_logps - torch.tensor(ln_ratios)


def test_the_correction_multiplies_the_policy_term_not_the_kl():
    # learner / behaviour per token: 2, 1 / 0.5 (the masked token: anything). sequence_mask with
    # C_max 1.5: row 0's ratio 2 x 1 = 2 > 1.5 -> weight 0, row 1's 0.5 stays. The clipped
    # surrogate -1.2, 0.8 / 1.5 becomes 0, 0 / 0.75; the KL term (ref - logp = ln 2 everywhere,
    # k3 = 1 - ln 2 per token, beta 0.1) is not weighted: (0.75 + 0.1 x 3 x k3) / 3
    b = _batch()
    b.behaviour_logps = _behaviour(b, [[math.log(2.0), 0.0], [math.log(0.5), 7.0]])
    b.ref_logps = b.logps.detach() + math.log(2.0)
    k3 = 1 - math.log(2.0)
    corr = CorrectionSettings(mode="sequence_mask", clip_max=1.5)
    out, bad = losses.compute("dapo", b, LossSettings(tokens=3.0, beta=0.1, correction=corr))
    assert bad == [] and out.loss.item() == pytest.approx((0.75 + 0.3 * k3) / 3, abs=1e-6)
    s, c = out.means["correction/masked_frac"]
    assert (s / c).item() == 0.5  # one row of two
    # token_truncate (C_max 3): weights 2, 1 / 0.5: -2.4 + 0.8 + 0.75 = -0.85
    out, _ = losses.compute("dapo", b, LossSettings(tokens=3.0, correction=CorrectionSettings(mode="token_truncate")))
    assert out.loss.item() == pytest.approx(-0.85 / 3, abs=1e-6)


def test_no_correction_without_behaviour_logps_or_with_mode_none():
    b = _batch()
    corr = CorrectionSettings(mode="token_mask")
    out, _ = losses.compute("dapo", b, LossSettings(tokens=3.0, correction=corr))
    assert out.loss.item() == pytest.approx(1.1 / 3, abs=1e-6) and not any(k.startswith("correction/") for k in out.means)
    b.behaviour_logps = _behaviour(b, [[5.0, 5.0], [5.0, 5.0]])  # every ratio e^5 > 3
    out, _ = losses.compute("dapo", b, LossSettings(tokens=3.0))  # mode none
    assert out.loss.item() == pytest.approx(1.1 / 3, abs=1e-6)
    out, _ = losses.compute("dapo", b, LossSettings(tokens=3.0, correction=corr))
    assert out.loss.item() == 0.0 and "correction/mismatch_k3" in out.means


def test_on_policy_the_learner_side_is_the_loss_own_logps():
    # no old log-probs: learner = logps (detached), so behaviour = logps - ln 2 gives ratio 2
    # everywhere; token_truncate C_max 1.5 -> weight 1.5. On-policy the surrogate is -A per token:
    # -1 + 1 + 1 = 1, times 1.5
    b = _batch(old_logps=None)
    b.behaviour_logps = b.logps.detach() - math.log(2.0)
    out, _ = losses.compute("dapo", b, LossSettings(tokens=3.0, correction=CorrectionSettings(
        mode="token_truncate", clip_max=1.5)))
    assert out.loss.item() == pytest.approx(1.5 / 3, abs=1e-6)


def test_vespo_folds_the_correction_into_its_row_weight():
    # correction weights 2, 1 / 0.5 (token_truncate): row 0's w = 0.75 x 2 = 1.5, row 1's 1.5 x 0.5 =
    # 0.75 (the rows swap their weights); no further multiplication:
    #   (0,0) A 1, phi(1.5; k 2, lam 3) = 2.25 e^-1.5 = 0.502043 -> 0.502043
    #   (0,1) A -1, phi(1.5; k 3, lam 2) = 1.241593 -> -1.241593 * 2 = -2.483186
    #   (1,0) A -1, phi(0.75; k 3, lam 2) = 0.695554 -> -0.695554 * 1.5 = -1.043331
    # sum -3.024474 over 3 tokens
    b = _batch()
    b.behaviour_logps = _behaviour(b, [[math.log(2.0), 0.0], [math.log(0.5), 7.0]])
    out, _ = losses.compute("vespo", b, LossSettings(tokens=3.0, correction=CorrectionSettings(mode="token_truncate")))
    assert out.loss.item() == pytest.approx(-3.024474 / 3, abs=1e-5)
    # a row mode folds the row's weight once: sequence_truncate gives the same 2 and 0.5 per row
    out, _ = losses.compute("vespo", b, LossSettings(tokens=3.0, correction=CorrectionSettings(
        mode="sequence_truncate")))
    assert out.loss.item() == pytest.approx(-3.024474 / 3, abs=1e-5)


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


@pytest.mark.parametrize("loss_type, kw", [
    ("dapo", {}), ("bnpo", {}), ("grpo", {}), ("dr_grpo", {}),
    ("luspo", dict(importance_sampling_level="sequence")),
    # CISPO's cap 1.02 is below row 0's ratio e^0.05 = 1.051: the cap acts
    ("cispo", dict(epsilon_high=1.02)),
    ("sapo", dict(sapo_temperature_pos=1.3, sapo_temperature_neg=0.6)),
    ("vespo", dict(vespo_k_pos=1.5, vespo_lambda_neg=2.5)),
])
def test_the_default_path_is_trls_loss(tiny_model_dir, tmp_path, loss_type, kw):
    # one micro-batch off-policy (old log-probs 0.05 below the current ones on row 0, 0.3 above on
    # row 1, so both clip sides are hit) with the KL term on: our loss on the packed rows equals
    # TRL 1.16's _compute_loss on its left-padded layout, and so does the gradient
    from trl import GRPOTrainer

    from agentrl.rollout.rows import pack_rows
    from agentrl.trainer.logprobs import completion_logps

    tr = _trainer(tiny_model_dir, tmp_path, loss_type=loss_type, beta=0.04, epsilon=0.2, **kw)
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
