"""``collab_models``: a heterogeneous pair (arXiv 2603.21563 Table 3) on two tiny models of
different widths, depths and vocabularies: the Thinker on its own model (hidden 48, 1 layer,
300 tokens), the Solver on the trainer's (hidden 32, 2 layers, 400 tokens).

Checked: each model generates and trains only its own role's turns, in its own tokenizer; the
Thinker's model equals a copy trained by hand on the micro-batches it saw (its own AdamW);
checkpoints resume exactly; the final folder holds each policy with its tokenizer; SEPO's ratings
run through each role's own model.

Runtime: ~20 s on 1 thread (10 tests, idle machine).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from test_collab_both import _spy_micro_batches
from test_collab_trainer import build, make_cfg
from transformers import AutoConfig, AutoTokenizer, TrainerCallback

from agentrl.evaluation.collab import generators, load_run, play
from agentrl.recipe_file import RecipeError


def _cfg(tmp_path, main, other, policies="full", name="out", **kw):
    lora = dict(use_peft=True, lora_r=4, lora_alpha=8, lora_dropout=0.0) if policies == "lora" else {}
    return make_cfg(tmp_path, main, name=name, collab_policies=policies, collab_models={"thinker": other}, **lora,
                    **kw)


def _weights(m):
    return {n: p.detach().clone() for n, p in m.named_parameters()}


def _changed(a, b):
    return any(not torch.equal(a[n], b[n]) for n in a)


@pytest.mark.parametrize("policies", ["full", "lora"])
def test_each_model_plays_and_trains_its_own_role(tmp_path, collab_model_dir, collab_other_model_dir, policies):
    tr = build(_cfg(tmp_path, collab_model_dir, collab_other_model_dir, policies))
    thinker = tr.algorithm.policies.role_model("thinker")
    assert tr.algorithm.policies.names == ("solver",) and thinker.model.config.hidden_size == 48
    assert thinker.model.get_input_embeddings().num_embeddings != tr.model.get_input_embeddings().num_embeddings
    ref = copy.deepcopy(thinker.model)
    seen, loss_fn = _spy_micro_batches(tr)
    snaps = [(_weights(thinker.model), _weights(tr.model))]

    class Snap(TrainerCallback):  # both models' weights after every optimizer step
        def on_step_end(self, args, state, control, **kw):
            snaps.append((_weights(thinker.model), _weights(tr.model)))

    tr.add_callback(Snap())
    tr.train()
    # blocks of 2: steps 1-2 move only the Thinker's model, steps 3-4 only the Solver's
    for k in range(1, 5):
        moved = (_changed(snaps[k - 1][0], snaps[k][0]), _changed(snaps[k - 1][1], snaps[k][1]))
        assert moved == ((True, False) if k <= 2 else (False, True)), k
    logged = [h for h in tr.state.log_history if "loss" in h]
    assert [h["collab/trained_role"] for h in logged] == [0, 0, 1, 1]
    assert all(math.isfinite(h["collab/role_model_grad_norm"]) for h in logged[:2])
    # the Thinker's rows are in its own tokenizer (its chat template, its 300 ids)
    tok = thinker.tokenizer
    for k, (_, inputs) in enumerate(seen):
        prompts = [r[:start] for r, start in zip(inputs["input_ids"], inputs["completion_start"], strict=True)]
        if k < 2:
            assert max(int(p.max()) for p in prompts) < 300
            assert all("You are the Thinker" in tok.decode(p) for p in prompts)
        else:
            assert all("You are the Solver" in tr.processing_class.decode(p) for p in prompts)
    # the Thinker's model equals a copy trained by hand on its two micro-batches
    a = tr.args
    opt = torch.optim.AdamW(ref.parameters(), lr=a.learning_rate, betas=(a.adam_beta1, a.adam_beta2),
                            eps=a.adam_epsilon, weight_decay=0.0)
    for (_, inputs), h in zip(seen[:2], logged[:2], strict=True):
        for g in opt.param_groups:
            g["lr"] = h["learning_rate"]
        loss_fn(ref, inputs).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), a.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
    want = dict(ref.named_parameters())
    # 1e-5: under LoRA, step 2's lora_A gradients are tiny (lora_B starts at 0) and Adam scales
    # them to full-size steps, so the replay's float rounding shows at up to 4e-6 (measured)
    tol = 1e-5 if policies == "lora" else 1e-6
    for n, p in thinker.model.named_parameters():
        assert torch.allclose(p, want[n], rtol=0, atol=tol), n
    # the final folder: each policy with its own config and tokenizer
    tr.save_model(str(tmp_path / "final"))
    for policy, hidden, vocab in (("thinker", 48, 300), ("solver", 32, 400)):
        d = tmp_path / "final" / "policies" / policy
        if policies == "lora":  # an adapter on the role's own base
            d = Path(json.loads((d / "adapter_config.json").read_text())["base_model_name_or_path"])
        assert AutoConfig.from_pretrained(d).hidden_size == hidden and len(AutoTokenizer.from_pretrained(d)) <= vocab
    # agentrl eval plays the saved pair through the rollout loop, each policy with its own tokenizer
    c, models, toks = load_run(str(tmp_path / "final"), None, "think_solve")
    assert len(toks["thinker"]) <= 300 < len(toks["solver"])
    (ep,) = play(c, 1, {"tasks": ["basic_arithmetic"], "size": 1}, generators(models, toks, 8, 1.0, 1.0), 4)
    assert ep.steps and ep.steps[0].info["response"] == toks["solver"].decode(ep.tokens.completion_ids,
                                                                              skip_special_tokens=True)


@pytest.mark.parametrize("policies", ["full", "lora"])
def test_resume_restores_the_role_model_and_its_optimizer(tmp_path, collab_model_dir, collab_other_model_dir,
                                                           policies):
    ref = build(_cfg(tmp_path, collab_model_dir, collab_other_model_dir, policies, save_strategy="steps",
                     save_steps=1))
    ref.train()
    ckpt = tmp_path / "out" / "checkpoint-1"  # mid Thinker block: its model's AdamW state carries on
    assert (ckpt / "role_models" / "thinker.pt").is_file()
    res = build(_cfg(tmp_path, collab_model_dir, collab_other_model_dir, policies, overwrite_output_dir=False))
    res.train(resume_from_checkpoint=str(ckpt))
    assert res.algorithm_state == ref.algorithm_state
    pairs = [(ref.algorithm.policies.role_model("thinker").model, res.algorithm.policies.role_model("thinker").model), (ref.model, res.model)]
    for m_ref, m_res in pairs:
        for (n, p), (_, q) in zip(m_ref.named_parameters(), m_res.named_parameters(), strict=True):
            assert torch.allclose(p, q, rtol=0, atol=1e-6), n


def test_sepo_ratings_use_each_roles_model(tmp_path, collab_model_dir, collab_other_model_dir):
    tr = build(_cfg(tmp_path, collab_model_dir, collab_other_model_dir, credit="sepo", max_steps=1,
                    importance_sampling_level="sequence",
                    env_kwargs={"tasks": ["basic_arithmetic"], "size": 16, "scale": "pm1"}))
    tr.train()
    solver = [r for r in tr.last_rollout["records"] if r.info["role"] == "solver"]
    assert len(solver) == 8 and all(set(r.info["ratings"]) == {"thinker", "solver"} for r in solver)


@pytest.mark.parametrize("kw, needle", [
    (dict(collab_models={"critic": "x"}, collab_policies="full"), "collab models name role 'critic'; the roles are thinker, solver"),
    (dict(collab_models={"thinker": "x", "solver": "y"}, collab_policies="full"), "leave one role on model_name_or_path"),
    (dict(collab_models={"thinker": "x"}, collab_policies="shared"), "set policies: full (every weight)"),
    (dict(collab_models={"thinker": "x"}, collab_policies="full", role_schedule="both", steps_per_generation=2,
          per_device_train_batch_size=4), "set role_schedule: blocks"),
    (dict(collab_models={"thinker": "x"}, collab_policies="full", beta=0.01), "set beta: 0"),
])
def test_collab_models_errors_are_one_line(tmp_path, collab_model_dir, kw, needle):
    with pytest.raises(RecipeError) as e:
        make_cfg(tmp_path, collab_model_dir, **kw)
    assert needle in str(e.value) and "\n" not in str(e.value)
