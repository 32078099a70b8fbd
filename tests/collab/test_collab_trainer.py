"""The collab algorithm plug-in end to end on a tiny model: Thinker -> Solver rollouts, counterfactuals, SEPO
ratings, role blocks over separate policies (full weights, LoRA), checkpoints and resume.

The env is ``parity_math`` (MathAnswer graded by answer-length parity, so a random model gets
spread rewards; see its docstring). Runtime: ~1-2 min on 2 shared cores.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
import yaml
from transformers import TrainerCallback

from agentrl import credit
from agentrl.config import load_recipe
from agentrl.recipe_file import RecipeError
from agentrl.records import StepRecord, read_jsonl

BASE = dict(env_id="agentrl-test/ParityMath-v0", env_modules=["parity_math"], task_split="",
            env_kwargs={"tasks": ["basic_arithmetic"], "size": 16}, collab="think_solve", credit="ccpo",
            role_block_steps=2, num_tasks=8, num_generations=4, per_device_train_batch_size=8,
            max_completion_length=10, learning_rate=1e-2, max_steps=4, logging_steps=1, save_strategy="no",
            bf16=False, report_to="none", use_cpu=True, seed=0, disable_tqdm=True)


def as_algorithm_kwargs(d: dict) -> dict:
    """The tests' short collab keys (``collab_policies=...``: the old top-level names) as the
    recipe writes them now: ``algorithm: collab`` and its ``algorithm_kwargs``."""
    from agentrl.collab.recipe import OLD_KEYS

    d = dict(d)
    kw = {OLD_KEYS[k]: d.pop(k) for k in list(d) if k in OLD_KEYS}
    if kw:
        d["algorithm"] = "collab"
        d["algorithm_kwargs"] = {**(d.get("algorithm_kwargs") or {}), **kw}
    return d


def make_cfg(tmp_path, model_dir, name="out", **kw):
    d = as_algorithm_kwargs(dict(BASE, model_name_or_path=model_dir, output_dir=str(tmp_path / name), **kw))
    rec = tmp_path / f"{name}.yaml"
    rec.write_text(yaml.safe_dump(d))
    return load_recipe(str(rec), [])


def build(cfg):
    from agentrl.train import build_trainer

    return build_trainer(cfg)


class PolicySnapshots(TrainerCallback):
    """Every policy's trainable tensors after each optimizer step."""

    def __init__(self, tr):
        self.tr, self.steps = tr, []

    def snap(self):
        out = {}
        for name in self.tr.algorithm.policies.names:
            with self.tr.algorithm.policies.use_policy(name):
                out[name] = {n: p.detach().clone() for n, p in self.tr.algorithm.policies.swaps.params}
        return out

    def on_step_end(self, args, state, control, **kw):
        self.steps.append(self.snap())


def _changed(a, b):
    return any(not torch.equal(a[n], b[n]) for n in a)


def _run_with_snapshots(tr):
    cb = PolicySnapshots(tr)
    before = cb.snap()
    tr.add_callback(cb)
    tr.train()
    return [before, *cb.steps]


@pytest.mark.parametrize("policies", ["full", "lora"])
def test_each_policy_changes_only_in_its_own_blocks(tmp_path, collab_model_dir, policies):
    cfg = make_cfg(tmp_path, collab_model_dir, collab_policies=policies, use_peft=policies == "lora",
                   save_rollouts=True, lora_r=4, lora_alpha=8, lora_dropout=0.0)
    tr = build(cfg)
    assert tr.algorithm.policies.names == ("thinker", "solver")
    base = {n: p.detach().clone() for n, p in tr.model.named_parameters() if not p.requires_grad}
    snaps = _run_with_snapshots(tr)
    # blocks of 2 steps, Thinker first: steps 1-2 train the Thinker, steps 3-4 the Solver
    for k in range(1, 5):
        trained = "thinker" if k <= 2 else "solver"
        other = "solver" if trained == "thinker" else "thinker"
        assert _changed(snaps[k - 1][trained], snaps[k][trained]), (k, trained)
        assert not _changed(snaps[k - 1][other], snaps[k][other]), (k, other)
    assert [h["collab/trained_role"] for h in tr.state.log_history if "loss" in h] == [0, 0, 1, 1]
    if policies == "lora":  # the shared base never moves
        assert base and all(torch.equal(p, base[n]) for n, p in tr.model.named_parameters() if n in base)
    # the last iteration: 8 collaborations, each with a Thinker, a Solver and a solo Solver turn
    lr = tr.last_rollout
    parts = [(r.info["role"], r.info["part"]) for r in lr["records"]]
    assert sorted(set(parts)) == [("solver", "joint"), ("solver", "solo"), ("thinker", "joint")]
    assert all(parts.count(p) == 8 for p in set(parts))
    solo = [r for r in lr["records"] if r.info["part"] == "solo"]
    assert all("Thinker's plan" not in tr.processing_class.decode(ep.tokens.prompt_ids)
               for ep in lr["episodes"] if ep.tokens.part == "solo") and solo
    # only the Solver's 8 turns are rows, each with its record's advantage
    rows = lr["rows"]
    assert rows["completion_ids"].shape[0] == 8
    solver_adv = [a for r, a in zip(lr["records"], lr["advantages"], strict=True)
                  if (r.info["role"], r.info["part"]) == ("solver", "joint")]
    mask = rows["loss_mask"].bool()
    got = sorted(float(rows["advantages"][i][mask[i]][0]) for i in range(8) if mask[i].any())
    assert got == pytest.approx(sorted(solver_adv), abs=1e-6)
    # the saved records give the same advantages through agentrl.credit (state: the one before)
    recs = [StepRecord.from_dict(d) for d in read_jsonl(tmp_path / "out" / "rollouts" / "iter_00003.jsonl")]
    prev = {k.split("/", 1)[1]: v for h in tr.state.log_history if h.get("step") == 3
            for k, v in h.items() if k.startswith("credit/ccpo_state/")}
    state = {}
    for k, v in prev.items():
        stream, f = k.split("/")[1:]
        state.setdefault(stream, {})[f] = v
    res = credit.compute("ccpo", recs, state=state)
    saved = np.array([d["info"]["advantage"] for d in read_jsonl(tmp_path / "out" / "rollouts" / "iter_00003.jsonl")])
    assert np.allclose(res.step_advantages, saved, atol=1e-6)
    logs = {k for h in tr.state.log_history for k in h}
    for k in ("credit/r_joint_mean", "credit/r_solo_mean", "credit/helpful_frac", "credit/redundant_frac",
              "credit/harmful_frac", "credit/thinker_reward_mean", "credit/solver_adv_std",
              "collab/counterfactual_s", "collab/counterfactual_overhead", "env/success"):
        assert k in logs, k
    tr.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "policies" / "thinker").is_dir() and (tmp_path / "final" / "collab.json").is_file()


def test_shared_policy_sepo_gspo_both_roles_every_step(tmp_path, collab_model_dir):
    # GSPO's sequence-level ratios, as Table 2 trains SEPO
    cfg = make_cfg(tmp_path, collab_model_dir, credit="sepo", role_schedule="both", max_steps=2,
                   importance_sampling_level="sequence",
                   env_kwargs={"tasks": ["basic_arithmetic"], "size": 16, "scale": "pm1"})
    tr = build(cfg)
    assert tr.algorithm.policies.names == ("shared",)
    tr.train()
    lr = tr.last_rollout
    solver = [r for r in lr["records"] if r.info["role"] == "solver"]
    assert len(solver) == 8 and all(set(r.info["ratings"]) == {"thinker", "solver"} for r in solver)
    assert lr["rows"]["completion_ids"].shape[0] == 16  # both roles train every step
    h = [h for h in tr.state.log_history if "loss" in h]
    assert len(h) == 2 and all(math.isfinite(x["loss"]) for x in h)
    # Rewards and advantages worked by hand. ParityMath's verifier: R_ver = +1 when the Solver's
    # answer has an odd number of characters, else -1. Both roles rated every collaboration (the
    # ratings ran); a random tiny model writes no valid rating, so each falls back to (0.5, 0.5)
    # and sepo_invalid_frac is 1. Then s_1 = 0.3 * 0.5 + 0.7 * 0.5 = 0.5 = s_2, w_1 = w_2 = 0.5 in
    # every rollout, the centred bonus w - mean_group(w) is 0, and both roles' rewards are R_ver.
    # Each role's advantage is (R - group mean) / (sample std + 1e-6): e.g. a group with
    # R_ver = [1, 1, 1, -1] has mean 0.5, sample std sqrt((3 * 0.25 + 2.25) / 3) = 1, so
    # A = [0.5, 0.5, 0.5, -1.5] for its Thinker turns and for its Solver turns alike.
    assert all(r.info["ratings"] == {"thinker": [0.5, 0.5, False], "solver": [0.5, 0.5, False]} for r in solver)
    assert h[-1]["credit/sepo_invalid_frac"] == 1.0
    r_ver = {r.info["collab_id"]: 1.0 if len(r.info["response"]) % 2 else -1.0 for r in solver}
    assert [r.reward for r in solver] == [r_ver[r.info["collab_id"]] for r in solver]
    want = {}
    for g in {r.group_id for r in solver}:
        ids = [r.info["collab_id"] for r in solver if r.group_id == g]
        rs = np.array([r_ver[c] for c in ids])
        want.update(zip(ids, (rs - rs.mean()) / (rs.std(ddof=1) + 1e-6), strict=True))
    got = [(r.info["role"], float(a), want[r.info["collab_id"]]) for r, a in zip(lr["records"], lr["advantages"],
                                                                               strict=True)]
    assert sorted(role for role, _, _ in got) == ["solver"] * 8 + ["thinker"] * 8
    assert all(a == pytest.approx(w, abs=1e-6) for _, a, w in got)


@pytest.mark.parametrize("policies", ["full", "lora"])
def test_resume_continues_schedule_and_ccpo_state(tmp_path, collab_model_dir, policies):
    lora = dict(use_peft=policies == "lora", lora_r=4, lora_alpha=8, lora_dropout=0.0)
    cfg = make_cfg(tmp_path, collab_model_dir, collab_policies=policies, save_strategy="steps", save_steps=1,
                   **lora)
    ref = build(cfg)
    ref.train()
    ckpt = tmp_path / "out" / "checkpoint-3"  # mid Solver block: the Solver's weights are loaded there
    saved = torch.load(ckpt / "collab_state.pt", weights_only=True)
    assert saved["policies"]["loaded"] == "solver" and saved["ccpo"]["delta"]["updates"] == 3
    cfg2 = make_cfg(tmp_path, collab_model_dir, name="out", collab_policies=policies, save_strategy="no",
                    overwrite_output_dir=False, **lora)
    res = build(cfg2)
    res.train(resume_from_checkpoint=str(ckpt))
    assert res.algorithm_state == ref.algorithm_state and res.algorithm_state.delta.updates == 4
    assert [h["collab/trained_role"] for h in res.state.log_history if "loss" in h][-1] == 1
    for name in ("thinker", "solver"):
        with ref.algorithm.policies.use_policy(name), res.algorithm.policies.use_policy(name):
            for (n, p), (_, q) in zip(ref.algorithm.policies.swaps.params, res.algorithm.policies.swaps.params, strict=True):
                assert torch.allclose(p, q, atol=1e-6), (name, n)


@pytest.mark.parametrize("kw, needle", [
    (dict(collab=None), "credit 'ccpo' credits the roles of a collaboration: set algorithm: collab, "
                        "algorithm_kwargs: {collab: think_solve}"),
    (dict(collab_policies="lora"), "set use_peft: true"),
    (dict(credit="sepo"), "set env_kwargs: {scale: pm1}"),
    (dict(collab_policies="full", role_schedule="both"), "steps_per_generation (1) must be a multiple of "
                                                         "gradient_accumulation_steps (1) x 2"),
    (dict(collab_policies="full", role_schedule="both", steps_per_generation=2, per_device_train_batch_size=4,
          save_strategy="steps", save_steps=3), "save_steps (3) must be a multiple of the optimizer steps per rollout (2)"),
    (dict(role_block_steps=3, steps_per_generation=2, per_device_train_batch_size=4), "must be a multiple of the optimizer steps"),
    (dict(collab="three_roles"), "not a built-in collaboration"),
    (dict(collab_policies="two"), "algorithm 'collab': kwarg policies='two' must be one of 'shared', 'lora', 'full'"),
    (dict(credit="grpo"), "credit must be one of shared, ccpo, ccpo_bonus, sepo"),
    (dict(credit="ccpo_bonus"), "credit 'ccpo_bonus' on 01 rewards (0 wrong, 1 right) never fires at threshold 0: "
                                "set credit_kwargs: {threshold: 0.5}"),
])
def test_recipe_errors_are_one_line(tmp_path, collab_model_dir, kw, needle):
    with pytest.raises(RecipeError) as e:
        make_cfg(tmp_path, collab_model_dir, **kw)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("credit_name", ["shared", "ccpo_bonus"])
def test_other_credit_modules_train(tmp_path, collab_model_dir, credit_name):
    kw = {"credit_kwargs": {"threshold": 0.5}} if credit_name == "ccpo_bonus" else {}  # 0/1 rewards
    cfg = make_cfg(tmp_path, collab_model_dir, credit=credit_name, max_steps=2, role_block_steps=1, **kw)
    tr = build(cfg)
    tr.train()
    h = [h for h in tr.state.log_history if "loss" in h]
    assert [x["collab/trained_role"] for x in h] == [0, 1] and all(math.isfinite(x["loss"]) for x in h)
    # the counterfactual ran exactly where the module reads it: one solo Solver turn per collaboration
    parts = Counter((r.info["role"], r.info["part"]) for r in tr.last_rollout["records"])
    solo = {("solver", "solo"): 8} if credit_name == "ccpo_bonus" else {}
    assert parts == {("thinker", "joint"): 8, ("solver", "joint"): 8, **solo}


def test_older_recipes_collab_keys_are_read_as_the_algorithms_kwargs(tmp_path, collab_model_dir, capsys):
    # the top-level keys of older recipes give the same config as algorithm: collab with its kwargs,
    # with one line saying so (the command line's spelling too)
    new = make_cfg(tmp_path, collab_model_dir, name="new", collab_policies="full", role_schedule="blocks")
    rec = tmp_path / "old.yaml"
    rec.write_text(yaml.safe_dump(dict(BASE, model_name_or_path=collab_model_dir, output_dir=str(tmp_path / "old"),
                                       collab_policies="full")))
    capsys.readouterr()
    old = load_recipe(str(rec), ["--role_schedule", "blocks"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["agentrl: note: collab, collab_policies, role_block_steps, role_schedule are now kwargs of "
                   "algorithm: collab (algorithm_kwargs: collab, policies, role_block_steps, role_schedule); "
                   "read as such"]
    assert (old.algorithm, old.algorithm_kwargs) == (new.algorithm, new.algorithm_kwargs) == (
        "collab", {"collab": "think_solve", "role_block_steps": 2, "policies": "full", "role_schedule": "blocks"})
    credit_only = tmp_path / "credit.yaml"  # a collaboration credit without a collaboration
    credit_only.write_text(yaml.safe_dump(dict(model_name_or_path=collab_model_dir, env_id=BASE["env_id"],
                                               env_modules=BASE["env_modules"], credit="ccpo",
                                               output_dir=str(tmp_path / "c"))))
    with pytest.raises(RecipeError, match="credit 'ccpo' credits the roles of a collaboration: set algorithm: collab"):
        load_recipe(str(credit_only), [])
