"""Packed rows by hand; length-grouped, trimmed micro-batches give the same gradient as a shuffled equal split;
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
    pack_rows,
    real_token_share,
    row_target,
    shuffled_micro_batches,
    take,
    trim_padding,
)


def test_pack_and_trim_by_hand():
    # two rows packed from position 0, padding on the right only; a micro-batch of the short row
    # alone loses the columns that are padding in all its rows
    rows = [Row(prompt=[5, 6], completion=[8, 9], loss_mask=[1, 0], adv=[0.5, 0.5]),
            Row(prompt=[7], completion=[1, 2, 3], loss_mask=[1, 1, 1], adv=[1.0, 1.0, 1.0])]
    mb = pack_rows(rows, pad_id=0)
    assert mb["input_ids"].tolist() == [[5, 6, 8, 9], [7, 1, 2, 3]]
    assert mb["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 1]]
    assert mb["completion_start"].tolist() == [2, 1]
    assert mb["completion_ids"].tolist() == [[8, 9, 0], [1, 2, 3]]
    assert mb["loss_mask"].tolist() == [[1, 0, 0], [1, 1, 1]] and int(mb["num_items_in_batch"]) == 4
    assert mb["advantages"].tolist() == [[0.5, 0.5, 0.0], [1.0, 1.0, 1.0]]
    rows.append(Row(prompt=[4], completion=[6], loss_mask=[1], adv=[2.0]))
    mb = pack_rows(rows, pad_id=0)
    assert mb["input_ids"][2].tolist() == [4, 6, 0, 0] and mb["attention_mask"][2].tolist() == [1, 1, 0, 0]
    t = trim_padding(take(mb, torch.tensor([2])))
    assert t["input_ids"].tolist() == [[4, 6]] and t["completion_ids"].tolist() == [[6]]
    assert t["advantages"].tolist() == [[2.0]] and int(t["num_items_in_batch"]) == 5  # shared, not sliced
    # real tokens 4 + 4 + 2 = 10 of 3 x 4 = 12 positions; the trimmed one: 2 of 2
    assert real_token_share([mb]) == pytest.approx(10 / 12) and real_token_share([t]) == 1.0


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
    # 8 rollouts x 3 window steps = 24 rows whose prompts grow with the history shown (0-2 pairs);
    # 2 micro-batches per optimizer step (gradient_accumulation_steps = steps_per_generation = 2)
    cfg = make_cfg(tmp_path, tiny_model_dir, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                   steps_per_generation=2, loss_type=loss_type, history_length=2)
    tr = make_trainer(cfg)
    assert tr.groups_rows_by_length()
    tr.model.train()
    tr.current_gradient_accumulation_steps = 2
    inputs = [tr.train_dataset[i] for i in (0, 0, 0, 0, 1, 1, 1, 1)]
    batch = tr.make_iteration_batch(inputs)
    assert batch["completion_ids"].shape[0] == 24
    unsorted = shuffled_micro_batches(batch, 2, torch.Generator().manual_seed(0))  # the split-variant path
    grouped = length_grouped_micro_batches(batch, 2)
    assert sorted(len(mb["input_ids"]) for mb in grouped) == [12, 12]
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
