"""Length-grouped, trimmed micro-batches give the same gradient as TRL's shuffled equal split;
and the rows a rank keeps under ``max_rows_per_rank`` (``balance_rows``), by hand.

Runtime: ~20-30 s on 2 cores (one tiny trainer per loss type).
"""

import numpy as np
import pytest
import torch
from test_trainer import make_cfg, make_trainer

from agentrl.rollout.contexts import Row
from agentrl.rollout.rows import (
    balance_rows,
    length_grouped_micro_batches,
    real_token_share,
    row_target,
    trim_padding,
)


def test_trim_padding_by_hand():
    # prompts left-padded to 3, completions right-padded to 4; column 0 of the prompts and
    # column 3 of the completions are padding in every row: both go
    mb = {"prompt_ids": torch.tensor([[0, 5, 6], [0, 0, 7]]), "prompt_mask": torch.tensor([[0, 1, 1], [0, 0, 1]]),
          "completion_ids": torch.tensor([[8, 9, 0, 0], [1, 2, 3, 0]]),
          "completion_mask": torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]]),
          "tool_mask": torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]]),
          "advantages": torch.tensor([[0.5, 0.5, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]), "num_items_in_batch": torch.tensor(4)}
    t = trim_padding(mb)
    assert t["prompt_ids"].tolist() == [[5, 6], [0, 7]] and t["completion_ids"].tolist() == [[8, 9, 0], [1, 2, 3]]
    assert t["advantages"].shape == (2, 3) and t["tool_mask"].shape == (2, 3) and int(t["num_items_in_batch"]) == 4
    # real tokens: prompts 2 + 1, completions 2 + 3 = 8 of 2 x (3 + 4) = 14 before, 2 x (2 + 3) = 10 after
    assert real_token_share([mb]) == pytest.approx(8 / 14) and real_token_share([t]) == pytest.approx(8 / 10)


def test_rows_over_the_cap_are_distinct_rows_in_their_order():
    # 10 rows (completion [k] tells row k apart), cap 8, 2 micro-steps: R = min(10, 8) = 8, already
    # a multiple of 2. The 8 kept are 8 different rows (a sample without replacement) in their
    # order: row ids strictly increasing, 2 left out, no filler. Seeds as the trainer's row_rng
    # makes them ([seed, step, rank]); drawn with replacement, 8 of 10 repeat a row with
    # probability 1 - 10!/(2! 10^8) = 98% per seed.
    rows = [Row(prompt=[1], completion=[k], loss_mask=[1], adv=[float(k)]) for k in range(10)]
    target = row_target(10, 8, 2)
    assert target == 8
    for step in range(5):
        kept, c = balance_rows(rows, target, pad_id=0, rng=np.random.default_rng([0, step, 0]))
        ids = [r.completion[0] for r in kept]
        assert len(ids) == 8 and ids == sorted(set(ids)), (step, ids)  # distinct, in order
        assert all(kept[i] == rows[k] for i, k in enumerate(ids))  # whole rows, advantages included
        assert (c.real, c.target, c.filler, c.dropped) == (10, 8, 0, 2)
    # under the target (another rank has 12 rows, no cap: R 12): every row once, in order, then 2
    # masked fillers
    kept, c = balance_rows(rows, row_target(12, None, 2), pad_id=0, rng=np.random.default_rng(0))
    assert kept[:10] == rows and [(r.completion, r.loss_mask) for r in kept[10:]] == [([0], [0])] * 2
    assert (c.real, c.target, c.filler, c.dropped) == (10, 12, 2, 0)


def _grads(tr, micro_batches):
    tr.model.zero_grad(set_to_none=True)
    for mb in micro_batches:
        tr._compute_loss(tr.model, mb).backward()
    return {n: p.grad.detach().clone() for n, p in tr.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_length_grouped_update_has_the_unsorted_gradient(tmp_path, tiny_model_dir, loss_type):
    from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

    # 8 rollouts x 3 window steps = 24 rows whose prompts grow with the history shown (0-2 pairs);
    # 2 micro-batches per optimizer step (gradient_accumulation_steps = steps_per_generation = 2)
    cfg = make_cfg(tmp_path, tiny_model_dir, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                   steps_per_generation=2, loss_type=loss_type, history_length=2)
    tr = make_trainer(cfg)
    assert tr.groups_rows_by_length()
    tr.model.train()
    tr.current_gradient_accumulation_steps = 2
    inputs = [tr.train_dataset[i] for i in (0, 0, 0, 0, 1, 1, 1, 1)]
    batch = tr._generate_and_score_completions(inputs)
    assert batch["completion_ids"].shape[0] == 24
    torch.manual_seed(0)
    unsorted = split_tensor_dict(shuffle_sequence_dict(batch), 2)  # what TRL's _prepare_inputs does
    grouped = length_grouped_micro_batches(batch, 2)
    assert sorted(len(mb["prompt_ids"]) for mb in grouped) == [12, 12]
    share_before, share_after = real_token_share(unsorted), real_token_share(grouped)
    print(f"real-token share ({loss_type}): unsorted {share_before:.3f}, grouped {share_after:.3f}")
    assert share_after > share_before
    g_ref, g_new = _grads(tr, unsorted), _grads(tr, grouped)
    assert g_ref.keys() == g_new.keys() and g_ref
    for n in g_ref:
        assert torch.allclose(g_new[n], g_ref[n], rtol=1e-4, atol=1e-7), n
    assert any(g.abs().sum() > 0 for g in g_ref.values())


def test_bnpo_and_partial_accumulation_keep_trl_split(tmp_path, tiny_model_dir):
    # bnpo divides by each micro-batch's own token count: grouping would change the gradient
    tr = make_trainer(make_cfg(tmp_path, tiny_model_dir, loss_type="bnpo"))
    assert not tr.groups_rows_by_length()
    # 2 optimizer steps per generation: which rows share a step must stay random
    tr = make_trainer(make_cfg(tmp_path, tiny_model_dir, per_device_train_batch_size=4, steps_per_generation=2))
    assert not tr.groups_rows_by_length()
