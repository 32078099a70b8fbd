"""Contract of the algorithms' loss transform (``AgentGRPOTrainer._compute_loss``, APPO's Eq. 7 in
agentrl/algorithms/appo.py) with TRL 1.16's private ``_compute_loss``: the source order it relies
on, and the loss it gives on a hand-built batch worked out here. Runtime: ~10 s (a tiny trainer).
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import yaml


def test_trl_version_pinned():
    import trl

    assert trl.__version__ == "1.16.0", "the loss transform was written against TRL 1.16.0: re-run these checks"


def test_compute_loss_reads_advantages_after_its_forward():
    # the trainer replaces inputs["advantages"] from inside TRL's forward call: that call must
    # come first, once, and the advantages, old log-probs and mask must be read as below.
    from trl import GRPOTrainer

    src = inspect.getsource(GRPOTrainer._compute_loss)
    fwd = "self._get_per_token_logps_and_entropies("
    read = 'advantages = inputs["advantages"]'
    assert src.count(fwd) == 1 and src.count(read) == 1
    assert src.index(fwd) < src.index(read)
    assert src.index(fwd) < src.index('old_per_token_logps = inputs.get("old_per_token_logps")')
    assert 'mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]' in src
    p = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    assert p[:7] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size",
                     "compute_entropy"]
    assert list(inspect.signature(GRPOTrainer._compute_loss).parameters) == ["self", "model", "inputs"]


@pytest.fixture(scope="module")
def appo_trainer(tiny_model_dir, tmp_path_factory):
    from agentrl.config import load_recipe
    from agentrl.trainer import AgentGRPOTrainer

    tmp = tmp_path_factory.mktemp("appo_contract")
    rec = tmp / "r.yaml"
    rec.write_text(yaml.safe_dump(dict(
        model_name_or_path=tiny_model_dir, env_id="agentrl-test/Count-v0", task_split="", num_tasks=4,
        num_generations=2, per_device_train_batch_size=2, max_steps=1, bf16=False, context_mode="trajectory",
        credit="appo", credit_kwargs={"omega_baseline": "behaviour"}, gradient_checkpointing=False,
        report_to="none", output_dir=str(tmp / "o"), use_cpu=True)))
    tr = AgentGRPOTrainer(model=tiny_model_dir, args=load_recipe(str(rec), []))
    assert tr.algorithm.name == "appo"  # credit: appo selects the APPO plug-in
    return tr


def _batch():
    return {
        "prompt_ids": torch.tensor([[5, 6], [0, 7]]),
        "prompt_mask": torch.tensor([[1, 1], [0, 1]]),
        "completion_ids": torch.tensor([[8, 9, 10], [11, 12, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        "tool_mask": torch.tensor([[1, 0, 1], [1, 1, 0]]),
        "advantages": torch.tensor([[0.5, 100.0, 0.5], [-2.0, -2.0, 0.0]]),
        "num_items_in_batch": torch.tensor(4.0),
    }


def test_on_policy_loss_is_trls_with_doubled_advantages(appo_trainer):
    # no old log-probs: pi_old = pi_theta, Delta = 0, f = 1 (high-only), A~ = A (1 + 1 * 1) = 2A.
    # TRL's DAPO loss with ratio 1: -sum(A~ * mask) / num_items = -2 (0.5 + 0.5 - 2 - 2) / 4 = 1.5
    inputs = _batch()
    loss = appo_trainer._compute_loss(appo_trainer.model, inputs)
    assert loss.item() == pytest.approx(1.5, abs=1e-5)
    assert torch.equal(inputs["advantages"], _batch()["advantages"])  # the buffered batch is untouched
    assert appo_trainer._loss_inputs is None  # spent by the loss's own forward


def test_off_policy_loss_uses_the_future_weight(appo_trainer):
    tr = appo_trainer
    inputs = _batch()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        logps = tr._get_per_token_logps_and_entropies(tr.model, ids, att, 3)[0]
    inputs["old_per_token_logps"] = logps - 0.1  # Delta = 0.1 on every token, ratio r = e^0.1
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
    w = tr.algorithm.last_future["weight"]
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
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        logps = tr._get_per_token_logps_and_entropies(tr.model, ids, att, 3)[0]
    delta = torch.tensor([[0.05, 0.9, 0.05], [0.05, 0.05, 0.0]])
    inputs["old_per_token_logps"] = logps - delta
    loss = tr._compute_loss(tr.model, inputs)
    w = tr.algorithm.last_future["weight"]
    assert w[0, 0] == pytest.approx(1.103987, abs=1e-5) and w[1, 0] == pytest.approx(1.104576, abs=1e-5)
    assert w[0, 2] == w[1, 1] == pytest.approx(1.051271, abs=1e-5)
    assert loss.item() == pytest.approx(1.638423, abs=1e-4)


def test_b_zero_leaves_trls_loss_alone(appo_trainer):
    tr = appo_trainer
    old = dict(tr.algorithm.kwargs)
    tr.algorithm.kwargs["b"] = 0.0
    assert not tr.algorithm.transforms_loss
    try:
        # TRL's plain DAPO loss with ratio 1: -(0.5 + 0.5 - 2 - 2) / 4 = 0.75
        assert tr._compute_loss(tr.model, _batch()).item() == pytest.approx(0.75, abs=1e-5)
    finally:
        tr.algorithm.kwargs = old


@pytest.mark.parametrize("extra, msg", [
    ({"context_mode": "window"}, "credit appo needs context_mode: trajectory"),
    ({"beta": 0.0}, "omega_baseline 'ref' needs a reference model"),
    ({"credit_kwargs": {"budget": -1}}, "kwarg budget=-1 must be in [0, 4096]"),
    ({"credit_kwargs": {"combine": "max"}}, "kwarg combine='max' must be one of 'average', 'sum'"),
])
def test_bad_appo_recipes_fail_in_one_line(tiny_model_dir, tmp_path, extra, msg):
    from agentrl.config import load_recipe
    from agentrl.recipe_file import RecipeError

    d = dict(model_name_or_path=tiny_model_dir, env_id="agentrl-test/Count-v0", task_split="", num_tasks=4,
             num_generations=2, per_device_train_batch_size=2, context_mode="trajectory", credit="appo", beta=0.001,
             report_to="none", output_dir=str(tmp_path / "o"), use_cpu=True)
    d.update(extra)
    rec = tmp_path / "r.yaml"
    rec.write_text(yaml.safe_dump(d))
    with pytest.raises(RecipeError) as e:
        load_recipe(str(rec), [])
    assert msg in str(e.value) and "\n" not in str(e.value)
