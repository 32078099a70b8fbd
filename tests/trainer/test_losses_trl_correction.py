"""The rollout correction against TRL 1.16's own code: TRL computes its importance-sampling ratio
in ``_generate_and_score_completions`` from the sampler's log-probs and applies it in
``_compute_loss``, both behind ``use_vllm``. A plain TRL ``GRPOTrainer`` is fed the sampler's
log-probs through its public ``rollout_func`` (the generation TRL would ask vLLM for, which cannot
run here; everything after it is TRL's code); we check our weights against the ratio it computes,
and our loss with those log-probs against its ``_compute_loss``, value and gradient.

Runtime: ~25 s (a TRL trainer and one of ours per case).
"""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.losses import CorrectionSettings, correction_weights

# learner (old) - behaviour per completion token of the two rows of test_losses._rows():
#   row 0 (3 tokens, the middle one an env token): 0.4, 9.0 (masked: no effect), 1.0
#   row 1 (2 tokens): -1.3, unscored (None: vLLM could not score it; ratio 1)
# token ratios e^0.4 = 1.492, e^1 = 2.718 / e^-1.3 = 0.273; row sums 1.4 (ratio 4.055) and -1.3
SHIFT = [[0.4, 9.0, 1.0], [-1.3, None]]

CASES = [  # (mode, clip_max, clip_min): each puts a ratio on both sides of a bound
    ("token_truncate", 2.0, 0.5),      # 2.718 -> 2, 0.273 -> 0.5
    ("token_mask", 2.0, 0.5),          # 2.718 -> 0, 0.273 -> 0
    ("sequence_truncate", 3.0, None),  # row 0 4.055 -> 3, row 1 0.273 kept
    ("sequence_mask", 3.0, 0.5),       # row 0 4.055 -> 0, row 1 0.273 -> 0
    ("sequence_mask", 5.0, None),      # row 0 4.055 kept, row 1 0.273 kept
]


def _rows():
    from test_losses import _rows as rows

    return rows()


@pytest.fixture(scope="module")
def trl_pipeline(tiny_model_dir, tmp_path_factory):
    """A plain TRL GRPOTrainer whose rollout_func returns our two rows and sampler log-probs
    (the current log-probs minus SHIFT); ``run(mode, clip_max, clip_min)`` is TRL's output batch."""
    import os

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentrl.rollout.rows import pack_rows
    from agentrl.trainer.logprobs import completion_logps

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    rows = _rows()
    tmp = tmp_path_factory.mktemp("trl_is")
    args = GRPOConfig(output_dir=str(tmp), use_cpu=True, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=3, report_to="none", bf16=False, logging_steps=1)
    sampled: dict[str, list] = {}

    def rollout_func(prompts, trainer):
        return {"prompt_ids": [r.prompt for r in rows], "completion_ids": [r.completion for r in rows],
                "logprobs": sampled["logprobs"], "env_mask": [r.loss_mask for r in rows]}

    plain = GRPOTrainer(model=tiny_model_dir, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                        args=args, train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}), rollout_func=rollout_func)
    with torch.no_grad():
        now = completion_logps(plain.model, pack_rows(rows, plain.processing_class.pad_token_id))[0]
    sampled["logprobs"] = [[None if d is None else float(now[i, j]) - d for j, d in enumerate(r)]
                           for i, r in enumerate(SHIFT)]
    plain.use_vllm = True  # TRL computes and applies its ratio behind this flag
    plain.vllm_importance_sampling_correction = True
    plain._last_loaded_step = plain.state.global_step  # no vLLM engine to sync weights to

    def run(mode, clip_max, clip_min):
        plain.vllm_importance_sampling_mode = mode
        plain.vllm_importance_sampling_clip_max, plain.vllm_importance_sampling_clip_min = clip_max, clip_min
        return plain._generate_and_score_completions([{"prompt": "a"}, {"prompt": "b"}])

    return run


@pytest.mark.parametrize("mode, clip_max, clip_min", CASES)
def test_weights_are_trls_ratio(trl_pipeline, mode, clip_max, clip_min):
    out = trl_pipeline(mode, clip_max, clip_min)
    mask = out["completion_mask"] * out["tool_mask"]
    assert torch.isnan(out["sampling_per_token_logps"][1, 1])  # the unscored token reached TRL as NaN
    ours = correction_weights(out["old_per_token_logps"], out["sampling_per_token_logps"], mask,
                              CorrectionSettings(mode=mode, clip_max=clip_max, clip_min=clip_min))
    theirs = out["importance_sampling_ratio"].expand_as(mask)
    assert torch.allclose(ours.weights, theirs, atol=1e-6), (ours.weights, theirs)
    # the cases are chosen so the bounds act: not every weight is the raw ratio
    d = (out["old_per_token_logps"] - out["sampling_per_token_logps"]).nan_to_num(0.0) * mask
    raw = torch.exp(d if mode.startswith("token") else d.sum(-1, keepdim=True)).expand_as(mask)
    assert (mode, clip_max) == ("sequence_mask", 5.0) or not torch.allclose(ours.weights, raw)


@pytest.mark.parametrize("loss_type, mode, clip_max, clip_min", [
    ("dapo", *CASES[0]), ("grpo", *CASES[1]), ("dapo", *CASES[2]), ("bnpo", *CASES[4]),
    ("vespo", *CASES[0]), ("cispo", *CASES[2]), ("sapo", *CASES[3]),
])
def test_the_corrected_loss_is_trls(tiny_model_dir, tmp_path, trl_pipeline, loss_type, mode, clip_max, clip_min):
    # our trainer's loss (behaviour_logps in the micro-batch, the correction from the recipe keys)
    # against TRL's _compute_loss with TRL's ratio from the same log-probs; off-policy by 0.05 / -0.3
    # (as test_losses), with the KL term on
    from test_losses import _trainer, _trl_layout
    from trl import GRPOTrainer

    from agentrl.rollout.rows import pack_rows

    out = trl_pipeline(mode, clip_max, clip_min)
    kw = dict(epsilon_high=1.02) if loss_type == "cispo" else {}
    tr = _trainer(tiny_model_dir, tmp_path, loss_type=loss_type, beta=0.04, epsilon=0.2,
                  vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_max=clip_max,
                  vllm_importance_sampling_clip_min=clip_min, **kw)
    tr.model.train()
    tr.current_gradient_accumulation_steps = 2
    rows = _rows()
    ours = pack_rows(rows, tr.processing_class.pad_token_id)
    ours["num_items_in_batch"] = torch.tensor(4.0)
    shift = torch.tensor([[0.05, 0.05, 0.05], [-0.3, -0.3, 0.0]])
    # moving old and behaviour by the same amount keeps TRL's ratio exp(old - behaviour)
    ours["old_logps"] = out["old_per_token_logps"] - shift
    ours["behaviour_logps"] = out["sampling_per_token_logps"] - shift
    ours["ref_logps"] = out["old_per_token_logps"] + 0.1
    theirs = _trl_layout(rows, tr.processing_class.pad_token_id)
    theirs.update(num_items_in_batch=torch.tensor(4.0), old_per_token_logps=ours["old_logps"],
                  ref_per_token_logps=ours["ref_logps"], importance_sampling_ratio=out["importance_sampling_ratio"])
    loss = tr._compute_loss(tr.model, ours)
    assert any(k.startswith("correction/") for k in tr.last_loss.means)
    loss.backward()
    g_ours = {n: p.grad.clone() for n, p in tr.model.named_parameters() if p.grad is not None}
    tr.model.zero_grad()
    tr.use_vllm, tr.vllm_importance_sampling_correction = True, True
    want = GRPOTrainer._compute_loss(tr, tr.model, theirs)
    want.backward()
    assert math.isfinite(want.item()) and loss.item() == pytest.approx(want.item(), abs=1e-6)
    for n, p in tr.model.named_parameters():
        if p.grad is not None:
            assert torch.allclose(g_ours[n], p.grad, atol=1e-6), n


def test_the_recipe_keys_build_the_correction(tiny_model_dir, tmp_path):
    # TRL's defaults (sequence_mask, C_max 3) with agentrl's veto; the switch off turns all of it off
    from test_losses import _trainer

    from agentrl.trainer.update import correction_settings

    tr = _trainer(tiny_model_dir, tmp_path, rollout_correction_veto=0.01)
    assert correction_settings(tr.args) == CorrectionSettings(mode="sequence_mask", clip_max=3.0, veto=0.01)
    tr.args.vllm_importance_sampling_correction = False
    assert correction_settings(tr.args) == CorrectionSettings() and not CorrectionSettings().active
