"""``producer_mode: continuous`` (agentrl/producer/continuous.py) in a real asynchronous run of the
tiny model: every iteration's episodes arrive once each (none lost, none played twice, across
the over-provisioned iterations started early), every turn records the version that generated it,
no span is older than ``max_staleness``, and the weights move. The mode is refused in one line
for an algorithm with its own ``roll_out``. A run killed mid-episode resumes the episodes the
checkpoint held in flight (slow).

Runtime: ~60 s on 2 cores (one 4-step run, its producer a spawned process); the slow test ~4 min.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_continuous_producer_delivers_every_episode_once_with_per_span_versions(tmp_path, tiny_model_dir):
    from test_trainer import make_cfg, make_trainer

    cfg = make_cfg(tmp_path, tiny_model_dir, max_steps=4, save_rollouts=True, rollout_mode="async",
                   max_staleness=1, producer_mode="continuous", producer_overprovision=1)
    tr = make_trainer(cfg)
    tr.train()
    out = Path(cfg.output_dir)
    files = sorted((out / "rollouts").glob("iter_*.jsonl"))
    assert [p.name for p in files] == [f"iter_{b:05d}.jsonl" for b in range(4)]
    n = None
    for b, p in enumerate(files):
        rows = [json.loads(x) for x in p.read_text().splitlines()]
        by_traj: dict[str, list[int]] = {}
        for r in rows:
            by_traj.setdefault(r["traj_id"], []).append(r["t"])
            # iteration b's turns: generated at version >= b - 1 (its submission waits for it) and
            # never ahead of the learner's step b
            assert max(0, b - 1) <= r["policy_version"] <= b, (b, r["policy_version"])
            assert r["group_id"].startswith(f"s{b}:")
            assert len(r["behaviour_logps"]) == len(r["action_token_ids"]) > 0
        n = len(by_traj) if n is None else n
        # the lock-step source's trajectory ids of this iteration, each once, its steps 0..L-1 once
        assert sorted(by_traj) == sorted(f"s{b}:r0:{j}" for j in range(n))
        assert all(ts == list(range(len(ts))) for ts in by_traj.values())
    logged = [h for h in tr.state.log_history if "async/staleness_max" in h]
    assert len(logged) == 4 and all(h["async/staleness_max"] <= 1.0 for h in logged)
    assert all(h["async/dropped_groups"] == 0.0 for h in logged)
    # over-provisioning 1 at k = 1: iterations 0 and 1 both need version 0, so both start at once
    # and when iteration 0 leaves, iteration 1's groups (submitted, not delivered) are carried over
    groups_1 = {json.loads(x)["group_id"] for x in files[1].read_text().splitlines()}
    assert logged[0]["async/carried_groups"] == len(groups_1) > 0
    # the generate counters are shared by the iterations in flight: the tokens land in some batch
    assert sum(h["gen/tokens_per_s"] for h in logged) > 0
    print("continuous: mixed-version episode share per step",
          [h["async/mixed_version_episodes_frac"] for h in logged])


def test_continuous_is_refused_for_an_algorithm_with_its_own_roll_out(tmp_path, tiny_model_dir):
    from test_trainer import make_cfg

    from agentrl.algorithms import algorithm_name, get_algorithm
    from agentrl.algorithms.base import async_refusal

    cfg = make_cfg(tmp_path, tiny_model_dir, rollout_mode="async", producer_mode="continuous")
    plain = get_algorithm(algorithm_name(cfg))
    own = type("OwnRollOut", (plain,), {"roll_out": lambda self, player, tasks: player.play(tasks)})
    why = async_refusal(cfg, own(cfg))
    assert why is not None and "producer_mode continuous plays tasks only" in why
    assert async_refusal(cfg, plain(cfg)) is None


@pytest.mark.parametrize("bad", ["{producer_mode: sometimes}", "{producer_overprovision: -1}"])
def test_bad_producer_keys_are_refused(tmp_path, tiny_model_dir, bad):
    import yaml
    from test_trainer import make_cfg

    from agentrl.recipe_file import RecipeError

    with pytest.raises((RecipeError, SystemExit, ValueError)):
        make_cfg(tmp_path, tiny_model_dir, **yaml.safe_load(bad))


@pytest.mark.slow
def test_a_continuous_run_killed_mid_episode_resumes_its_episodes_in_flight(tmp_path):
    """TextCraft (snapshot envs) on the tiny model, partial rollouts (k = 1, over-provisioned), killed
    by SIGKILL in a save (checkpoint 2 in place), in a step and while the learner waits for a batch
    still in play, then ``--resume_from_checkpoint auto``: every step is logged once, every
    iteration's rollouts hold its trajectories once each, and each episode the checkpoint held in
    flight goes on from it (its first turns in the trained rollouts are the checkpoint's: tokens,
    behaviour log-probs, versions). The resume matrix's ``continuous_*`` cells do the same on the
    counting env (replay envs)."""
    from conftest import COUNT_CORPUS
    from test_resume_matrix import COUNT, Cell, run_cell

    from agentrl.models import build_tiny_model

    model = str(build_tiny_model(tmp_path / "tiny", texts=COUNT_CORPUS, vocab_size=400, hidden_size=32,
                                 num_layers=2, num_heads=2, num_kv_heads=1))
    recipe = dict(COUNT, env_id="agentrl/TextCraft-v0", env_modules=[], task_split="train", task_options=None,
                  env_kwargs={"prompt_style": "compact"}, max_turns=4, max_prompt_tokens=1024,
                  rollout_mode="async", max_staleness=1, producer_mode="continuous", producer_overprovision=1)
    checked = run_cell("textcraft_continuous", Cell(recipe, [("before_rotate", 2), ("mid_step", 3), ("mid_wait", 2)],
                                                    exact=False), tmp_path, model)
    print("turns of episodes in flight continued after each resume:", checked)
    assert sum(checked) > 0  # some checkpoint held episodes mid-way (timing decides which)
