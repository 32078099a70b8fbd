"""APPO end to end: the CPU recipe (recipes/appo/cpu/appo_toolreason_tiny_appo.yaml) on the real
ToolReason env and a real tiny model warm-started on the env's expert (agentrl.benchmarks.appo_warm),
2 training steps, then 2 more resumed from the checkpoint. Checks: branches are generated from the
chosen tokens, the rows' advantages are Eq. 6's (worked out here from the saved records), Eq. 7's
weight is applied in the loss, the checkpoint resumes. Runtime: ~3-4 min on a loaded 2-core
machine (~90 s of it the warm start).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from agentrl.config import load_recipe
from agentrl.credit import appo as appo_credit
from agentrl.records import read_jsonl

RECIPE = str(Path(__file__).resolve().parents[2] / "recipes/appo/cpu/appo_toolreason_tiny_appo.yaml")


@pytest.fixture(scope="module")
def warm_dir(tmp_path_factory):
    from agentrl.benchmarks.appo_warm import warm_tiny_model

    return str(warm_tiny_model(tmp_path_factory.mktemp("appo") / "tiny"))


def _trainer(warm_dir, out, *extra):
    from agentrl.train import build_trainer

    cfg = load_recipe(RECIPE, ["--model_name_or_path", warm_dir, "--output_dir", str(out), "--save_rollouts", "true",
                               "--disable_tqdm", "true", *extra])
    return build_trainer(cfg)


def _hand_group_relative(values, groups):
    """(R - mean) / (population std + 1e-6) per group, 0 for zero spread (Eq. 6's inner term)."""
    out = np.zeros(len(values))
    for g in set(groups):
        idx = [i for i, x in enumerate(groups) if x == g]
        r = np.asarray(values, dtype=float)[idx]
        sd = r.std()
        out[idx] = 0.0 if sd == 0 else (r - r.mean()) / (sd + 1e-6)
    return out


def test_appo_recipe_end_to_end_and_resume(tmp_path, warm_dir):
    from agentrl.algorithms.appo import Appo

    out = tmp_path / "run"
    tr = _trainer(warm_dir, out)
    assert isinstance(tr.algorithm, Appo)
    tr.train()
    assert tr.state.global_step == 2 and (out / "checkpoint-2").is_dir()
    la, lr = tr.algorithm.last_branching, tr.last_rollout
    parents = [ep for ep in lr["episodes"] if "#b" not in ep.traj_id]
    branches = la["branches"]
    assert len(parents) == 8

    # --- branch points: B = 1 per rollout; at the first iteration pi_theta = pi_ref, so Omega is 1
    # everywhere and each rollout's point is its highest-entropy eligible token (earliest on ties)
    st = la["stats"]
    assert np.all(la["omega"] == 1.0)
    with_tokens = [n for n in range(8) if st["eligible"][n].any()]
    assert list(la["rows"]) == with_tokens
    for n, pos in zip(la["rows"], la["pos"], strict=True):
        h = np.where(st["eligible"][n], st["entropy"][n], -np.inf)
        assert pos == int(np.argmax(h))
        assert parents[n].tokens.env_mask[pos] == 1  # a model token, never a tool result
    # --- branches: one per point, resumed from the parent's prompt + completion[:pos+1]
    assert len(branches) == len(with_tokens)
    for b, n, pos in zip(branches, la["rows"], la["pos"], strict=True):
        assert b.traj_id.startswith(parents[n].traj_id + "#b") and b.group_id == parents[n].group_id + "#branch"
        assert b.tokens.completion_ids[:pos + 1] == parents[n].tokens.completion_ids[:pos + 1]
        assert b.error is None and b.steps and all(r.info["branch_pos"] == pos for r in b.steps)
    assert tr.last_rollout["n_real_rows"] == 8  # branches add no rows

    # --- Eq. 6 from the saved records: tokens up to each branch point get the average of the
    # parent's and its branch's group-relative outcome, later tokens the parent's alone
    recs = list(read_jsonl(out / "rollouts" / "iter_00000.jsonl"))
    ret, gid, info = defaultdict(float), {}, {}
    for r in recs:
        ret[r["traj_id"]] += r["reward"]
        gid[r["traj_id"]], info[r["traj_id"]] = r["group_id"], r["info"]
    init = [t for t in ret if "branch_parent" not in info[t]]
    brs = [t for t in ret if "branch_parent" in info[t]]
    # a branch's records start at its branch step k; its return adds the parent's shaped rewards
    # of steps 0..k-1 (valid_action_reward pays them), written by the trainer into its info
    for b in brs:
        k = min(r["t"] for r in recs if r["traj_id"] == b)
        prefix = sum(r["reward"] for r in recs if r["traj_id"] == info[b]["branch_parent"] and r["t"] < k)
        assert info[b]["branch_prefix_return"] == pytest.approx(prefix)
        ret[b] += prefix
    a_init = dict(zip(init, _hand_group_relative([ret[t] for t in init], [gid[t] for t in init]), strict=True))
    a_br = dict(zip(brs, _hand_group_relative([ret[t] for t in brs], [gid[t] for t in brs]), strict=True))
    assert any(a != 0 for a in a_init.values()), "the shaped rewards should give some group spread"
    rows = lr["rows"]
    for i, ep in enumerate(parents):
        mask = np.asarray(ep.tokens.env_mask, dtype=bool)
        adv = rows["advantages"][i][: len(mask)].numpy()
        want = np.full(len(mask), a_init[ep.traj_id])
        for b in brs:
            if info[b]["branch_parent"] == ep.traj_id:
                p = info[b]["branch_pos"]
                want[: p + 1] = 0.5 * (a_init[ep.traj_id] + a_br[b])
        np.testing.assert_allclose(adv[mask], want[mask], atol=1e-5)

    # --- Eq. 7 inside the loss (the last micro-batch: off-policy, old log-probs from the rollout)
    fut = tr.last_loss.debug
    kw = tr.algorithm.kwargs
    f = appo_credit.future_weight(appo_credit.future_kl(fut["logps"], fut["old_logps"], fut["mask"], 2 ** (-1 / 64)), 0.2, True)
    ratio = np.exp(fut["logps"] - fut["old_logps"])
    np.testing.assert_allclose(fut["weighted"], appo_credit.future_aware_advantages(fut["advantages"], f, ratio, 1.0, 6.0),
                               atol=1e-6)
    assert kw["b"] == 1.0 and np.all(f[fut["mask"]] >= 1.0)
    m = fut["mask"] & (fut["advantages"] != 0) & (ratio <= 6.0)
    assert m.any() and np.all(np.abs(fut["weighted"][m]) >= 2 * np.abs(fut["advantages"][m]) - 1e-6)
    logs = {k for h in tr.state.log_history for k in h}
    for k in ("appo/branch_points_per_rollout", "appo/entropy_chosen", "appo/entropy_all", "appo/omega_chosen",
              "appo/omega_all", "appo/branch_outcome_differs", "appo/tool_calls_per_rollout",
              "appo/format_error_rate", "appo/future_weight_mean", "time/branch_rollout_s"):
        assert k in logs, k

    # --- resume from checkpoint-2 for 2 more steps: the second iteration's Omega compares a
    # policy that has moved with the reference, so it is no longer flat
    tr2 = _trainer(warm_dir, out, "--max_steps", "4")
    tr2.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert tr2.state.global_step == 4 and (out / "checkpoint-4").is_dir()
    om, mm = tr2.algorithm.last_branching["omega"], tr2.algorithm.last_branching["stats"]["model_mask"]
    assert np.any(om[mm] != 1.0)
    assert np.all(om[~mm] == 1.0)  # env tokens and padding carry no Omega
