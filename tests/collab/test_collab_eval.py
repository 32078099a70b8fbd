"""``agentrl eval-collab``: the full pipeline and the Solver alone per benchmark (Table 4's shape),
on a scripted policy (exact accuracies) and on a trained tiny run's saved policies."""

from __future__ import annotations

import json
from pathlib import Path

from agentrl_envs.tasks.math import MathProblem

from agentrl.collab import think_solve
from agentrl.collab.eval_cli import evaluate, main, table

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "math"


def test_scripted_accuracies_in_table_shape():
    probs = {"a": [MathProblem("1+1", "2", "a", "0"), MathProblem("2+2", "4", "a", "1")],
             "b": [MathProblem("3+3", "6", "b", "2")]}
    gold = {p.question: p.answer for ps in probs.values() for p in ps}

    def gen(role, msgs):
        # with a plan the Solver is always right; alone it is right on "1+1" only
        out = []
        for m in msgs:
            text = m[-1]["content"]
            q = next(q for q in gold if f"Problem:\n{q}" in text)
            right = "Thinker's plan" in text or q == "1+1"
            out.append("plan" if role.name == "thinker" else f"\\boxed{{{gold[q] if right else 0}}}")
        return out

    rows = evaluate(think_solve(), probs, gen)
    assert rows == {"full": {"a": 100.0, "b": 100.0, "mean": 100.0},
                    "without_thinker": {"a": 50.0, "b": 0.0, "mean": 25.0}}
    assert table(rows).splitlines()[0] == "| pipeline | a | b | mean |"


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def test_trained_run_evaluates_from_its_saved_policies(tmp_path, collab_model_dir, capsys):
    import torch
    from test_collab_trainer import build, make_cfg

    from agentrl.collab.eval_cli import load_run
    from agentrl.eval import load_policy

    # one step per role (blocks of 1): the Thinker's adapter and the Solver's both move off the base
    tr = build(make_cfg(tmp_path, collab_model_dir, collab_policies="lora", use_peft=True, max_steps=2,
                        role_block_steps=1, lora_r=4, lora_alpha=8, lora_dropout=0.0))
    tr.train()
    run = tmp_path / "final"
    tr.save_model(str(run))
    # what the eval loads is each role's trained policy, not the base model nor the other role's
    ids = torch.tensor([list(range(5, 25))])
    tr.model.eval()
    trained = {}
    for name in ("thinker", "solver"):
        with tr.policies.use(name):
            trained[name] = _logits(tr.model, ids)
    base = _logits(load_policy(collab_model_dir)[0], ids)
    _, models, _ = load_run(str(run), None, "think_solve")
    assert set(models) == {"thinker", "solver"}
    for name, other in (("thinker", "solver"), ("solver", "thinker")):
        got = _logits(models[name], ids)
        assert torch.allclose(got, trained[name], atol=1e-5), name
        assert (got - base).abs().max() > 1e-3 and (got - trained[other]).abs().max() > 1e-3, name
    rc = main(["--run", str(run), "--benchmarks", f"math500:{FIX / 'math500.parquet'}",
               "--generated", "basic_arithmetic", "--limit", "2", "--max-new-tokens", "4", "--batch", "2"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    res = json.loads((run / "eval_collab.json").read_text())
    assert res["n"] == {"math500": 2, "basic_arithmetic": 2}
    assert set(res["accuracy"]) == {"full", "without_thinker"}
    assert "| full |" in out.out and "| without_thinker |" in out.out
    rc = main(["--run", str(tmp_path), "--generated", "basic_arithmetic"])
    assert rc == 2 and "no collab.json" in capsys.readouterr().err
