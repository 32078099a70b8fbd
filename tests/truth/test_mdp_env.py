"""Generated MDPs: each knob does what it says, the text env plays the arrays, and every
registered step estimator runs on the sampled records."""

from __future__ import annotations

import numpy as np
import pytest
from agentrl_envs import make_env
from agentrl_envs.mdp import DISTRACTOR, INVALID, MOVE, FiniteMDPEnv, MDPConfig, family_config, generate
from gymnasium.utils.env_checker import check_env

from agentrl.credit import available, compute, requirements
from agentrl.truth.exact import TabularPolicy
from agentrl.truth.sample import sample_batch


def parents(mdp):
    """Number of distinct (state, move) pairs whose sure target is each state."""
    count = np.zeros(mdp.n_states, dtype=int)
    for s in range(mdp.n_states):
        for a in np.flatnonzero(mdp.kind[s] == MOVE):
            count[mdp.succ[s, a, mdp.prob[s, a].argmax()]] += 1
    return count


def test_recurrence_knob():
    tree = generate(MDPConfig(recurrence=0.0, trap=0.0, depth=3, moves=3), seed=1)
    live = ~tree.terminal | tree.goal
    # a tree: every state but the start has exactly one parent; 1 + 3 + 9 + 27 states per task
    assert (parents(tree)[live & (tree.depth > 0)] == 1).all()
    assert (tree.depth >= 0).sum() == 4 * (1 + 3 + 9 + 27)
    merged = generate(MDPConfig(recurrence=0.9, trap=0.0, depth=3, moves=3), seed=1)
    assert parents(merged).max() >= 2 and merged.n_states < tree.n_states


def test_action_kinds_rewards_and_slip():
    cfg = MDPConfig(distractors=2, invalid=1, penalty=0.25, step_reward=0.5, slip=0.3)
    mdp = generate(cfg, seed=2)
    live = ~mdp.terminal
    kinds = mdp.kind[live]
    assert ((kinds == MOVE).sum(1) == 3).all() and ((kinds == DISTRACTOR).sum(1) == 2).all()
    assert ((kinds == INVALID).sum(1) == 1).all()
    np.testing.assert_allclose(mdp.prob[live].sum(-1), 1.0)
    inv = mdp.kind == INVALID
    assert (mdp.base_reward[inv] == -0.25).all()
    assert (mdp.base_reward[mdp.kind == DISTRACTOR] == 0).all()
    moves = mdp.kind == MOVE
    assert np.abs(mdp.base_reward[moves]).max() <= 0.5 and np.abs(mdp.base_reward[moves]).max() > 0
    # a slipping move: 0.7 on its own target, 0.15 on each of the two others
    s = int(np.flatnonzero(live)[0])
    a = int(np.flatnonzero(mdp.kind[s] == MOVE)[0])
    assert sorted(mdp.prob[s, a]) == pytest.approx([0.15, 0.15, 0.7])
    # distractors and invalid actions stay put
    for a in np.flatnonzero(mdp.kind[s] != MOVE):
        assert mdp.succ[s, a, mdp.prob[s, a].argmax()] == s
    # action texts are distinct within a state; every task has a goal
    assert all(len(set(t)) == len(t) for t, lv in zip(mdp.action_text, live, strict=True) if lv)
    assert set(mdp.task[mdp.goal]) == set(range(cfg.tasks))


def test_alias_and_noise_words_split_text_from_state():
    mdp = generate(family_config("aliased"), seed=0)
    live = np.flatnonzero(~mdp.terminal)
    texts = [mdp.obs_text[s] for s in live]
    assert len(set(texts)) < len(texts)  # two states, one text
    plain = generate(family_config("recurrent"), seed=0)
    assert len({plain.obs_text[s] for s in np.flatnonzero(~plain.terminal)}) == int((~plain.terminal).sum())
    rng = np.random.default_rng(0)
    renders = {mdp.render(int(live[0]), rng) for _ in range(50)}
    assert len(renders) > 2  # the same state, other irrelevant words
    fps = np.array([mdp.fingerprint(int(live[0]), rng) for _ in range(50)])
    base = mdp.projection[live[0]]
    cos = fps @ base / np.linalg.norm(fps, axis=1)
    assert 0.9 < cos.min() < 1.0  # noisy, but near its state's projection (fp_noise 0.2)


def test_generation_is_deterministic_and_checked():
    a, b = generate(family_config("dense"), 7), generate(family_config("dense"), 7)
    assert a.obs_text == b.obs_text and (a.succ == b.succ).all() and (a.base_reward == b.base_reward).all()
    assert generate(family_config("dense"), 8).obs_text != a.obs_text
    for bad, msg in [({"horizon": 2, "depth": 3}, "horizon=2 must be >= depth=3"),
                     ({"slip": 1.5}, "slip=1.5 must be a probability"),
                     ({"moves": 0}, "moves=0 must be an integer >= 1"),
                     ({"colour": 1}, "unknown MDP knob(s) ['colour']")]:
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            family_config(None, **bad)
    with pytest.raises(ValueError, match="^unknown MDP family 'forest'; valid: tree, recurrent"):
        family_config("forest")
    with pytest.raises(ValueError, match="more than 50000 states"):
        generate(MDPConfig(depth=12, horizon=12, moves=3, recurrence=0.0))


def test_every_step_estimator_runs_on_sampled_records():
    mdp = generate(family_config("aliased"), 1)
    smp = sample_batch(mdp, TabularPolicy.random(mdp, 1).probs, 3, 4, np.random.default_rng(0))
    rec = smp.records[0]
    for k in ("action_token_ids", "fingerprint", "state_sig", "action_sig", "history", "penalty", "valid", "won"):
        assert rec[k] is not None, k
    assert any(not r["valid"] and r["penalty"] == 0.1 and r["reward"] <= -0.1 for r in smp.records)
    # history holds the trajectory's earlier (obs, action) pairs
    later = next(r for r in smp.records if r["t"] == 2)
    assert len(later["history"]) == 2
    for name in available("step"):
        missing = requirements(name) - {k for k, v in rec.items() if v is not None}
        assert not missing, (name, missing)
        adv = compute(name, smp.records).step_advantages
        assert adv.shape == (len(smp.records),) and np.isfinite(adv).all()


def test_env_plays_the_arrays():
    env = make_env("agentrl/FiniteMDP-v0", {"family": "stochastic", "mdp_seed": 4})
    check_env(env.unwrapped, skip_render_check=True)
    inner: FiniteMDPEnv = env.unwrapped
    obs, info = env.reset(seed=1)
    assert obs == inner.mdp.obs_text[int(inner.mdp.roots[1])] and info["state_sig"].startswith("s")
    assert set(info["admissible_actions"]) == set(inner.mdp.action_text[inner._s])
    # a malformed response: the penalty, the same state, no crash
    obs2, r, term, trunc, info = env.step("go north")
    assert r == -inner.config.penalty and not term and not info["action_valid"]
    assert obs2 == obs and info["feedback"].startswith("Invalid response")  # the state's own text again
    # an invalid action by name: rejected with the same penalty
    s = inner._s
    bad = inner.mdp.action_text[s][int(np.flatnonzero(inner.mdp.kind[s] == INVALID)[0])]
    _, r, *_ = env.step(f"<action>{bad}</action>")
    assert r == -inner.config.penalty and inner._s == s


def test_env_expert_wins_and_horizon_truncates():
    env = make_env("agentrl/FiniteMDP-v0", {"family": "recurrent", "mdp_seed": 0})
    inner = env.unwrapped
    for seed in range(4):
        env.reset(seed=seed)
        for _ in range(inner.config.depth):
            _, r, term, trunc, info = env.step(f"<action>{inner.expert_action()}</action>")
            if term:
                break
        assert term and info["won"] and r == 1.0
    env.reset(seed=0)
    s = inner._s
    stay = inner.mdp.action_text[s][int(np.flatnonzero(inner.mdp.kind[s] == DISTRACTOR)[0])]
    for t in range(inner.config.horizon):
        _, r, term, trunc, _ = env.step(f"<action>{stay}</action>")
        assert r == 0.0 and not term and trunc == (t == inner.config.horizon - 1)


def test_observation_variants_are_what_render_draws():
    mdp = generate(family_config("aliased"), 0)  # noise_words 0.5: the plain text half the time,
    # each of the 6 noise sentences 0.5 / 6 = 1/12
    np.testing.assert_allclose(mdp.obs_variant_probs(), [0.5] + [1 / 12] * 6)
    s = int(np.flatnonzero(~mdp.terminal)[0])
    texts = [mdp.variant_text(s, o) for o in range(mdp.n_obs_variants)]
    assert len(set(texts)) == 7 and texts[0] == mdp.obs_text[s]
    rng = np.random.default_rng(0)
    n = 6000
    seen = [texts.index(mdp.render(s, rng)) for _ in range(n)]  # every render is one of the variants
    assert abs(seen.count(0) / n - 0.5) < 4 * np.sqrt(0.25 / n)
    plain = generate(family_config("recurrent"), 0)
    assert plain.n_obs_variants == 1 and plain.obs_variant_probs().tolist() == [1.0]
