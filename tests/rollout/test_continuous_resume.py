"""Episodes in flight saved and resumed (``ContinuousPlay.checkpoint`` / ``resume``) on the tiny model
and TextCraft (real env, real model, the HF engine): a play stopped between two ticks and resumed
on a fresh play with fresh envs ends exactly as the uninterrupted play (every episode's tokens,
behaviour log-probs, versions, rewards and observations), whether the envs come back by snapshot
or by replaying the episode's responses; a replay that differs from the record, and an env that
can do neither, play the episode again from its reset; no episode is lost or played twice.

Runtime: ~15 s.
"""

from __future__ import annotations

import pytest
from test_continuous import TEXTCRAFT, Policy, _groups, tiny_model  # noqa: F401  (the module's fixture)

from agentrl.rollout import RolloutSettings
from agentrl.rollout.continuous import ContinuousPlay
from agentrl.rollout.env_pool import LocalEnvs

SLOTS, TURNS = 4, 4
PREFILL = "<action>get 1 oak log</action>"


@pytest.fixture(scope="module")
def model(request):
    """test_continuous's tiny model and tokenizer (its module-scoped fixture)."""
    return request.getfixturevalue("tiny_model")


def _new_play(model, tok, calls: int = 0):
    policy = Policy(model, tok)
    policy.calls = calls  # the generate's key goes on from the interrupted play's
    # the prefill makes every turn a valid command that changes the env: the inventory grows, and the
    # prompts (which show it) depend on the env's state, so a resume that lost it would differ
    settings = RolloutSettings(TEXTCRAFT, env_kwargs={"prompt_style": "compact"}, max_turns=TURNS,
                               max_prompt_tokens=100_000, prefill=PREFILL)
    envs = LocalEnvs(TEXTCRAFT, {"prompt_style": "compact"}, SLOTS)
    return policy, envs, ContinuousPlay(policy, tok, settings, envs, SLOTS, before_tick=policy.load)


def _view(groups):
    return [[(ep.traj_id, ep.length, ep.return_, ep.won, ep.truncated,
              [(r.t, r.obs, r.action_token_ids, r.behaviour_logps, r.reward, r.policy_version, r.done)
               for r in ep.steps], ep.tokens.completion_ids)
             for ep in g] for g in groups]


def _interrupted(model, ticks: int):
    """The uninterrupted play's groups, and its checkpoint after ``ticks`` ticks (with its generate count)."""
    policy, envs, play = _new_play(*model)
    play.submit(_groups(3))  # 6 episodes on 4 slots: 2 queued
    for _ in range(ticks):
        play.tick()
    saved, calls = play.checkpoint(), policy.calls
    assert any(s.ep.steps for s in play.slots) and play.queue  # mid-episode, tasks still queued
    assert all(r.valid for s in play.slots for r in s.ep.steps)
    ref = play.take(3)
    envs.close()
    return ref, saved, calls


@pytest.mark.parametrize("kind", ["snapshot", "replay"])
def test_a_resumed_play_ends_as_the_uninterrupted_one(model, kind, monkeypatch):
    from agentrl_envs.textcraft import TextCraftEnv

    monkeypatch.setattr(TextCraftEnv, "resume_kind", kind)
    ref, saved, calls = _interrupted(model, ticks=2)
    policy, envs, play = _new_play(*model, calls=calls)
    assert play.resume(saved) == {"snapshot": SLOTS if kind == "snapshot" else 0,
                                  "replay": SLOTS if kind == "replay" else 0, "restart": 0}
    got = play.take(3)
    envs.close()
    assert _view(got) == _view(ref)
    assert sorted(ep.traj_id for g in got for ep in g) == sorted(f"g{g}/{i}" for g in range(3) for i in range(2))


def test_a_replay_that_differs_and_an_env_that_cannot_resume_restart_from_reset(model, monkeypatch):
    from agentrl_envs.textcraft import TextCraftEnv

    monkeypatch.setattr(TextCraftEnv, "resume_kind", "replay")
    ref, saved, calls = _interrupted(model, ticks=2)
    before = {ep.traj_id: ep for g in ref for ep in g}
    # the env no longer answers as recorded: each replay differs at its first step
    from agentrl_envs.base import TextEnv

    monkeypatch.setattr(TextCraftEnv, "step", lambda self, r: (lambda o: (o[0] + " (changed)", *o[1:]))(
        TextEnv.step(self, r)))
    policy, envs, play = _new_play(*model, calls=calls)
    assert play.resume(saved) == {"snapshot": 0, "replay": 0, "restart": SLOTS}
    # the restarted episodes wait first in the queue, in submission order, ahead of the queued tasks
    assert [t["traj_id"] for t in play.queue] == ["g0/0", "g0/1", "g1/0", "g1/1", "g2/0", "g2/1"]
    got = play.take(3)
    envs.close()
    assert sorted(ep.traj_id for g in got for ep in g) == sorted(before)  # each once
    for ep in (ep for g in got for ep in g):
        # played again from the reset: every turn after the first sees the changed env
        assert [r.t for r in ep.steps] == list(range(ep.length)) and ep.steps[-1].obs.endswith("(changed)")

    monkeypatch.undo()
    monkeypatch.setattr(TextCraftEnv, "resume_kind", "restart")
    ref, saved, calls = _interrupted(model, ticks=1)
    policy, envs, play = _new_play(*model, calls=calls)
    assert play.resume(saved) == {"snapshot": 0, "replay": 0, "restart": SLOTS}
    got = play.take(3)
    envs.close()
    assert sorted(ep.traj_id for g in got for ep in g) == sorted(before)


def test_resume_needs_a_fresh_play(model):
    _, saved, _ = _interrupted(model, ticks=1)
    policy, envs, play = _new_play(*model)
    play.submit(_groups(1))
    with pytest.raises(RuntimeError, match="fresh ContinuousPlay"):
        play.resume(saved)
    envs.close()
