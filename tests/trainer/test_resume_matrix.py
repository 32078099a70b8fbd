"""The resume matrix: every kind of run killed by SIGKILL at a chosen moment and resumed with
``--resume_from_checkpoint auto`` ends as the uninterrupted run does, bit for bit (one machine,
one thread): the final weights of every policy, every logged step's metrics (timings aside), and
the saved rollouts (one file per iteration, none missing or twice, each the reference's).

One driver, one row of ``CELLS`` per cell: the recipe's changes to a base run (the counting env,
or tests/collab's Thinker -> Solver run), the kill points (``tests/trainer/faulty_train.py``: a
step's middle, inside a save, before the rename), and the launcher (one process, or 2-process
ZeRO-3 on CPU). docs/training.md's resume table lists the cells. Cells marked slow run in
``make test`` (not in ``make test-fast``).

Runtime: ~1 min per cell on 2 cores (a reference, the killed runs and their resumes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
COLLAB = HERE.parent / "collab"
VOLATILE = ("time/", "step_time", "gen/tokens_per_s", "train_runtime", "train_samples_per_second",
            "train_steps_per_second", "collab/counterfactual_s", "collab/counterfactual_cpu_s", "collab/rating_s",
            "collab/rating_cpu_s", "collab/joint_s", "collab/joint_cpu_s", "collab/counterfactual_overhead",
            "epoch")

COUNT = dict(env_id="agentrl-test/Count-v0", env_modules=["count_env"], task_split="",
             task_options={"length": 3, "parity": True}, num_tasks=8, max_turns=6, max_prompt_tokens=512,
             num_generations=2, per_device_train_batch_size=4, max_completion_length=6, learning_rate=5e-3,
             max_steps=4, logging_steps=1, save_strategy="steps", save_steps=1, bf16=False,
             gradient_checkpointing=False, report_to="none", use_cpu=True, seed=0, disable_tqdm=True,
             save_rollouts=True)
THINK_SOLVE = dict(env_id="agentrl-test/ParityMath-v0", env_modules=["parity_math"], task_split="",
                   env_kwargs={"tasks": ["basic_arithmetic"], "size": 16}, credit="ccpo", algorithm="collab",
                   num_tasks=8, num_generations=4, per_device_train_batch_size=8, max_completion_length=10,
                   learning_rate=1e-2, max_steps=6, logging_steps=1, save_strategy="steps", save_steps=1,
                   bf16=False, report_to="none", use_cpu=True, seed=0, disable_tqdm=True, save_rollouts=True)


def collab(policies: str, schedule: str, credit: str = "ccpo", **kw) -> dict:
    """A Thinker -> Solver cell: policies shared / lora / full, schedule blocks (of 2 steps) / both."""
    d = dict(THINK_SOLVE, credit=credit,
             algorithm_kwargs={"collab": "think_solve", "policies": policies, "role_schedule": schedule,
                               "role_block_steps": 2})
    if policies == "lora":
        d.update(use_peft=True, lora_r=4, lora_alpha=8, lora_dropout=0.0)
    if schedule == "both" and policies != "shared":  # role-ordered steps: 2 per rollout, saves between rollouts
        d.update(steps_per_generation=2, per_device_train_batch_size=4, save_steps=2, max_steps=8)
    if credit == "sepo":
        d["env_kwargs"] = dict(d["env_kwargs"], scale="pm1")
    d.update(kw)
    return d


@dataclass
class Cell:
    recipe: dict
    points: list[tuple[str, int]]
    """(fault point, step): killed there, resumed from the newest complete checkpoint."""
    launcher: str = "one"
    """'one' process, or 'zero3': 2 CPU processes under DeepSpeed ZeRO-3."""
    slow: bool = True
    model: str = "tiny"
    """'tiny' (the counting env's model) or 'collab' (tests/collab's)."""
    env_modules_path: list[Path] = field(default_factory=lambda: [HERE])
    exact: bool = True
    """False for runs not reproducible bit for bit (producer_mode continuous: when a version arrives
    decides which turns it plays): no reference run; ``no_episode_lost_or_twice`` checks the resume."""


CELLS = {
    # GRPO-style: window and trajectory contexts, BiPACE_Q with fingerprints, LoRA, the guard's count
    "grpo_window": Cell(COUNT, [("mid_step", 3), ("after_weights", 3)], slow=False),
    "grpo_trajectory": Cell(dict(COUNT, context_mode="trajectory"), [("before_publish", 3), ("mid_rollout", 2)]),
    "bipace_q_fingerprints": Cell(dict(COUNT, credit="bipace_q", fingerprint_layer=-1), [("mid_step", 2)]),
    "lora": Cell(dict(COUNT, use_peft=True, lora_r=4, lora_alpha=8, lora_dropout=0.0, beta=0.04),
                 [("before_publish", 3)]),
    "guard_count": Cell(dict(COUNT, env_modules=["count_env", "faults"], algorithm="faulty",
                             algorithm_kwargs={"steps": [2]}), [("mid_step", 3)], slow=False),
    # APPO: branch points, the prompt pool, its sampling
    "appo": Cell(dict(COUNT, context_mode="trajectory", algorithm="appo", credit="appo", beta=0.001,
                      algorithm_kwargs={"budget": 2, "omega_baseline": "behaviour"}),
                 [("mid_step", 2), ("mid_rollout", 1)]),
    # 2-process ZeRO-3 on CPU
    "zero3_grpo": Cell(dict(COUNT, use_cpu=False, per_device_train_batch_size=2), [("before_publish", 3)],
                       launcher="zero3"),
    # asynchronous rollouts: the producer's process, the batches a checkpoint owes the learner
    "async_k1": Cell(dict(COUNT, rollout_mode="async", max_staleness=1),
                     [("mid_step", 3), ("after_weights", 2), ("mid_wait", 2)], slow=False),
    "async_k2_bipace_q": Cell(dict(COUNT, rollout_mode="async", max_staleness=2, credit="bipace_q",
                                   fingerprint_layer=-1), [("before_publish", 2), ("mid_wait", 3)]),
    "async_lora": Cell(dict(COUNT, rollout_mode="async", use_peft=True, lora_r=4, lora_alpha=8, lora_dropout=0.0,
                            beta=0.04), [("mid_step", 2)]),
    "async_zero3": Cell(dict(COUNT, use_cpu=False, per_device_train_batch_size=2, rollout_mode="async"),
                        [("before_publish", 3)], launcher="zero3"),  # one point: the launches share a port
    # continuous producer (k = 0: episodes in flight within an iteration) and partial rollouts (k = 1,
    # over-provisioned: episodes of later iterations in flight across versions): killed in a step,
    # in a save (the checkpoint in place, older ones not rotated), and while the learner waits for
    # a batch still in play; the checkpoint's episodes in flight go on after the resume
    "continuous_k0": Cell(dict(COUNT, rollout_mode="async", max_staleness=0, producer_mode="continuous",
                               producer_overprovision=1),
                          [("mid_step", 2), ("before_rotate", 2), ("mid_wait", 3)], exact=False),
    "continuous_partial_k1": Cell(dict(COUNT, rollout_mode="async", max_staleness=1, producer_mode="continuous",
                                       producer_overprovision=1),
                                  [("mid_step", 3), ("before_rotate", 2), ("mid_wait", 2)], exact=False),
    # collaborations: every policy kind, both schedules; blocks of 2 steps are killed at each boundary
    "ccpo_shared_blocks": Cell(collab("shared", "blocks"), [("before_publish", 3), ("before_publish", 5)],
                               model="collab"),
    "ccpo_full_blocks": Cell(collab("full", "blocks"), [("before_publish", 3), ("before_publish", 5)],
                             model="collab"),
    "ccpo_lora_blocks": Cell(collab("lora", "blocks"), [("before_publish", 3), ("before_publish", 5)],
                             model="collab"),
    "ccpo_shared_both": Cell(collab("shared", "both"), [("mid_step", 3), ("mid_rollout", 2)], model="collab"),
    "ccpo_full_both": Cell(collab("full", "both"), [("before_publish", 4), ("mid_step", 5)], model="collab"),
    "ccpo_lora_both": Cell(collab("lora", "both"), [("before_publish", 4), ("mid_step", 5)], model="collab"),
    "sepo_full_blocks": Cell(collab("full", "blocks", credit="sepo"), [("before_publish", 3), ("before_publish", 5)],
                             model="collab"),
    "sepo_lora_both": Cell(collab("lora", "both", credit="sepo"), [("before_publish", 6)], model="collab"),
}


def _env(cell: Cell) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", WANDB_MODE="offline",
               HF_HUB_DISABLE_TELEMETRY="1", TRL_EXPERIMENTAL_SILENCE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(COLLAB), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _launch(cell: Cell, script: list[str]) -> list[str]:
    if cell.launcher == "one":
        return [sys.executable, *script]
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(REPO / "accelerate_configs" / "cpu_zero3.yaml"), *script]


def _recipe(tmp: Path, name: str, cell: Cell, model: str) -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(dict(cell.recipe, model_name_or_path=model, output_dir=str(tmp / name))))
    return p


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows if "loss" in r]


def _weights(out: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Every safetensors file of the final run folder (the model or adapter, each policy); under ZeRO-3
    without a 16-bit save the final folder holds DeepSpeed's shards: their fp32 weights, gathered."""
    files = [p for p in out.rglob("*.safetensors") if not any(part.startswith(("checkpoint-", ".partial"))
                                                              for part in p.relative_to(out).parts)]
    if not files and (out / "latest").is_file():
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        return {"zero3 fp32": get_fp32_state_dict_from_zero_checkpoint(str(out))}
    return {str(p.relative_to(out)): load_file(str(p)) for p in files}


def _rollouts(out: Path) -> dict[str, list]:
    return {p.name: [json.loads(x) for x in p.read_text().splitlines()] for p in sorted((out / "rollouts").glob("*"))}


def _same_run(ref: Path, out: Path, what: str) -> None:
    m_ref, m_out = _metrics(ref), _metrics(out)
    assert [r["step"] for r in m_out] == [r["step"] for r in m_ref], what  # no step missing or twice
    for a, b in zip(m_ref, m_out, strict=True):
        assert a == b, (what, a["step"], {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)})
    want, got = _weights(ref), _weights(out)
    assert want and set(got) == set(want), (what, sorted(got), sorted(want))
    for f in want:
        for n, t in want[f].items():
            assert torch.equal(got[f][n], t), (what, f, n, (got[f][n] - t).abs().max())
    assert _rollouts(out) == _rollouts(ref), what


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import importlib.util

    from conftest import COUNT_CORPUS

    from agentrl.models import build_tiny_model

    spec = importlib.util.spec_from_file_location("collab_conftest", COLLAB / "conftest.py")
    collab_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collab_conftest)
    MATH_CORPUS = collab_conftest.MATH_CORPUS

    tmp = tmp_path_factory.mktemp("matrix_models")
    kw = dict(vocab_size=400, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1)
    return {"tiny": str(build_tiny_model(tmp / "tiny", texts=COUNT_CORPUS, **kw)),
            "collab": str(build_tiny_model(tmp / "collab", texts=MATH_CORPUS, **kw))}


def no_episode_lost_or_twice(out: Path, steps: int, k: int, resumed_from: Path | None, what: str) -> int:
    """A continuous run's resume: every step logged once, every iteration's rollouts file holds its
    trajectories once each (COUNT: 4 on one rank), each with its steps 0..L-1 once and every span
    within ``max_staleness``; and each episode the resumed checkpoint held in flight goes on from
    it: its first turns in the trained rollouts are the checkpoint's (tokens, behaviour log-probs,
    versions). Returns the number of turns so checked."""
    import pickle

    logged = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()
              if x.strip() and "loss" in json.loads(x)]
    assert logged == list(range(1, steps + 1)), (what, logged)
    files = sorted((out / "rollouts").glob("iter_*.jsonl"))
    assert [p.name for p in files] == [f"iter_{b:05d}.jsonl" for b in range(steps)], what
    trained: dict[str, list[dict]] = {}
    for b, p in enumerate(files):
        by_traj: dict[str, list[dict]] = {}
        for r in (json.loads(x) for x in p.read_text().splitlines()):
            by_traj.setdefault(r["traj_id"], []).append(r)
            assert max(0, b - k) <= r["policy_version"] <= b, (what, b, r["policy_version"])
        assert sorted(by_traj) == [f"s{b}:r0:{j}" for j in range(4)], (what, b, sorted(by_traj))
        assert all([r["t"] for r in rs] == list(range(len(rs))) for rs in by_traj.values()), what
        trained.update(by_traj)
    if resumed_from is None:
        return 0
    data = pickle.loads((resumed_from / "async_producer_rank0.pkl").read_bytes())  # noqa: S301
    assert "inflight" in data, (what, "the checkpoint holds no episodes in flight")
    play = pickle.loads(data["inflight"]["play"])  # noqa: S301
    checked = 0
    for slot, _kind, _ in play["slots"]:
        if int(slot.ep.group_id.split(":")[0][1:]) >= steps:
            continue  # an iteration past the last step (over-provisioned): never trained
        rows = trained[slot.ep.traj_id]
        for rec, row in zip(slot.ep.steps, rows, strict=False):
            assert (row["action_token_ids"], row["policy_version"]) == (rec.action_token_ids, rec.policy_version), what
            assert row["behaviour_logps"] == rec.behaviour_logps, what
            checked += 1
        assert len(rows) >= len(slot.ep.steps), what
    return checked


def _resumed_from(err: str) -> Path | None:
    line = next((x for x in err.splitlines() if "resuming from " in x), "")
    return Path(line.split("resuming from ", 1)[1].split(" (")[0].strip()) if line else None


def run_cell(name: str, cell: Cell, tmp: Path, model: str) -> list[int]:
    """The cell's reference run, its killed runs (in parallel), their resumes, and the comparison;
    for a cell that is not exact, the turns of episodes in flight checked at each point."""
    env = _env(cell)
    ref = _recipe(tmp, "ref", cell, model)
    if cell.exact:
        r = subprocess.run(_launch(cell, ["-m", "agentrl.train", str(ref)]), cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, (name, r.stderr[-3000:])
    killed = {}
    for point, step in cell.points:
        rec = _recipe(tmp, f"{point}_{step}", cell, model)
        killed[(point, step)] = (rec, subprocess.Popen(_launch(cell, [str(HERE / "faulty_train.py"), point, str(step),
                                                                      str(rec)]),
                                                       cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                                       stderr=subprocess.PIPE, text=True))
    for key, (_, p) in killed.items():
        _, err = p.communicate(timeout=900)
        assert p.returncode != 0, (name, key, "the run was not killed", err[-1500:])
    resumed = {key: subprocess.Popen(_launch(cell, ["-m", "agentrl.train", str(rec), "--resume_from_checkpoint",
                                                    "auto"]), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True) for key, (rec, _) in killed.items()}
    checked = []
    for key, p in resumed.items():
        _, err = p.communicate(timeout=900)
        assert p.returncode == 0, (name, key, err[-3000:])
        assert "resuming from" in err, (name, key, err[-1500:])
        if cell.exact:
            _same_run(tmp / "ref", tmp / f"{key[0]}_{key[1]}", f"{name} {key}")
        else:
            checked.append(no_episode_lost_or_twice(tmp / f"{key[0]}_{key[1]}", cell.recipe["max_steps"],
                                                    cell.recipe["max_staleness"], _resumed_from(err), f"{name} {key}"))
    return checked


def _marks(cell: Cell) -> list:
    # a 2-process launch binds port 29500: under pytest-xdist, one at a time (tests/conftest.py)
    return ([pytest.mark.slow] if cell.slow else []) + ([pytest.mark.xdist_group("ranks")] if cell.launcher != "one" else [])


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(c)) for n, c in CELLS.items()])
def test_a_killed_run_resumes_exactly(name, tmp_path, models):
    cell = CELLS[name]
    if cell.launcher == "zero3":
        pytest.importorskip("deepspeed")
    run_cell(name, cell, tmp_path, models[cell.model])
