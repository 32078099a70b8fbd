"""The ``branch`` context (agentrl/rollout/branching.py) on the real ToolReason env, played by its
expert: a branch that continues with the parent's own tokens must reproduce the parent exactly
(replay, mid-action resume, the env's response and the token bookkeeping all agree); one that
continues differently is scored on the whole step. No model: ~5 s (the tokenizer's training).
"""

from __future__ import annotations

import pytest
from agentrl_envs.swe.sandbox import sandbox_problem

from agentrl.benchmarks.appo_warm import ENV_ID, ENV_KWARGS, corpus, expert_episodes, expert_generate
from agentrl.rollout import InProcessEnvs, RolloutSettings, run_episodes
from agentrl.rollout.branching import BranchStart, branch_start, branch_task
from agentrl.rollout.prompts import decode_response, encode

SETTINGS = RolloutSettings(env_id=ENV_ID, env_kwargs=ENV_KWARGS, context_mode="branch", prefill="",
                           max_prompt_tokens=4096)
MULTIHOP = {"split": "train", "families": ["multihop"]}
MATH = {"split": "train", "families": ["math"]}


@pytest.fixture(scope="module")
def tok():
    from agentrl.models.tiny import train_tokenizer

    return train_tokenizer(corpus(12) * 3, vocab_size=600)


def play_branch(tok, task, first_completion):
    """Run one branch task: the first turn returns ``first_completion``, later turns the expert."""
    envs = InProcessEnvs(ENV_ID, ENV_KWARGS, 1)
    expert = expert_generate(envs, tok)
    calls = []

    def gen(prompts):
        calls.append(list(prompts[0]))
        return [list(first_completion)] if len(calls) == 1 else expert(prompts)

    try:
        return run_episodes([task], gen, tok, SETTINGS, envs=envs)[0], calls
    finally:
        envs.close()


def _model_positions(parent, k):
    s, e = parent.tokens.step_spans[k]
    return s, e


def test_branch_with_the_parents_tokens_reproduces_the_parent(tok):
    parent = expert_episodes(tok, [3], options=MULTIHOP)[0]
    assert len(parent.steps) == 3 and parent.return_ == 1.0  # search, search, answer
    s, e = _model_positions(parent, 1)
    pos = s + 4  # inside the second search turn
    task = branch_task(parent, pos, 0)
    assert task["group_id"] == parent.group_id + "#branch" and task["traj_id"] == parent.traj_id + "#b0"
    b = task["branch"]
    assert (b.step, b.step_start, b.actions) == (1, s, [parent.steps[0].info["response"]])
    branch, calls = play_branch(tok, task, parent.tokens.completion_ids[pos + 1:e])
    # the first prompt is the parent's prompt + completion[:pos+1] (the chosen token kept)
    assert calls[0] == parent.tokens.prompt_ids + parent.tokens.completion_ids[:pos + 1]
    # replay restored step 1: the branch's records start at t = 1 in the parent's observation
    assert [r.t for r in branch.steps] == [1, 2]
    assert [r.obs for r in branch.steps] == [r.obs for r in parent.steps[1:]]
    # the env received the whole step-1 response: the resumed part + the continuation
    assert [r.info["response"] for r in branch.steps] == [r.info["response"] for r in parent.steps[1:]]
    assert [r.reward for r in branch.steps] == [r.reward for r in parent.steps[1:]]
    assert branch.return_ == 1.0 and branch.won and branch.error is None
    # token bookkeeping: the same sequence, mask and spans as the parent
    assert branch.tokens.completion_ids == parent.tokens.completion_ids
    assert branch.tokens.env_mask == parent.tokens.env_mask
    assert branch.tokens.step_spans == parent.tokens.step_spans
    assert branch.context.rows(branch, [0.0, 0.0]) == []  # branches carry no loss


def test_branch_that_diverges_is_scored_on_the_whole_step(tok):
    parent = expert_episodes(tok, [5], options=MULTIHOP)[0]
    k = len(parent.steps) - 1  # the answer turn: "Putting the facts together.\n<answer>\boxed{X}</answer>"
    s, e = _model_positions(parent, k)
    text = decode_response(tok, parent.tokens.completion_ids[s:e])
    cut = text.index("\\boxed{") + len("\\boxed{")
    # choose the last token whose decoded prefix ends inside the box
    pos = max(p for p in range(s, e) if len(decode_response(tok, parent.tokens.completion_ids[s:p + 1])) <= cut)
    head = decode_response(tok, parent.tokens.completion_ids[s:pos + 1])
    cont = encode(tok, "Nowhere}</answer>") + [tok.eos_token_id]
    branch, _ = play_branch(tok, branch_task(parent, pos, 7), cont)
    assert len(branch.steps) == 1 and branch.steps[0].t == k
    assert branch.steps[0].info["response"] == head + "Nowhere}</answer>"
    assert branch.return_ == 0.0 and parent.return_ == 1.0  # token-F1 of a wrong entity: 0
    assert branch.traj_id.endswith("#b7")


@pytest.mark.skipif(sandbox_problem() is not None, reason="no bubblewrap sandbox")
def test_branch_replays_the_python_call_and_its_counters(tok):
    parent = expert_episodes(tok, [2], options=MATH)[0]
    assert [r.action.split(":")[0] for r in parent.steps] == ["python", "answer"]
    s, e = _model_positions(parent, 1)
    branch, _ = play_branch(tok, branch_task(parent, s, 0), parent.tokens.completion_ids[s + 1:e])
    # the replayed python call counts toward the limit and the "both tools" bookkeeping: the
    # parent's answer scores the same in the branch
    assert branch.return_ == parent.return_ == 1.0
    assert branch.steps[0].obs == parent.steps[1].obs  # the tool's <result> from the replay


def test_bad_positions_and_failed_replays(tok):
    parent = expert_episodes(tok, [3], options=MULTIHOP)[0]
    s, e = parent.tokens.step_spans[1]
    with pytest.raises(ValueError, match="not a model token"):
        branch_start(parent, s - 1)  # the env turn before step 1
    with pytest.raises(ValueError, match="replayed actions"):
        BranchStart(parent="p", pos=2, step=1, actions=[], prompt_ids=[1], completion_ids=[1, 2, 3],
                    env_mask=[1, 1, 1], step_spans=[], step_start=0)
    # an action that ends the episode during replay: the env is not where the parent was
    b = branch_start(parent, s + 2)
    b.actions = ["<answer>\\boxed{x}</answer>"]
    task = {"seed": parent.seed, "options": parent.options, "group_id": "g#branch", "traj_id": "x", "branch": b}
    branch, calls = play_branch(tok, task, [tok.eos_token_id])
    assert branch.steps == [] and "replay of step 0 ended the episode" in branch.error
    assert calls == []  # nothing left to generate for
