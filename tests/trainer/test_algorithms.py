"""The algorithm registry (agentrl/algorithms): which plug-in a recipe selects, duplicate names
refused, and the default hooks on a hand-built batch. Runtime: ~1 s (no model)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from agentrl import algorithms
from agentrl.algorithms import Algorithm, algorithm_name, register_algorithm
from agentrl.records import StepRecord


def _cfg(**kw):
    base = dict(collab=None, credit="grpo", credit_kwargs=None, gamma=0.95)
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize("kw, name", [
    ({}, "grpo"),
    ({"credit": "gigpo"}, "grpo"),  # any per-record credit module: the default algorithm
    ({"credit": "appo"}, "appo"),
    ({"collab": "think_solve", "credit": "ccpo"}, "collab"),
    ({"collab": "think_solve", "credit": "shared"}, "collab"),
    ({"credit": "sepo"}, "collab"),  # a collaboration credit without collab: its check refuses it
])
def test_the_recipe_keys_select_the_algorithm(kw, name):
    assert algorithm_name(_cfg(**kw)) == name
    assert algorithms.for_config(_cfg(**kw)).name == name


def test_duplicate_names_are_refused():
    assert algorithms.algorithm_names() == ["appo", "collab", "grpo"]
    with pytest.raises(ValueError, match="algorithm 'appo' is already registered"):
        register_algorithm("appo")(type("Other", (Algorithm,), {}))
    with pytest.raises(KeyError, match="unknown algorithm 'x'; registered: appo, collab, grpo"):
        algorithms.get_algorithm("x")


def test_default_hooks_are_the_credit_module_and_identity():
    import torch

    # two episodes of one group, one step each, returns 1 and 0: GRPO's (r - mean) / (sample std +
    # 1e-6) = +-0.5 / (sqrt(0.5) + 1e-6) = +-0.707106, the credit module's number passed through
    # unchanged (the trainer's compute_credit is all the default hook calls)
    recs = [StepRecord(group_id="g", traj_id=t, t=0, obs="o", action="a", reward=r, done=True)
            for t, r in (("a", 1.0), ("b", 0.0))]
    from agentrl import credit

    want = credit.compute("grpo", recs, gamma=0.95).step_advantages

    class Host:  # what the default hook asks of the trainer
        def compute_credit(self, records):
            res = credit.compute("grpo", records, gamma=0.95)
            return np.asarray(res.step_advantages), dict(res.diagnostics or {})

    algo = Algorithm(_cfg())
    adv, state = algo.advantages(Host(), [], recs, "s0")
    assert adv.per_record.tolist() == pytest.approx([0.707106, -0.707106], abs=1e-6) == list(want)
    assert adv.per_token == {} and state == "s0"
    inputs = {"advantages": torch.tensor([[0.5, -0.5]])}
    out, metrics = algo.loss_transform(None, torch.zeros(1, 2), inputs)
    assert out is inputs["advantages"] and metrics == {}
    assert not algo.transforms_loss and algo.extra_episodes(None, []) == []


def test_default_play_and_train_hooks_are_the_trainers_own_steps():
    # the hooks the collab plug-in overrides: by default each is the trainer's own step, so GRPO and
    # APPO runs take the same path as before the hooks existed
    calls = []

    class Host:  # what the default hooks ask of the trainer
        model = "the model"

        class _tokenizer:
            pad_token_id = 7

        def rollout(self, tasks):
            calls.append(("rollout", tasks))
            return ["ep0"]

        def episode_rows(self, episodes, credited):
            return ["row0", "row1"]

        def balance_rows(self, rows, mode):
            calls.append(("balance", rows, mode))
            return rows, "counts"

        def logps_for_loss(self, batch, mode):
            return {"old": batch["x"]}

        def groups_rows_by_length(self):
            return True

    class Branching(Algorithm):
        def extra_episodes(self, trainer, episodes):
            return ["branch of " + episodes[0]]

    host = Host()
    assert Branching(_cfg()).roll_out(host, ["t"]) == ["ep0", "branch of ep0"] and calls == [("rollout", ["t"])]
    algo = Algorithm(_cfg())
    groups = algo.row_groups(host, ["ep0"], None, "train")
    assert groups == [["row0", "row1"]]
    assert algo.balance_rows(host, [["a"], ["b", "c"]], "eval") == (["a", "b", "c"], "counts")
    assert calls[-1] == ("balance", ["a", "b", "c"], "eval")
    assert algo.pad_id(host) == 7 and algo.loss_model(host) == "the model"
    assert algo.old_logps(host, {"x": 1}, "train") == {"old": 1} and algo.regroups_micro_batches(host)
    assert algo.begin_micro_step(host, "m") == "m" and algo.end_micro_step(host) is None
    assert algo.load_checkpoint(host, "ckpt", "s0") == "s0"
    assert algo.save_checkpoint(host, "out") is None and algo.save_model(host, "out") is None
