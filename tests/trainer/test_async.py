"""Asynchronous rollouts (``rollout_mode: async``): a producer process per rank plays ahead with its
own copy of the policy (``agentrl.producer.async_source``).

Exactness first: at ``max_staleness: 0`` the run equals the synchronous one bit for bit (weights,
metrics, saved rollouts); at k = 1 every trained episode is tagged with a policy version exactly one
behind the step it trains (none in iteration 0), and the task plan the producer plays matches TRL's
own loader on every iteration. The filter and the version arithmetic have hand-worked cases.

Runtime: ~60 s on 2 cores (four short runs of the tiny model, each producer a spawned process).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentrl.producer.async_source import staleness_filter
from agentrl.producer.wire import flat_weights, unflat_weights
from agentrl.rollout.episode import Episode

ASYNC_KEYS = ("async/", "time/", "step_time", "gen/tokens_per_s")


def _run(tmp_path: Path, model_dir: str, name: str, **kw):
    from test_trainer import make_cfg, make_trainer

    d = tmp_path / name
    d.mkdir()
    cfg = make_cfg(d, model_dir, max_steps=4, save_rollouts=True, **kw)
    tr = make_trainer(cfg)
    tr.train()
    tr.save_model(cfg.output_dir)
    return Path(cfg.output_dir), tr


def _logs(tr) -> list[dict]:
    return [{k: v for k, v in h.items() if not k.startswith(ASYNC_KEYS)} for h in tr.state.log_history if "loss" in h]


def _rollouts(out: Path) -> dict[str, list[dict]]:
    return {p.name: [json.loads(x) for x in p.read_text().splitlines()] for p in sorted((out / "rollouts").glob("*"))}


def test_staleness_zero_is_the_synchronous_run_bit_for_bit(tmp_path, tiny_model_dir):
    sync_out, sync = _run(tmp_path, tiny_model_dir, "sync")
    async_out, asy = _run(tmp_path, tiny_model_dir, "async", rollout_mode="async", max_staleness=0)
    assert _logs(asy) == _logs(sync)
    assert _rollouts(async_out) == _rollouts(sync_out)
    want, got = load_file(str(sync_out / "model.safetensors")), load_file(str(async_out / "model.safetensors"))
    assert set(want) == set(got) and all(torch.equal(want[n], got[n]) for n in want)
    # the runs moved: a comparison of two untrained models would prove nothing
    from safetensors.torch import load_file as lf

    init = lf(str(Path(tiny_model_dir) / "model.safetensors"))
    assert any(not torch.equal(init[n], want[n]) for n in want if n in init)
    stale = [h["async/staleness_max"] for h in asy.state.log_history if "async/staleness_max" in h]
    assert stale == [0.0, 0.0, 0.0, 0.0]
    assert not any("correction/ess" in h for h in asy.state.log_history)  # the sampler is the learner


def test_staleness_one_trains_on_episodes_one_version_behind(tmp_path, tiny_model_dir):
    out, tr = _run(tmp_path, tiny_model_dir, "k1", rollout_mode="async", max_staleness=1)
    # iteration b is played with the weights of step max(0, b - 1): versions 0, 0, 1, 2
    versions = {p.name: {r["policy_version"] for r in rows} for p, rows in
                zip(sorted((out / "rollouts").glob("*")), _rollouts(out).values(), strict=True)}
    assert versions == {"iter_00000.jsonl": {0}, "iter_00001.jsonl": {0}, "iter_00002.jsonl": {1},
                        "iter_00003.jsonl": {2}}
    stale = [h["async/staleness_max"] for h in tr.state.log_history if "async/staleness_max" in h]
    assert stale == [0.0, 1.0, 1.0, 1.0]
    assert all(h["async/dropped_groups"] == 0.0 for h in tr.state.log_history if "async/dropped_groups" in h)
    # the rollout correction acts where the episodes are older than the learner (TRL's default
    # sequence_mask, C = 3): steps 2-4, not step 1 (version 0 = the learner's own weights)
    corrected = [h["step"] for h in tr.state.log_history if "correction/mismatch_k3" in h]
    assert corrected == [2, 3, 4]
    assert all(h["correction/mismatch_k3"] > 0 for h in tr.state.log_history if "correction/mismatch_k3" in h)


def test_the_staleness_filter_drops_whole_groups_older_than_k():
    # step 5, k = 1: group a's oldest episode is version 4 (staleness 1: kept), group b's is
    # version 3 (staleness 2: dropped with its version-4 episode), group c's is 5 (kept)
    eps = [Episode(group_id=g, traj_id=f"{g}{i}", policy_version=v)
           for i, (g, v) in enumerate([("a", 4), ("a", 4), ("b", 4), ("b", 3), ("c", 5)])]
    kept, dropped = staleness_filter(eps, step=5, k=1)
    assert [ep.traj_id for ep in kept] == ["a0", "a1", "c4"] and dropped == 1
    kept, dropped = staleness_filter(eps, step=5, k=2)
    assert len(kept) == 5 and dropped == 0


def test_weights_travel_as_one_tensor_per_dtype():
    named = [("w", torch.arange(6.0).view(2, 3)), ("b", torch.tensor([7.0])), ("i", torch.tensor([1, 2]))]
    flat = flat_weights(named)
    assert sorted(flat) == ["torch.float32", "torch.int64"]
    assert flat["torch.float32"][2].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0]
    back = unflat_weights(flat)
    assert all(torch.equal(back[n], t) for n, t in named)


def test_the_task_plan_is_trls_order(tiny_model_dir, tmp_path):
    """Every iteration's rows of three epochs as TRL's own sampler and loader deal them."""
    from test_trainer import make_cfg, make_trainer

    from agentrl.producer.plan import TaskPlan, same_rows

    cfg = make_cfg(tmp_path, tiny_model_dir, num_tasks=6, num_generations=2, per_device_train_batch_size=4,
                   max_steps=9)
    tr = make_trainer(cfg)
    plan = TaskPlan.of(tr.train_dataset, cfg, world=1)
    assert plan.iterations_per_epoch == 3  # 6 tasks, 2 distinct per iteration
    loader = tr.get_train_dataloader()
    from agentrl.trainer.tasks import EpochTaskOrder

    seen = []
    for epoch in range(3):
        EpochTaskOrder().on_epoch_begin(cfg, type("S", (), {"epoch": float(epoch)})(), None, train_dataloader=loader)
        seen += list(loader)
    assert len(seen) == 9
    for n, rows in enumerate(seen):
        assert same_rows(plan.rows(n, 0), rows), n
    # and the plan is not the identity: epochs differ
    assert [r["task_id"] for r in plan.rows(0, 0)] != [r["task_id"] for r in plan.rows(3, 0)]


@pytest.mark.parametrize("recipe", [dict(algorithm="appo", credit="appo", context_mode="trajectory", beta=0.001),
                                    dict(steps_per_generation=2)])
def test_what_cannot_play_asynchronously_is_refused_in_one_line(tmp_path, tiny_model_dir, recipe):
    from test_trainer import make_cfg

    from agentrl.recipe_file import RecipeError

    with pytest.raises(RecipeError, match="rollout_mode async") as e:
        make_cfg(tmp_path, tiny_model_dir, rollout_mode="async", **recipe)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ a producer that fails
def _faulty(tmp_path: Path, model_dir: str, name: str, **kw):
    return _run(tmp_path, model_dir, name, rollout_mode="async", max_staleness=1, algorithm="producer_faults",
                env_modules=["count_env", "producer_faults"],
                algorithm_kwargs={"marker": str(tmp_path / f"{name}.marker"), **kw.pop("fault")}, **kw)


@pytest.mark.parametrize("mode", ["die", "hang"])
def test_a_producer_that_dies_or_hangs_is_restarted_and_the_run_is_unchanged(tmp_path, tiny_model_dir, mode):
    # the restarted producer replays from the first iteration the learner has not received, on the
    # weights it kept: the run ends bit for bit as the one whose producer never failed
    ref_out, ref = _faulty(tmp_path, tiny_model_dir, "ref", fault={"at": 99})
    out, tr = _faulty(tmp_path, tiny_model_dir, mode, fault={"mode": mode, "at": 2}, async_heartbeat_s=4.0)
    assert (tmp_path / f"{mode}.marker").read_text() == mode  # the fault did happen
    assert [h["async/restarts"] for h in tr.state.log_history if "async/restarts" in h][-1] == 1.0
    assert _logs(tr) == _logs(ref)  # async/* (the restart count among them) aside
    assert _rollouts(out) == _rollouts(ref_out)
    want, got = load_file(str(ref_out / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert all(torch.equal(want[n], got[n]) for n in want)


def _train_cli(tmp_path: Path, model_dir: str, **kw) -> tuple[int, str]:
    import os
    import subprocess
    import sys

    import yaml
    from test_trainer import BASE

    here = Path(__file__).resolve().parent
    rec = tmp_path / "r.yaml"
    rec.write_text(yaml.safe_dump(dict(BASE, model_name_or_path=model_dir, output_dir=str(tmp_path / "out"),
                                       max_steps=4, rollout_mode="async", algorithm="producer_faults",
                                       env_modules=["count_env", "producer_faults"], **kw)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "agentrl.train", str(rec)], capture_output=True, text=True, env=env,
                       timeout=600)
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.startswith("agentrl train")]
    return r.returncode, "\n".join(lines)


def test_an_exception_in_the_producer_stops_the_run_in_one_line(tmp_path, tiny_model_dir):
    rc, said = _train_cli(tmp_path, tiny_model_dir, algorithm_kwargs={"mode": "raise", "at": 2,
                                                                      "marker": str(tmp_path / "m")})
    assert rc == 2
    assert said.count("\n") == 0 and "async producer (rank 0) failed: ValueError: injected producer fault" in said
    assert said.startswith("agentrl train: error:")
    # the checkpoint before the failure is there to resume from
    assert not list((tmp_path / "out").glob("checkpoint-3"))


def test_a_producer_that_keeps_dying_stops_the_run_in_one_line(tmp_path, tiny_model_dir):
    rc, said = _train_cli(tmp_path, tiny_model_dir, async_max_restarts=1,
                          algorithm_kwargs={"mode": "die", "at": 1, "always": True, "marker": str(tmp_path / "m")})
    assert rc == 2
    assert "died (exit code -9), after 1 restarts (async_max_restarts)" in said
    assert "warning: async producer (rank 0) died" in said  # the restart said so first
