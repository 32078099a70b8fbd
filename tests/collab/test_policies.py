"""SwappedPolicies: two policies on one module and one optimizer give, bit for bit, what two modules
with two optimizers give (weights and AdamW state), under any role schedule."""

from __future__ import annotations

import copy

import pytest
import torch

from agentrl.policies.swap import SwappedPolicies


def _net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


X = torch.linspace(-1, 1, 15).reshape(5, 3)
TARGET = {"thinker": torch.ones(5, 2), "solver": -torch.ones(5, 2)}


def _step(model, opt, policy):
    loss = ((model(X) - TARGET[policy]) ** 2).sum()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


SCHEDULE = ["thinker", "thinker", "solver", "solver", "thinker", "solver", "solver", "thinker"]


def test_swapped_policies_equal_two_separate_models_bit_for_bit():
    ref = {p: _net() for p in TARGET}
    ref_opt = {p: torch.optim.AdamW(m.parameters(), lr=0.05, weight_decay=0.1) for p, m in ref.items()}
    model = _net()
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    swaps = SwappedPolicies(model, ("thinker", "solver"), lambda: opt)
    for policy in SCHEDULE:
        _step(ref[policy], ref_opt[policy], policy)
        swaps.activate(policy)
        _step(model, opt, policy)
        # generating with the other policy leaves the trained one exactly in place
        other = "solver" if policy == "thinker" else "thinker"
        before = [p.detach().clone() for p in model.parameters()]
        with swaps.use(other):
            got = [p.detach().clone() for p in model.parameters()]
            assert all(torch.equal(a, b) for a, b in zip(got, ref[other].parameters(), strict=True))
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    for policy in TARGET:
        swaps.activate(policy)
        for (n, p), q in zip(model.named_parameters(), ref[policy].parameters(), strict=True):
            assert torch.equal(p, q), (policy, n)
            s, r = opt.state[p], ref_opt[policy].state[q]
            assert torch.equal(s["exp_avg"], r["exp_avg"]) and torch.equal(s["exp_avg_sq"], r["exp_avg_sq"])
            assert float(s["step"]) == float(r["step"]) == SCHEDULE.count(policy)


def test_state_dict_round_trip_restores_parked_policy():
    model = _net()
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    swaps = SwappedPolicies(model, ("thinker", "solver"), lambda: opt)
    for policy in SCHEDULE[:4]:
        swaps.activate(policy)
        _step(model, opt, policy)
    saved = copy.deepcopy(swaps.state_dict())
    assert saved["loaded"] == "solver" and set(saved["parked"]) == {"thinker"}
    weights = copy.deepcopy(model.state_dict())
    opt_state = copy.deepcopy(opt.state_dict())
    # a fresh run loads the model and optimizer (as the Trainer does), then the parked rest
    model2 = _net(seed=1)
    model2.load_state_dict(weights)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=0.05)
    opt2.load_state_dict(opt_state)
    swaps2 = SwappedPolicies(model2, ("thinker", "solver"), lambda: opt2)
    swaps2.load_state_dict(saved)
    for policy in SCHEDULE[4:]:
        swaps.activate(policy)
        _step(model, opt, policy)
        swaps2.activate(policy)
        _step(model2, opt2, policy)
    for policy in TARGET:
        swaps.activate(policy)
        swaps2.activate(policy)
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters(), strict=True))


def test_errors_are_one_line():
    model = _net()
    swaps = SwappedPolicies(model, ("a", "b"))
    with pytest.raises(ValueError, match="unknown policy 'c'; policies: a, b"):
        swaps.activate("c")
    model(X).sum().backward()
    with pytest.raises(RuntimeError, match="gradients pending"):
        swaps.activate("b")
    with pytest.raises(ValueError, match="checkpoint has policies"):
        SwappedPolicies(_net(), ("a", "x")).load_state_dict(SwappedPolicies(_net(), ("a", "b")).state_dict())
    single = SwappedPolicies(_net(), ("shared",))
    assert not single.separate and single.activate("shared") is False
    fresh = SwappedPolicies(_net(), ("a", "b"))
    with fresh.use("b"):  # a generation holds b's weights while a trains
        with pytest.raises(RuntimeError, match=r"^SwappedPolicies\.activate inside use\(\): finish the generation"):
            fresh.activate("b")
        with pytest.raises(RuntimeError, match=r"^SwappedPolicies\.state_dict inside use\(\)$"):
            fresh.state_dict()
    assert fresh.activate("b") is True and fresh.activate("b") is False
