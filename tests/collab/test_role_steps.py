"""RoleSteps: where each role's rows go in a rollout's micro-batches, on hand-made rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.algorithms.role_steps import RoleSteps
from agentrl.rollout.contexts import Row
from agentrl.rollout.rows import pack_rows


def test_role_at_walks_the_roles_in_turn():
    # 2 roles, 4 micro-batches per rollout, 2 per optimizer step: step 0 = role 0, step 1 = role 1
    rs = RoleSteps(n_roles=2, steps_per_generation=4, grad_accum=2)
    assert [rs.role_at(s) for s in range(10)] == [0, 0, 1, 1, 0, 0, 1, 1, 0, 0]
    # 2 optimizer steps per role per rollout, 1 micro-batch each
    rs = RoleSteps(n_roles=2, steps_per_generation=4, grad_accum=1)
    assert [rs.role_at(s) for s in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    with pytest.raises(ValueError, match=r"steps_per_generation \(2\) must be a multiple of .* \(2\) x roles \(2\)"):
        RoleSteps(n_roles=2, steps_per_generation=2, grad_accum=2)


def _row(role: int, k: int, n: int) -> Row:
    return Row(prompt=[100 + role], completion=[10 * role + k] * n, loss_mask=[1] * n, adv=[float(role)] * n)


def test_balance_pads_every_role_to_one_count_in_role_order():
    rs = RoleSteps(n_roles=2, steps_per_generation=4, grad_accum=1)  # 2 micro-batches per role
    thinker = [_row(0, k, 1) for k in range(5)]
    solver = [_row(1, k, 1) for k in range(4)]
    rows, c = rs.balance([thinker, solver], n_max=5, cap=None, pad_id=0, rng=np.random.default_rng(0))
    # R = 5 rounded up to a multiple of 2 = 6: 1 filler after the Thinker's rows, 2 after the Solver's
    assert len(rows) == 12 and (c.real, c.target, c.filler, c.dropped) == (9, 12, 3, 0)
    assert rows[:5] == thinker and rows[5].loss_mask == [0]
    assert rows[6:10] == solver and [r.loss_mask for r in rows[10:]] == [[0], [0]]
    # a cap of 4 rows per rank: 2 per role, each role sampled down
    rows, c = rs.balance([thinker, solver], n_max=5, cap=4, pad_id=0, rng=np.random.default_rng(0))
    assert len(rows) == 4 and c.dropped == 5
    assert all(r in thinker for r in rows[:2]) and all(r in solver for r in rows[2:])


def _batch(rows: list[Row]) -> dict[str, torch.Tensor]:
    return pack_rows(rows, pad_id=0)


@pytest.mark.parametrize("by_length", [False, True])
def test_micro_batches_hold_one_role_each_with_their_step_token_count(by_length):
    # 2 roles x 4 rows; 4 micro-batches, 2 per optimizer step: step 0 = the Thinker's 4 rows
    # (lengths 1, 2, 3, 4: 10 tokens), step 1 = the Solver's (lengths 5, 5, 5, 5: 20 tokens)
    rs = RoleSteps(n_roles=2, steps_per_generation=4, grad_accum=2)
    rows = [_row(0, k, k + 1) for k in range(4)] + [_row(1, k, 5) for k in range(4)]
    mbs = rs.micro_batches(_batch(rows), by_length, count=lambda t: t)
    assert len(mbs) == 4
    assert [sorted(mb["input_ids"][:, 0].tolist()) for mb in mbs] == [[100, 100]] * 2 + [[101, 101]] * 2
    # the dapo normaliser: num_items * accumulation / steps_per_generation = the step's tokens
    assert [float(mb["num_items_in_batch"]) * 2 / 4 for mb in mbs] == [10.0, 10.0, 20.0, 20.0]
    assert sum(int(mb["loss_mask"].sum()) for mb in mbs[:2]) == 10
    if by_length:  # the Thinker's two shortest rows together, trimmed to width 2
        assert mbs[0]["completion_ids"].shape == (2, 2)
