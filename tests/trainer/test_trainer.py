"""AgentGRPOTrainer end to end on the tiny model and the counting env, in one process.

Runtime: ~60-90 s on 2 cores (the first test pays TRL's import).
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from agentrl.config import load_recipe
from agentrl.records import StepRecord, read_jsonl

BASE = dict(
    env_id="agentrl-test/Count-v0", env_modules=["count_env"], task_split="",
    task_options={"length": 3, "parity": True}, num_tasks=8, max_turns=6, max_prompt_tokens=512,
    num_generations=4, per_device_train_batch_size=8, max_completion_length=6, learning_rate=1e-2,
    max_steps=2, logging_steps=1, save_strategy="no", bf16=False, gradient_checkpointing=False,
    report_to="none", use_cpu=True, seed=0, disable_tqdm=True,
)


def make_cfg(tmp_path, model_dir, **kw):
    d = dict(BASE, model_name_or_path=model_dir, output_dir=str(tmp_path / "out"))
    d.update(kw)
    rec = tmp_path / "recipe.yaml"
    rec.write_text(yaml.safe_dump(d))
    return load_recipe(str(rec), [])


def make_trainer(cfg, algorithm=None):
    from agentrl.train import build_trainer

    return build_trainer(cfg, algorithm=algorithm)


def _params(model):
    return {n: p.detach().clone().float() for n, p in model.named_parameters()}


def _check_advantages_match_saved(tr, out_dir, step):
    """The rows' advantages equal agentrl.credit's output on the saved JSONL records."""
    from agentrl import credit

    recs = [StepRecord.from_dict(d) for d in read_jsonl(out_dir / "rollouts" / f"iter_{step:05d}.jsonl")]
    for r in recs:
        r.info.pop("advantage", None)
    res = credit.compute("grpo", recs, gamma=0.95)
    expected = np.asarray(res.step_advantages)
    lr = tr.last_rollout
    assert len(recs) == len(lr["records"])
    return recs, expected, lr


def test_window_mode_trains(tmp_path, tiny_model_dir):
    cfg = make_cfg(tmp_path, tiny_model_dir, save_rollouts=True)
    tr = make_trainer(cfg)
    before = _params(tr.model)
    tr.train()
    losses = [h["loss"] for h in tr.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(float(x)) for x in losses)
    after = _params(tr.model)
    assert any(not torch.equal(before[n], after[n]) for n in before), "no parameter changed"
    recs, expected, lr = _check_advantages_match_saved(tr, tmp_path / "out", step=1)
    # 8 rollouts x 3 steps (length 3; parity variant: every response counts) = 24 window rows
    assert len(recs) == 24 and lr["n_real_rows"] == 24 and lr["filler"] == 0
    rows = lr["rows"]
    mask = rows["loss_mask"]
    for i in range(24):  # row i is local record i (1 process: no sampling, offset 0)
        a = rows["advantages"][i][mask[i].bool()]
        assert torch.allclose(a, torch.full_like(a, float(expected[i])), atol=1e-5)
    # GRPO by hand on the saved records: episode return standardized within its group
    assert np.abs(expected).max() > 0, "parity rewards should give groups spread"
    logs = {k for h in tr.state.log_history for k in h}
    for k in ("env/success", "env/episode_len", "env/invalid_action_rate", "env/error_episodes",
              "time/rollout_s", "time/credit_s", "time/update_s", "time/fingerprint_s", "gen/tokens_per_s",
              "env/success/len3", "time/env_s", "time/env_share", "rows/real_token_share"):
        assert k in logs, k
    from agentrl.rollout.env_pool import LocalEnvs

    player = tr.source.player
    pool = player._env_batch(player.settings(), 8)  # env_workers 0: persistent in-process envs
    assert isinstance(pool, LocalEnvs) and player._env_batch(player.settings(), 8) is pool
    pool.close()
    for h in tr.state.log_history:  # env time (resets, steps, prompts of the count env) is inside the rollout
        if "time/env_s" in h:
            assert 0 < h["time/env_s"] <= h["time/rollout_s"]
            assert h["time/env_share"] == pytest.approx(h["time/env_s"] / h["time/rollout_s"], rel=1e-6)


def test_trajectory_mode_masks_env_tokens(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    # steps_per_generation=2 with gradient_accumulation_steps=1: TRL splits one generation into
    # 2 optimizer steps, so the second is off-policy and every micro-batch needs its old log-probs
    cfg = make_cfg(tmp_path, tiny_model_dir, context_mode="trajectory", max_steps=2, save_rollouts=True,
                   per_device_train_batch_size=4, steps_per_generation=2)
    tr = make_trainer(cfg)
    tr.train()
    losses = [h["loss"] for h in tr.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(float(x)) for x in losses)
    assert len(tr._micro_batches) == 2 and all("old_logps" in mb for mb in tr._micro_batches)
    recs, expected, lr = _check_advantages_match_saved(tr, tmp_path / "out", step=0)
    rows, eps = lr["rows"], lr["episodes"]
    assert rows["completion_ids"].shape[0] == 8  # one row per episode
    k = 0
    for i, ep in enumerate(eps):
        n = ep.length
        c = rows["completion_ids"][i]
        lm = rows["loss_mask"][i]
        # loss tokens are exactly the model's tokens of each step; env tokens have mask 0
        model_tok = [t for s, e in ep.tokens.step_spans for t in ep.tokens.completion_ids[s:e]]
        assert c[lm.bool()].tolist() == model_tok
        n_c = len(ep.tokens.completion_ids)
        env_text = tok.decode(c[:n_c][~lm[:n_c].bool()])
        assert env_text.count("<|im_start|>user") == n - 1
        for (s, e), a in zip(ep.tokens.step_spans, expected[k: k + n], strict=True):
            assert torch.allclose(rows["advantages"][i][s:e], torch.full((e - s,), float(a)), atol=1e-5)
        k += n


def test_lora_trains_adapter_only(tmp_path, tiny_model_dir):
    # beta > 0 with PEFT: the reference is the base model with the adapter disabled (KL logged)
    cfg = make_cfg(tmp_path, tiny_model_dir, use_peft=True, lora_r=4, lora_alpha=8, lora_dropout=0.0,
                   max_steps=1, beta=0.04)
    tr = make_trainer(cfg)
    before = _params(tr.model)
    tr.train()
    assert all("ref_logps" in mb for mb in tr._micro_batches)
    kl = [h["kl"] for h in tr.state.log_history if "kl" in h]
    assert kl and all(math.isfinite(float(x)) for x in kl)
    after = _params(tr.model)
    lora = [n for n in before if "lora_" in n]
    base = [n for n in before if "lora_" not in n]
    assert lora and base
    assert any(not torch.equal(before[n], after[n]) for n in lora)
    assert all(torch.equal(before[n], after[n]) for n in base)


def test_fingerprints_and_extra_episodes(tmp_path, tiny_model_dir):
    """A credit module that needs fingerprints gets the layer-L prefill hidden state on every
    record; an algorithm's ``roll_out`` adds counterfactual episodes (credited like the others)."""
    from agentrl import credit
    from agentrl.algorithms import Algorithm

    fp_credit = next(n for n in credit.available() if "fingerprint" in credit.requirements(n))  # bigpo

    class Counterfactual(Algorithm):
        def roll_out(self, player, tasks):
            extra = [{"seed": 0, "options": {"length": 2, "parity": True}, "group_id": "cf", "traj_id": f"cf/{i}"}
                     for i in range(2)]
            return player.play(tasks) + player.play(extra, history_length=0)

    cfg = make_cfg(tmp_path, tiny_model_dir, credit=fp_credit, max_steps=1, fingerprint_layer=-1)
    tr = make_trainer(cfg, algorithm=Counterfactual(cfg))
    assert tr.need_fingerprint
    tr.train()
    lr = tr.last_rollout
    assert len(lr["records"]) == 8 * 3 + 2 * 2  # + the counterfactual episodes
    hidden = tr.model.config.hidden_size
    assert all(r.fingerprint is not None and len(r.fingerprint) == hidden for r in lr["records"])
    # fingerprint of record 0 = decoder block -1's output at the last prompt token, computed here
    # by an unpadded forward of the initial model (the rollout ran before the update)
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    box = {}

    def grab(module, args, output):
        box["h"] = (output[0] if isinstance(output, tuple) else output)[0, -1]

    h = ref.model.layers[-1].register_forward_hook(grab)
    ep = lr["episodes"][0]
    with torch.no_grad():
        ref(input_ids=torch.tensor([ep.tokens.prompt_ids[0]]))
    h.remove()
    assert torch.allclose(torch.tensor(ep.steps[0].fingerprint), box["h"], atol=1e-4)
    # the vLLM path's after-rollout fingerprints (chunks of per_device_train_batch_size = 8
    # prompts, one parameter gather) = the same hidden state, on the trained model now
    prompts = [p for e in lr["episodes"][:8] for p in e.tokens.prompt_ids]
    after = tr.source.player._fingerprints_after(prompts)
    assert len(prompts) == len(after) == 24
    h = tr.model.model.layers[-1].register_forward_hook(grab)
    for p, fp in zip(prompts, after, strict=True):
        with torch.no_grad():
            tr.model(input_ids=torch.tensor([p]))
        assert torch.allclose(torch.tensor(fp), box["h"], atol=1e-4)
    h.remove()


def test_recipe_errors_in_process(tmp_path, tiny_model_dir, capsys, monkeypatch):
    from agentrl.train import main

    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTRL_VLLM_VENV", str(tmp_path / "no-vllm-venv"))  # vLLM nowhere: use_vllm refused

    def run(d, extra=()):
        rec = tmp_path / "bad.yaml"
        rec.write_text(yaml.safe_dump(dict(BASE, model_name_or_path=tiny_model_dir,
                                           output_dir=str(tmp_path / "o")) | d))
        rc = main([str(rec), *extra])
        err = capsys.readouterr().err.strip().splitlines()
        return rc, err

    cases = [
        (dict(learnin_rate=0.1), (), "unknown config key 'learnin_rate'"),
        ({}, ("--histroy_length", "2"), "unknown config key 'histroy_length'"),
        (dict(env_id="agentrl/Nope-v0"), (), "agentrl/TextCraft-v0"),
        (dict(credit="nope"), (), "nope"),
        (dict(model_name_or_path="/nonexistent/model"), (), "model folder not found: /nonexistent/model"),
        # "runs/x" looks like a hub id; its existing parent folder (cwd is tmp_path) makes it local
        (dict(model_name_or_path="runs/no_such_model"), (), "model folder not found: runs/no_such_model"),
        (dict(use_vllm=True), (), "use_vllm: true needs vLLM: its CPU build's venv (make vllm-venv)"),
        (dict(context_mode="sideways"), (), "context_mode: unknown context 'sideways'; registered: window, trajectory"),
        (dict(task_options={"bogus": 1}), (), "bogus"),
        # looks like a hub id, its parent folder does not exist here, and we are offline
        (dict(model_name_or_path="models/tiny_missing"), (), "model folder not found: models/tiny_missing"),
        (dict(model_name_or_path=""), (), "model_name_or_path must be set"),
        (dict(model_name_or_path=str(tmp_path / "bad.yaml")), (), "is a file, not a model folder"),
        ({1: 2}, (), "config keys must be names"),
        # fingerprint-using credit with a layer the 2-layer model does not have: fails before training
        (dict(credit="bipace_q", fingerprint_layer=99), (), "fingerprint_layer 99 is out of range"),
        ({}, ("--resume_from_checkpoint", "true"), "no complete checkpoint-* folder in"),
        ({}, ("--resume_from_checkpoint", str(tmp_path / "nope")), "is not a checkpoint folder"),
    ]
    for d, extra, needle in cases:
        rc, err = run(d, extra)
        assert rc == 2, (d, err)
        assert len(err) == 1 and needle in err[0], (d, err)
    rc = main([str(tmp_path / "missing.yaml")])
    assert rc == 2 and "recipe not found" in capsys.readouterr().err


def test_check_recipe_cli_forms(tmp_path, tiny_model_dir, capsys):
    from agentrl.train import check_main, resume_target

    rec = tmp_path / "r.yaml"
    rec.write_text(yaml.safe_dump(dict(BASE, model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "o"))))
    # TrlParser accepts dashed names; so does our unknown-key check
    assert check_main([str(rec), "--learning-rate", "1e-5"]) == 0
    assert "recipe OK" in capsys.readouterr().out
    assert check_main([]) == 2 and "usage: agentrl check-recipe" in capsys.readouterr().err
    assert resume_target("false", str(tmp_path)) is None and resume_target(None, str(tmp_path)) is None
    ck = tmp_path / "o" / "checkpoint-7"
    ck.mkdir(parents=True)
    (ck / "trainer_state.json").write_text('{"global_step": 7}')  # a complete checkpoint's (checkpoints.py)
    assert resume_target("true", str(tmp_path / "o")) == str(ck)
    assert resume_target(str(ck), str(tmp_path)) == str(ck)


def test_recipe_env_block_is_exported_before_torch_loads(tmp_path, tiny_model_dir):
    # huggingface_hub and torch read HF_HUB_OFFLINE / OMP_NUM_THREADS once, at import
    rec = tmp_path / "r.yaml"
    rec.write_text(yaml.safe_dump(dict(BASE, model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "o"),
                                       env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})))
    here = str(Path(__file__).parent)
    code = (f"import sys; sys.path.insert(0, {here!r}); from agentrl.train import _load; _load({str(rec)!r}, []); "
            "import huggingface_hub.constants as c, torch; print(c.HF_HUB_OFFLINE, torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "OMP_NUM_THREADS")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                       cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split()[-2:] == ["True", "1"]
    # a variable the caller set keeps the caller's value (the recipe's env gives defaults)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**env, "OMP_NUM_THREADS": "2"}, cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split()[-2:] == ["True", "2"]


def test_env_workers_give_the_in_process_rollouts(tmp_path, tiny_model_dir):
    """env_workers: 2 plays the same episodes as the in-process path (same seed, same records),
    and the pool lives for the run: made once, closed when training ends."""
    runs = {}
    for w in ("0", "2"):
        (tmp_path / f"w{w}").mkdir()
        cfg = make_cfg(tmp_path / f"w{w}", tiny_model_dir, save_rollouts=True, env_workers=w, max_steps=2)
        tr = make_trainer(cfg)
        tr.train()
        runs[w] = [[(d["traj_id"], d["t"], d["action"], d["reward"], d["valid"]) for d in
                    read_jsonl(tmp_path / f"w{w}" / "out" / "rollouts" / f"iter_{s:05d}.jsonl")] for s in (0, 1)]
        assert getattr(tr, "_workers", None) is None  # closed at the end of train()
    assert runs["0"] == runs["2"] and len(runs["0"][0]) > 0


def test_step_timings_add_up(tmp_path, tiny_model_dir):
    # 4 micro-steps per optimizer step: time/update_s is all four (it once logged one), and the
    # parts of a step add up to TRL's step_time (the rest: metrics, rollout files, task rows)
    cfg = make_cfg(tmp_path, tiny_model_dir, per_device_train_batch_size=2, gradient_accumulation_steps=4,
                   steps_per_generation=4, max_steps=2, beta=0.04)
    tr = make_trainer(cfg)
    tr.train()
    logs = [h for h in tr.state.log_history if "step_time" in h]
    assert len(logs) == 2
    for h in logs:
        parts = h["time/rollout_s"] + h["time/credit_s"] + h["time/rows_s"] + h["time/logps_s"] + h["time/update_s"]
        assert h["time/logps_s"] > 0 and h["time/update_s"] > 0
        assert parts == pytest.approx(h["step_time"], rel=0.05), (parts, h)
