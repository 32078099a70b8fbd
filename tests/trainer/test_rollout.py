"""run_episodes / hf_generate_fn on the counting env (real env, scripted or tiny-model policies).

Runtime: ~5 s.
"""

import re

import pytest
import torch
from count_env import ENV_ID

from agentrl.rollout import GenerateOutput, hf_generate_fn, run_episodes


def scripted(tok, wrong_at=(), malformed_at=()):
    """A deterministic policy that counts the steps visible in its prompt (window: "You have
    taken k step(s)"; trajectory: the number of assistant turns) and answers t+1 (t+2 when the
    step is in ``wrong_at``, a malformed reply when in ``malformed_at``)."""
    calls = []

    def gen(prompts):
        calls.append(len(prompts))
        out = []
        for p in prompts:
            text = tok.decode(p)
            m = re.search(r"You have taken (\d+) step", text)
            n = int(m.group(1)) + 1 if m else text.count("<|im_start|>assistant")
            body = str(n + 1) if n - 1 in wrong_at else str(n)
            resp = "oops<|im_end|>" if n - 1 in malformed_at else f"{body}</action><|im_end|>"
            out.append(tok(resp, add_special_tokens=False)["input_ids"])
        return out

    gen.calls = calls
    return gen


def test_window_episode_lengths_rewards_and_records(tiny):
    _, tok = tiny
    tasks = [{"seed": 0, "options": {"length": 2}, "group_id": "a"},
             {"seed": 1, "options": {"length": 4}, "group_id": "b"}]
    gen = scripted(tok, wrong_at=(1,))
    eps = run_episodes(ENV_ID, tasks, gen, tok, max_turns=10)
    # one batched call per turn: 2 envs for 2 turns, then only the long one for 2 more
    assert gen.calls == [2, 2, 1, 1]
    a, b = eps
    assert (a.length, b.length) == (2, 4)
    # step 1 (t=1) answers 3 instead of 2: reward 0 there, 1 elsewhere
    assert [r.reward for r in a.steps] == [1.0, 0.0]
    assert [r.reward for r in b.steps] == [1.0, 0.0, 1.0, 1.0]
    assert not a.won and not b.won and not a.truncated
    assert [r.done for r in b.steps] == [False, False, False, True]
    assert [r.action for r in b.steps] == ["1", "3", "3", "4"]
    # state_sig is the signature BEFORE the action (t index), action_sig the executed body
    assert [r.state_sig for r in b.steps][1:] == ["t1", "t2", "t3"]
    assert b.steps[0].task_family == "len4"
    # the prompt is the chat template of the env's user message + the prefill
    p = tok.decode(b.prompt_ids[2])
    assert p.startswith("<|im_start|>user\nYou are an agent in a counting game")
    assert p.endswith("<|im_end|>\n<|im_start|>assistant\n<action>")
    assert "Current observation: Say 3." in p and "Action: 3" in p  # history of 2 pairs


def test_malformed_penalty_and_env_error(tiny):
    _, tok = tiny
    tasks = [{"seed": 0, "options": {"length": 3}, "group_id": "a"},
             {"seed": 0, "options": {"length": 3, "raise_at": 1}, "group_id": "b"}]
    eps = run_episodes(ENV_ID, tasks, scripted(tok, malformed_at=(0,)), tok)
    a, b = eps
    # malformed first response: env penalty 0.1, the episode goes on; a malformed reply is not a
    # count command, so the 3 counts take 4 steps
    assert a.length == 4 and a.n_invalid == 1 and a.steps[0].reward == pytest.approx(-0.1)
    assert not a.steps[0].valid
    # raising env (raise_at=1: the 2nd executed command raises): malformed t=0, "1" at t=1, the
    # raising step t=2 is not recorded; the episode ends failed + truncated
    assert b.length == 2 and b.truncated and not b.won and "count env failure" in b.error
    assert b.steps[-1].done and b.steps[-1].truncated


@pytest.mark.parametrize("mode", ["window", "trajectory"])
def test_prompt_builder_error_ends_only_that_episode(tiny, mode):
    _, tok = tiny
    tasks = [{"seed": 0, "options": {"length": 3}, "group_id": "a"},
             {"seed": 0, "options": {"length": 3, "prompt_raise_at": 1}, "group_id": "b"}]
    a, b = run_episodes(ENV_ID, tasks, scripted(tok), tok, context_mode=mode)
    assert a.length == 3 and a.won and a.error is None
    # b executed step 0, then building the prompt of step 1 raised: failed, truncated, error kept
    assert b.length == 1 and b.truncated and not b.won
    assert "prompt builder failure" in b.error and b.steps[-1].done


def test_overlong_prompt_shrinks_history_then_truncates(tiny):
    _, tok = tiny
    task = [{"seed": 0, "options": {"length": 6}, "group_id": "a"}]
    full = run_episodes(ENV_ID, task, scripted(tok), tok, history_length=3)[0]
    lens = [len(p) for p in full.prompt_ids]
    # budget between the h=0 prompt of step 3 and the h=3 prompt: history must shrink
    h0 = run_episodes(ENV_ID, task, scripted(tok), tok, history_length=0)[0]
    budget = max(len(p) for p in h0.prompt_ids) + 1
    assert max(lens) > budget
    shr = run_episodes(ENV_ID, task, scripted(tok), tok, history_length=3, max_prompt_tokens=budget)[0]
    assert shr.length == 6 and not shr.truncated
    assert all(len(p) <= budget for p in shr.prompt_ids)
    # a budget below the first prompt: the episode ends truncated with no steps, no crash
    tiny_budget = run_episodes(ENV_ID, task, scripted(tok), tok, max_prompt_tokens=5)[0]
    assert tiny_budget.length == 0 and tiny_budget.truncated


def test_trajectory_mode_masks_env_tokens(tiny):
    _, tok = tiny
    task = [{"seed": 0, "options": {"length": 3}, "group_id": "a"}]
    ep = run_episodes(ENV_ID, task, scripted(tok), tok, context_mode="trajectory")[0]
    assert ep.length == 3 and ep.won
    ids, mask = ep.traj_completion_ids, ep.env_mask
    assert len(ids) == len(mask)
    model_text = [tok.decode(ids[s:e]) for s, e in ep.step_spans]
    assert model_text == ["1</action><|im_end|>", "2</action><|im_end|>", "3</action><|im_end|>"]
    env_text = tok.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
    # between model turns: a user turn with the new observation, the assistant header and prefill
    # (the model's own <|im_end|> closes its turn, so only "\n" is added before <|im_start|>)
    assert env_text.count("<|im_start|>user\nObservation: Say 2.") == 1
    assert env_text.startswith("\n<|im_start|>user\n") and env_text.endswith("<|im_start|>assistant\n<action>")
    assert sum(mask) == sum(e - s for s, e in ep.step_spans)


def test_lockstep_sync_keeps_calling_generate(tiny):
    _, tok = tiny
    gen = scripted(tok)
    other_rank_turns = 5  # the "other rank" still has episodes for 5 turns
    state = {"turn": 0}

    def sync(local_active):
        state["turn"] += 1
        return local_active or state["turn"] <= other_rank_turns

    eps = run_episodes(ENV_ID, [{"seed": 0, "options": {"length": 2}, "group_id": "a"}], gen, tok,
                       sync=sync, pad_batch=True)
    assert eps[0].length == 2
    assert gen.calls == [1] * 5  # 2 real turns + 3 filler calls


def test_hf_generate_fn_fingerprint_matches_full_forward(tiny):
    model, tok = tiny
    torch.manual_seed(0)
    prompts = [tok("<|im_start|>user\nSay 1.<|im_end|>\n", add_special_tokens=False)["input_ids"],
               tok("Say 2.", add_special_tokens=False)["input_ids"]]
    gen = hf_generate_fn(model, tok, max_new_tokens=4, do_sample=False, fingerprint_layer=0)
    out = gen(prompts)
    assert isinstance(out, GenerateOutput) and len(out.completion_ids) == 2
    # independent reference: unpadded forward with output_hidden_states; hidden_states[1] is
    # the output of decoder block 0; take each prompt's last token.
    for p, fp in zip(prompts, out.fingerprints, strict=True):
        with torch.no_grad():
            hs = model(input_ids=torch.tensor([p]), output_hidden_states=True).hidden_states[1][0, -1]
        assert torch.allclose(torch.tensor(fp), hs, atol=1e-4)
