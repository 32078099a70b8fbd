"""The algorithm registry (agentrl/algorithms): which plug-in a recipe selects, duplicate names
refused, and the default hooks on a hand-built batch. Runtime: ~1 s (no model)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentrl import algorithms
from agentrl.algorithms import Algorithm, algorithm_name, register_algorithm
from agentrl.records import StepRecord


def _cfg(**kw):
    base = dict(collab=None, credit="grpo", credit_kwargs=None, gamma=0.95, algorithm=None, algorithm_kwargs=None,
                loss_type="dapo")
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize("kw, name", [
    ({}, "grpo"),
    ({"credit": "gigpo"}, "grpo"),  # any per-record credit module: the default algorithm
    ({"credit": "appo"}, "grpo"),  # the credit name selects nothing (an old recipe is read first: below)
    ({"algorithm": "appo", "credit": "appo"}, "appo"),  # named: the recipe's choice
    ({"algorithm": "grpo", "credit": "appo"}, "grpo"),
])
def test_the_algorithm_key_alone_selects_the_algorithm(kw, name):
    assert algorithm_name(_cfg(**kw)) == name
    assert algorithms.for_config(_cfg(**kw)).name == name


@pytest.mark.parametrize("data, overrides, algorithm, kwargs, note", [
    # no algorithm named: the credit that used to select one is read as that algorithm
    ({"credit": "appo"}, [], "appo", None, "credit: appo no longer selects the algorithm; read as algorithm: appo"),
    ({"credit": "ccpo"}, [], "collab", None, "credit: ccpo no longer selects the algorithm; read as algorithm: collab"),
    # APPO's settings in credit_kwargs (an older APPO recipe) move to its algorithm_kwargs, gamma stays
    ({"algorithm": "appo", "credit": "appo", "credit_kwargs": {"budget": 8, "b": 0.0}}, [], "appo",
     {"budget": 8, "b": 0.0}, "budget, b are now kwargs of algorithm: appo (algorithm_kwargs), not of credit_kwargs"),
    ({"credit": "appo"}, ["--credit_kwargs", '{"scope": "prompt"}'], "appo", {"scope": "prompt"},
     "read as algorithm: appo (name it in the recipe); scope is now kwargs of algorithm: appo"),
    # named, or nothing to infer: read as written, no note
    ({"algorithm": "grpo", "credit": "appo"}, [], "grpo", None, None),
    ({"credit": "gigpo", "credit_kwargs": {"budget": 8}}, [], None, None, None),
    ({"credit": "appo"}, ["--algorithm", "grpo", "--task_seeds", "7", "3"], None, None, None),  # the parser's
])
def test_an_older_recipe_is_read_in_todays_convention_with_a_note(data, overrides, algorithm, kwargs, note):
    from agentrl.config.upgrade import read_old_recipe

    out, rest, said = read_old_recipe(data, overrides)
    assert out.get("algorithm") == algorithm
    # a key read here leaves the command line (its value is in the recipe now); the rest is untouched
    assert rest == ([] if "--credit_kwargs" in overrides else overrides)
    assert (out.get("algorithm_kwargs") or None) == kwargs
    assert "gamma" not in (out.get("algorithm_kwargs") or {})
    if note is None:
        assert said is None
    else:
        assert said.startswith("note: ") and note in said and said.endswith("; read as such") and "\n" not in said


def test_a_collaboration_credit_under_another_algorithm_is_refused():
    from agentrl.recipe_file import RecipeError

    with pytest.raises(RecipeError, match="credit 'ccpo' credits the roles of a collaboration: set algorithm: collab"):
        algorithms.check(_cfg(algorithm="grpo", credit="ccpo"))


def test_duplicate_names_are_refused(monkeypatch):
    from agentrl.algorithms import base

    for name, cls in list(base._ALGORITHMS.items()):  # only agentrl's own: a test plug-in
        if not cls.__module__.startswith("agentrl."):  # (tests/trainer/faults.py) may be loaded
            monkeypatch.delitem(base._ALGORITHMS, name)
    assert algorithms.algorithm_names() == ["appo", "collab", "grpo"]
    with pytest.raises(ValueError, match="algorithm 'appo' is already registered"):
        register_algorithm("appo")(type("Other", (Algorithm,), {}))
    with pytest.raises(ValueError, match="^unknown algorithm 'x'; registered: grpo, appo, collab$"):
        algorithms.get_algorithm("x")
    with pytest.raises(ValueError, match=r"^unknown algorithm 'apo' \(did you mean 'appo'\?\); registered: "):
        algorithms.get_algorithm("apo")


def test_default_hooks_are_the_credit_module_and_the_recipes_loss():
    # two episodes of one group, one step each, returns 1 and 0: GRPO's (r - mean) / (sample std +
    # 1e-6) = +-0.5 / (sqrt(0.5) + 1e-6) = +-0.707106, the credit module's number passed through
    # unchanged (``agentrl.credit.compute`` is all the default hook calls)
    recs = [StepRecord(group_id="g", traj_id=t, t=0, obs="o", action="a", reward=r, done=True)
            for t, r in (("a", 1.0), ("b", 0.0))]
    from agentrl import credit

    want = credit.compute("grpo", recs, gamma=0.95).step_advantages

    algo = Algorithm(_cfg())
    adv, state = algo.advantages([], recs, "s0")
    assert adv.per_record.tolist() == pytest.approx([0.707106, -0.707106], abs=1e-6) == list(want)
    assert adv.per_token == {} and state == "s0"
    assert algo.loss(_cfg(loss_type="bnpo")) == ("bnpo", {})


def test_the_interface_is_small():
    # at most ten hooks a new algorithm may override; where rows train is the runner's job
    hooks = sorted(n for n, v in vars(Algorithm).items() if callable(v) and not n.startswith("_"))
    assert hooks == ["advantages", "bind", "check", "loss", "metric_episodes", "metrics", "roll_out", "runner",
                     "shape_rewards"]


def test_algorithm_kwargs_are_checked_against_the_declared_params():
    from agentrl.registry import Param

    class Tempered(Algorithm):
        params = {"temperature": Param(1.0, "a number", "float", lo=0.0)}

    Tempered.name = "tempered"
    assert Tempered(_cfg(algorithm_kwargs={"temperature": 2})).kwargs == {"temperature": 2.0}
    assert Tempered(_cfg(algorithm_kwargs=None)).kwargs == {"temperature": 1.0}
    with pytest.raises(ValueError, match=r"algorithm 'tempered' has no kwarg 'temp' \(did you mean 'temperature'\?\) \(its kwargs: temperature\)"):
        Tempered(_cfg(algorithm_kwargs={"temp": 2}))
    with pytest.raises(ValueError, match=r"algorithm 'tempered': kwarg temperature=-1.0 must be >= 0.0"):
        Tempered(_cfg(algorithm_kwargs={"temperature": -1}))


def test_a_new_algorithm_with_its_own_loss_is_one_file_and_a_recipe(tmp_path, tiny_model_dir, monkeypatch):
    # tests/fixtures/plugins/sign_pg.py registers the algorithm and its loss; the recipe names them
    from pathlib import Path

    import torch

    from agentrl.config import load_recipe
    from agentrl.train import build_trainer
    from agentrl.trainer.logprobs import completion_logps

    plugins = Path(__file__).resolve().parent.parent / "fixtures" / "plugins"
    monkeypatch.syspath_prepend(str(plugins))
    cfg = load_recipe(str(plugins / "sign_pg.yaml"), ["--model_name_or_path", tiny_model_dir,
                                                        "--output_dir", str(tmp_path / "out")])
    tr = build_trainer(cfg)
    assert type(tr.algorithm).__name__ == "SignPG" and tr.loss_name == "sign_pg"
    assert tr.loss_options == {"scale": 0.5}
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    tr.train()
    assert any(not torch.equal(before[n], p) for n, p in tr.model.named_parameters())
    # its loss through the trainer on a hand-built micro-batch: -0.5 * sum(sign(A) logp mask) / tokens,
    # tokens = the 3 loss tokens (1 process, one micro-step per optimizer step)
    from agentrl.rollout.contexts import Row
    from agentrl.rollout.rows import pack_rows

    mb = pack_rows([Row([5, 6], [8, 9], [1, 1], [0.7, 0.7]), Row([7], [11, 12], [1, 0], [-0.2, -0.2])],
                   tr.processing_class.pad_token_id)
    mb["num_items_in_batch"] = torch.tensor(3.0)
    tr.model.train()
    with torch.no_grad():
        logp = completion_logps(tr.model, mb)[0]
        got = tr._compute_loss(tr.model, mb)
    want = -0.5 * (logp[0, 0] + logp[0, 1] - logp[1, 0]) / 3
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    assert "sign_pg/positive" in {k for h in tr.state.log_history for k in h}
