"""``stop_strings``: a turn ends after the first stop string (a tool call's closing tag) on the
transformers path too, where ``generate`` cannot stop on strings. Real ToolReason env and a
tokenizer trained on its text; the generator appends text past the closing tag, as a model that
does not stop there would. ~5 s (the tokenizer's training)."""

from __future__ import annotations

import pytest

from agentrl.benchmarks.appo_warm import ENV_ID, ENV_KWARGS, corpus
from agentrl.config import AgentRLConfig
from agentrl.rollout import InProcessEnvs, RolloutSettings, run_episodes
from agentrl.rollout.prompts import cut_at_stop, decode_response, encode

STOPS = ("</python>", "</search>", "</answer>")
TAIL = "\nThe result is 7.\n<answer>\\boxed{7}</answer>"
"""What a model that does not stop at the closing tag might go on to write."""


@pytest.fixture(scope="module")
def tok():
    from agentrl.models.tiny import train_tokenizer

    return train_tokenizer(corpus(12) * 3, vocab_size=600)


def test_cut_is_the_shortest_prefix_holding_a_stop(tok):
    call = "Let me compute this with Python.\n<python>\nprint(3 + 4)\n</python>"
    ids = encode(tok, call + TAIL) + [tok.eos_token_id]
    cut = cut_at_stop(ids, tok, STOPS)
    assert decode_response(tok, cut).endswith("</python>")
    assert "</python>" not in decode_response(tok, cut[:-1])  # not one token later than needed
    assert decode_response(tok, cut) == call
    assert cut == ids[:len(cut)]
    # the answer's own tag is a stop too: the first stop wins, whichever string it is
    answer = encode(tok, "<answer>\\boxed{7}</answer>" + TAIL)
    assert decode_response(tok, cut_at_stop(answer, tok, STOPS)) == "<answer>\\boxed{7}</answer>"


def test_no_stop_leaves_the_completion_alone(tok):
    ids = encode(tok, "just thinking, no tool yet") + [tok.eos_token_id]
    assert cut_at_stop(ids, tok, STOPS) == ids
    assert cut_at_stop(ids, tok, ()) == ids
    assert cut_at_stop([], tok, STOPS) == []


def _play(tok, stop_strings):
    """One ToolReason math episode whose every turn is the expert's response + ``TAIL``."""
    settings = RolloutSettings(env_id=ENV_ID, env_kwargs=ENV_KWARGS, context_mode="trajectory", prefill="",
                               max_prompt_tokens=4096, stop_strings=stop_strings)
    envs = InProcessEnvs(ENV_ID, ENV_KWARGS, 1)

    def gen(prompts):
        text = envs.envs[0].unwrapped.expert_response()
        return [encode(tok, text + TAIL) + [tok.eos_token_id] for _ in prompts]

    try:
        return run_episodes([{"seed": 0, "options": {"split": "train", "families": ["math"]}, "group_id": "g0"}],
                            gen, tok, settings, envs=envs)[0]
    finally:
        envs.close()


def test_the_env_and_the_rows_see_the_turn_up_to_its_stop(tok):
    ep = _play(tok, STOPS)
    assert [r.info["response"].split("<")[-1] for r in ep.steps] == ["/python>", "/answer>"]
    assert all(TAIL not in r.info["response"] for r in ep.steps)
    assert ep.return_ == 1.0  # the expert's call and answer, graded as such
    trained = decode_response(tok, [t for t, m in zip(ep.tokens.completion_ids, ep.tokens.env_mask,
                                                        strict=True) if m])
    assert TAIL.strip() not in trained and trained.count("</python>") == 1
    # without stop strings the tail is part of the turn: the env reads up to the first tag, but
    # the tokens after it are trained on
    raw = _play(tok, ())
    assert TAIL in raw.steps[0].info["response"]


def test_vllm_gets_the_stop_strings_as_sampling_params():
    cfg = AgentRLConfig(output_dir="/tmp/unused", use_vllm=True, stop_strings=list(STOPS), report_to="none",
                        use_cpu=True)
    assert cfg.generation_kwargs["stop"] == list(STOPS) and cfg.generation_kwargs["include_stop_str_in_output"]
    assert AgentRLConfig(output_dir="/tmp/unused", stop_strings=list(STOPS), report_to="none",
                         use_cpu=True).generation_kwargs is None  # transformers: cut after generation
