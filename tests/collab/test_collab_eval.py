"""``agentrl eval`` on a collaboration run: the full pipeline and the Solver alone per benchmark
(Table 4's shape), played through the training rollout loop; on a scripted policy (exact
accuracies) and on a trained tiny run's saved policies."""

from __future__ import annotations

import json
from pathlib import Path

from agentrl.collab import think_solve
from agentrl.evaluation.cli import main
from agentrl.evaluation.collab import benchmark_envs, evaluate, table

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "math"


def _problems(env_kwargs):
    from agentrl_envs.probe import make_env

    env = make_env("agentrl/MathAnswer-v0", env_kwargs)
    try:
        return env.unwrapped.problems("valid")
    finally:
        env.close()


def test_scripted_accuracies_in_table_shape(collab_model_dir):
    from transformers import AutoTokenizer

    from agentrl.rollout.prompts import encode

    tok = AutoTokenizer.from_pretrained(collab_model_dir)
    envs = benchmark_envs(f"math500:{FIX / 'math500.parquet'}", "basic_arithmetic", limit=2, seed=0)
    probs = {b: _problems(kw) for b, kw in envs.items()}
    assert [len(v) for v in probs.values()] == [2, 2]
    gold = {p.question: p.answer for ps in probs.values() for p in ps}
    alone_right = {ps[0].question for ps in probs.values()}  # the Solver alone: right on each first problem

    def scripted(role):
        def generate(prompts):
            out = []
            for ids in prompts:
                text = tok.decode(ids)
                q = next(q for q in gold if f"Problem:\n{q}" in text)
                right = "Thinker's plan" in text or q in alone_right
                reply = "plan" if role == "thinker" else f"\\boxed{{{gold[q] if right else 0}}}"
                out.append(encode(tok, reply) + [tok.eos_token_id])
            return out
        return generate

    # one policy per role, each a run_episodes generator (token ids in, token ids out)
    c = think_solve()
    pols = {r.policy: (scripted(r.name), tok) for r in c.roles}
    assert len(pols) == 2
    rows, counts = evaluate(c, envs, pols, batch=2)
    # full: every problem right; alone: 1 of 2 in each benchmark -> 50, mean 50
    assert counts == {"math500": 2, "basic_arithmetic": 2}
    assert rows == {"full": {"math500": 100.0, "basic_arithmetic": 100.0, "mean": 100.0},
                    "without_thinker": {"math500": 50.0, "basic_arithmetic": 50.0, "mean": 50.0}}
    assert table(rows).splitlines()[0] == "| pipeline | math500 | basic_arithmetic | mean |"


def test_one_door_picks_the_collaboration_mode(capsys, tmp_path):
    # collaboration flags on a folder without collab.json: the collaboration half answers, one line
    assert main(["--checkpoint", str(tmp_path), "--generated", "basic_arithmetic"]) == 2
    assert "no collab.json" in capsys.readouterr().err
    assert main(["--checkpoint", "a", "--checkpoint", "b", "--benchmarks", "math500"]) == 2
    assert "evaluated alone" in capsys.readouterr().err
    assert main([]) == 2 and "name a --checkpoint" in capsys.readouterr().err
    from agentrl.cli import main as cli_main

    assert cli_main(["eval-collab", "--run", str(tmp_path)]) == 2
    assert "is now `agentrl eval`" in capsys.readouterr().err


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def test_trained_run_evaluates_from_its_saved_policies(tmp_path, collab_model_dir, capsys):
    import torch
    from test_collab_trainer import build, make_cfg

    from agentrl.evaluation.checkpoint import load_policy
    from agentrl.evaluation.collab import load_run

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
        with tr.algorithm.policies.use_policy(name):
            trained[name] = _logits(tr.model, ids)
    base = _logits(load_policy(collab_model_dir)[0], ids)
    _, models, _ = load_run(str(run), None, "think_solve")
    assert set(models) == {"thinker", "solver"}
    for name, other in (("thinker", "solver"), ("solver", "thinker")):
        got = _logits(models[name], ids)
        assert torch.allclose(got, trained[name], atol=1e-5), name
        assert (got - base).abs().max() > 1e-3 and (got - trained[other]).abs().max() > 1e-3, name
    rc = main(["--checkpoint", str(run), "--benchmarks", f"math500:{FIX / 'math500.parquet'}",
               "--generated", "basic_arithmetic", "--limit", "2", "--max-new-tokens", "4", "--batch", "2"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    res = json.loads((run / "eval_collab.json").read_text())
    assert res["n"] == {"math500": 2, "basic_arithmetic": 2}
    assert set(res["accuracy"]) == {"full", "without_thinker"}
    assert "| full |" in out.out and "| without_thinker |" in out.out
    rc = main(["--run", str(tmp_path), "--generated", "basic_arithmetic"])
    assert rc == 2 and "no collab.json" in capsys.readouterr().err
