"""APPO's registered surrogate (Eq. 7, ``future_aware_surrogate`` in agentrl/algorithms/appo.py) through the
trainer's ``_compute_loss`` on a hand-built packed micro-batch: the values worked out here.
Runtime: ~10 s (a tiny trainer).
"""

from __future__ import annotations

import math

import pytest
import torch
import yaml


@pytest.fixture(scope="module")
def appo_trainer(tiny_model_dir, tmp_path_factory):
    from agentrl.config import load_recipe
    from agentrl.trainer import AgentGRPOTrainer

    tmp = tmp_path_factory.mktemp("appo_contract")
    rec = tmp / "r.yaml"
    rec.write_text(yaml.safe_dump(dict(
        model_name_or_path=tiny_model_dir, env_id="agentrl-test/Count-v0", task_split="", num_tasks=4,
        num_generations=2, per_device_train_batch_size=2, max_steps=1, bf16=False, context_mode="trajectory",
        algorithm="appo", credit="appo", algorithm_kwargs={"omega_baseline": "behaviour"}, gradient_checkpointing=False,
        report_to="none", output_dir=str(tmp / "o"), use_cpu=True)))
    tr = AgentGRPOTrainer(model=tiny_model_dir, args=load_recipe(str(rec), []))
    assert tr.algorithm.name == "appo"  # algorithm: appo selects the APPO plug-in
    return tr


def _batch():
    # row 0: prompt [5, 6], completion [8, 9, 10], the middle token an env token (no loss);
    # row 1: prompt [7], completion [11, 12]
    from agentrl.rollout.contexts import Row
    from agentrl.rollout.rows import pack_rows

    rows = [Row(prompt=[5, 6], completion=[8, 9, 10], loss_mask=[1, 0, 1], adv=[0.5, 100.0, 0.5]),
            Row(prompt=[7], completion=[11, 12], loss_mask=[1, 1], adv=[-2.0, -2.0])]
    b = pack_rows(rows, 0)
    b["num_items_in_batch"] = torch.tensor(4.0)
    return b


def _logps(tr, inputs):
    from agentrl.trainer.logprobs import completion_logps

    with torch.no_grad():
        return completion_logps(tr.model, inputs)[0]


def test_on_policy_loss_is_dapo_with_doubled_advantages(appo_trainer):
    # no old log-probs: pi_old = pi_theta, Delta = 0, f = 1 (high-only), A~ = A (1 + 1 * 1) = 2A.
    # The DAPO loss with ratio 1: -sum(A~ * mask) / num_items = -2 (0.5 + 0.5 - 2 - 2) / 4 = 1.5
    inputs = _batch()
    assert appo_trainer.loss_name == "appo+token_mean"  # Eq. 7's surrogate, dapo's reduction
    loss = appo_trainer._compute_loss(appo_trainer.model, inputs)
    assert loss.item() == pytest.approx(1.5, abs=1e-5)
    assert torch.equal(inputs["advantages"], _batch()["advantages"])  # the buffered batch is untouched


def test_off_policy_loss_uses_the_future_weight(appo_trainer):
    tr = appo_trainer
    inputs = _batch()
    inputs["old_logps"] = _logps(tr, inputs) - 0.1  # Delta = 0.1 on every token, ratio r = e^0.1
    loss = tr._compute_loss(tr.model, inputs)
    # FutureKL over model tokens only (gamma = 2^(-1/64) = 0.989228, distances in positions):
    #   row 0: t0 = 0.1 + gamma^2 * 0.1 = 0.197857 -> e^. = 1.2188 -> clip 1.2; t2 = 0.1 -> 1.105171
    #   row 1: t0 = 0.1 + gamma * 0.1 = 0.198923 -> 1.2201 -> 1.2;          t1 = 0.1 -> 1.105171
    # A~ = A (1 + f): 0.5*2.2 = 1.1, 0.5*2.105171 = 1.052585, -2*2.2 = -4.4, -2*2.105171 = -4.210342
    # ratio r = 1.105171 is inside [0.8, 1.2], so the clipped term is not the min: loss per token
    # -r A~; sum = -1.105171 * (1.1 + 1.052585 - 4.4 - 4.210342) = 7.136931; / num_items 4
    r = math.exp(0.1)
    want = -r * (1.1 + 0.5 * (1 + r) - 4.4 - 2 * (1 + r)) / 4
    assert want == pytest.approx(1.784233, abs=1e-5)
    assert loss.item() == pytest.approx(want, abs=1e-4)
    w = tr.last_loss.debug["weight"]
    assert w[0, 0] == pytest.approx(1.2) and w[0, 2] == pytest.approx(r, abs=1e-5)


def test_future_kl_skips_the_tool_token(appo_trainer):
    # The tool token (row 0, position 1) gets its own Delta, 0.9 (under log 3, so only the mask can
    # keep it out of the sum); the model tokens get 0.05, so no weight reaches the 1.2 clip:
    #   row 0: t0 = 0.05 + gamma^2 * 0.05 = 0.098929 -> f = e^. = 1.103987 (with the tool token:
    #          0.05 + gamma * 0.9 + gamma^2 * 0.05 = 0.989 -> 2.689, clipped to 1.2); t2 = 0.05 -> 1.051271
    #   row 1: t0 = 0.05 + gamma * 0.05 = 0.099461 -> 1.104576;                      t1 = 0.05 -> 1.051271
    # ratio r = e^0.05 = 1.051271 on the model tokens (inside [0.8, 1.2]); A~ = A (1 + f):
    #   0.5 * 2.103987 = 1.051994, 0.5 * 2.051271 = 1.025636, -2 * 2.104576 = -4.209152, -2 * 2.051271 = -4.102542
    # loss = -r * (sum = -6.234065) / 4 = 1.638423 (1.625806 if the tool token were summed)
    tr = appo_trainer
    inputs = _batch()
    delta = torch.tensor([[0.05, 0.9, 0.05], [0.05, 0.05, 0.0]])
    inputs["old_logps"] = _logps(tr, inputs) - delta
    loss = tr._compute_loss(tr.model, inputs)
    w = tr.last_loss.debug["weight"]
    assert w[0, 0] == pytest.approx(1.103987, abs=1e-5) and w[1, 0] == pytest.approx(1.104576, abs=1e-5)
    assert w[0, 2] == w[1, 1] == pytest.approx(1.051271, abs=1e-5)
    assert loss.item() == pytest.approx(1.638423, abs=1e-4)


def test_b_zero_is_the_plain_loss_type(appo_trainer):
    tr = appo_trainer
    old = dict(tr.algorithm.kwargs), tr.loss_name, tr.loss_options
    tr.algorithm.kwargs["b"] = 0.0
    tr.loss_name, tr.loss_options = tr.algorithm.loss(tr.args)
    assert tr.loss_name == "dapo"
    try:
        # the plain DAPO loss with ratio 1: -(0.5 + 0.5 - 2 - 2) / 4 = 0.75
        assert tr._compute_loss(tr.model, _batch()).item() == pytest.approx(0.75, abs=1e-5)
    finally:
        tr.algorithm.kwargs, tr.loss_name, tr.loss_options = old


def test_eq7_composes_with_the_loss_types_reduction(appo_trainer):
    # loss_type luspo: Eq. 7's surrogate with luspo's reduction (mean over rows of each row's token
    # sum). On-policy A~ = 2A, ratio 1, per token -A~: row 0 -1 - 1 = -2, row 1 4 + 4 = 8; mean 3
    tr = appo_trainer
    old = tr.args.loss_type, tr.loss_name, tr.loss_options
    tr.args.loss_type = "luspo"
    tr.loss_name, tr.loss_options = tr.algorithm.loss(tr.args)
    assert tr.loss_name == "appo+seq_mean_token_sum" and set(tr.loss_options) == {"appo"}
    try:
        assert tr._compute_loss(tr.model, _batch()).item() == pytest.approx(3.0, abs=1e-5)
    finally:
        tr.args.loss_type, tr.loss_name, tr.loss_options = old


@pytest.mark.parametrize("extra, msg", [
    ({"loss_type": "cispo", "epsilon_high": 5.0}, "reweights the clipped surrogate; loss_type 'cispo' has surrogate"),
    ({"context_mode": "window"}, "algorithm appo needs context_mode: trajectory"),
    ({"beta": 0.0}, "omega_baseline 'ref' needs a reference model"),
    ({"algorithm_kwargs": {"budget": -1}}, "algorithm 'appo': kwarg budget=-1 must be in [0, 4096]"),
    ({"algorithm_kwargs": {"combine": "max"}}, "kwarg combine='max' must be one of 'average', 'sum'"),
    ({"credit_kwargs": {"grouping": "joint"}, "algorithm_kwargs": {"grouping": "dual"}},
     "grouping is set twice, in credit_kwargs ('joint') and in algorithm_kwargs ('dual')"),
    ({"loss_type": "appo"}, "under algorithm appo, loss_type is the reduction Eq. 7 is applied with"),
])
def test_bad_appo_recipes_fail_in_one_line(tiny_model_dir, tmp_path, extra, msg):
    from agentrl.config import load_recipe
    from agentrl.recipe_file import RecipeError

    d = dict(model_name_or_path=tiny_model_dir, env_id="agentrl-test/Count-v0", task_split="", num_tasks=4,
             num_generations=2, per_device_train_batch_size=2, context_mode="trajectory", algorithm="appo", credit="appo",
             beta=0.001,
             report_to="none", output_dir=str(tmp_path / "o"), use_cpu=True)
    d.update(extra)
    rec = tmp_path / "r.yaml"
    rec.write_text(yaml.safe_dump(d))
    with pytest.raises(RecipeError) as e:
        load_recipe(str(rec), [])
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_an_older_appo_recipe_is_read_in_todays_convention_with_one_note(tiny_model_dir, tmp_path, capsys):
    # before: credit: appo selected the algorithm and APPO's settings lived in credit_kwargs
    from agentrl.config import load_recipe

    old = dict(model_name_or_path=tiny_model_dir, env_id="agentrl-test/Count-v0", task_split="", num_tasks=4,
               num_generations=2, per_device_train_batch_size=2, context_mode="trajectory", credit="appo", beta=0.001,
               credit_kwargs={"budget": 2, "omega_baseline": "behaviour"}, report_to="none",
               output_dir=str(tmp_path / "o"), use_cpu=True)
    rec = tmp_path / "old.yaml"
    rec.write_text(yaml.safe_dump(old))
    capsys.readouterr()
    cfg = load_recipe(str(rec), [])
    assert capsys.readouterr().err.strip().splitlines() == [
        "agentrl: note: credit: appo no longer selects the algorithm; read as algorithm: appo (name it in the recipe); "
        "budget, omega_baseline are now kwargs of algorithm: appo (algorithm_kwargs), not of credit_kwargs; read as "
        "such"]
    assert (cfg.algorithm, cfg.algorithm_kwargs, cfg.credit_kwargs) == (
        "appo", {"budget": 2, "omega_baseline": "behaviour"}, {})
    new = dict(old, algorithm="appo", algorithm_kwargs=old["credit_kwargs"], credit_kwargs={})
    rec.write_text(yaml.safe_dump(new))
    same = load_recipe(str(rec), [])
    assert same.to_dict() == cfg.to_dict() and capsys.readouterr().err == ""  # the same run, no note
