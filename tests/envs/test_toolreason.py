"""agentrl/ToolReason-v0: format, reward, episode rules, tools, the expert, the KB's search."""

from __future__ import annotations

import json
import random
from pathlib import Path

import agentrl_envs  # noqa: F401  (registers the ids)
import gymnasium as gym
import pytest
from agentrl_envs.swe.sandbox import sandbox_problem
from agentrl_envs.tasks.qa import normalize_answer
from agentrl_envs.toolreason import ToolReasonEnv
from agentrl_envs.toolreason import format as fmt
from agentrl_envs.toolreason.tools import kb_index

PROBLEM = sandbox_problem()
needs_sandbox = pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox: {PROBLEM}")


def make(**kw) -> ToolReasonEnv:
    return gym.make("agentrl/ToolReason-v0", math_size=20, **kw)


def play_expert(env, seed, options):
    obs, info = env.reset(seed=seed, options=options)
    total, steps = 0.0, 0
    while True:
        obs, r, term, trunc, info = env.step(env.unwrapped.expert_response())
        total, steps = total + r, steps + 1
        if term or trunc:
            return total, info, steps


# ----------------------------------------------------------------------------- format and reward
def test_parse_turn():
    t = fmt.parse_turn("think...\n<python>\nx = 2\nx * 3\n</python> trailing <search>no</search>")
    assert (t.kind, t.body) == ("python", "x = 2\nx * 3")
    assert fmt.parse_turn("<SEARCH> capital of Ostria </SEARCH>").body == "capital of Ostria"
    t = fmt.parse_turn("<answer>so it is \\boxed{1} no, \\boxed{\\frac{1}{2}}</answer>")
    assert (t.kind, t.boxed) == ("answer", "\\frac{1}{2}")
    for bad in (None, "", "just text", "<python></python>", "<answer>42</answer>", "<python>1+1",
                "<answer>\\boxed{}</answer>"):
        assert fmt.parse_turn(bad).kind is None, bad


def test_appo_reward_exact():
    assert fmt.appo_reward(None, {"python", "search"}) == -1.0  # bad format
    assert fmt.appo_reward(0.5, {"python", "search"}) == pytest.approx(0.6)  # F1 0.5 + 0.1 bonus
    assert fmt.appo_reward(0.0, {"python", "search"}) == 0.0  # no bonus without a score
    assert fmt.appo_reward(1.0, {"search"}) == 1.0  # one tool only
    # F1 of the boxed answer (QA); math-verify 0/1 for math, token-F1 with math_reward="f1"
    assert fmt.answer_score("the Seine river", ("Seine",), "qa") == pytest.approx(2 / 3)
    assert fmt.answer_score("0.5", ("\\frac{1}{2}",), "math") == 1.0
    assert fmt.answer_score("12", ("12.0",), "math", math_reward="f1") == 0.0


# ----------------------------------------------------------------------------- reset and options
def test_registered_and_deterministic():
    env = make()
    o1, i1 = env.reset(seed=7)
    o2, i2 = env.reset(seed=7)
    assert o1 == o2 and i1["task_id"] == i2["task_id"]
    ids = {env.reset(seed=s, options={"families": "multihop"})[1]["task_id"] for s in range(20)}
    assert len(ids) > 10 and all(i.startswith("kb0/") for i in ids)
    assert env.reset(seed=3, options={"families": ["math"], "split": "valid"})[1]["task_family"] == "math"
    with pytest.raises(ValueError, match="unknown task family"):
        env.reset(seed=0, options={"families": "chess"})
    with pytest.raises(ValueError, match="unknown split"):
        env.reset(seed=0, options={"split": "test"})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(seed=0, options={"level": 3})


def test_splits_disjoint():
    env = make().unwrapped
    for fam in ("math", "multihop"):
        train = {t.question for t in env.tasks("train", fam)}
        valid = {t.question for t in env.tasks("valid", fam)}
        assert train and valid and len(train & valid) <= len(valid) // 10  # tiny chain sums may coincide
    assert not {t.id for t in env.tasks("train", "multihop")} & {t.id for t in env.tasks("valid", "multihop")}


def test_prompts():
    env = make()
    obs, info = env.reset(seed=1, options={"families": "multihop"})
    p = env.unwrapped.prompt(obs, info, [], 0)
    assert "<python>" in p and "<search>" in p and "\\boxed{...}" in p and obs in p and "at most 3" in p
    assert env.unwrapped.turn_prompt("<result>\nx\n</result>", info, 1) == "<result>\nx\n</result>"


# ----------------------------------------------------------------------------- episode rules
def test_bad_format_ends_with_minus_one():
    env = make()
    for bad in ("I think the answer is 4.", "<answer>4</answer>", None, "\u00e9" * 10_000,
                "<search></search>"):
        env.reset(seed=2)
        obs, r, term, trunc, info = env.step(bad)
        assert (r, term, info["format_error"], info["action_valid"]) == (-1.0, True, True, False)
        assert obs.startswith("Bad format")


def test_search_result_and_limits():
    env = make(tool_call_limit=2)
    env.reset(seed=5, options={"families": "multihop"})
    obs, r, term, _, info = env.step("<search>Kemsello Airways</search>")
    assert obs.startswith("<result>\n[1] Kemsello Airways:") and obs.endswith("</result>")
    assert (r, term, info["tool_calls"], info["used_search"]) == (0.0, False, 1, True)
    env.step("<search>zzzz qqqq</search>")
    obs, r, term, _, info = env.step("<search>Kemsello Airways</search>")  # third call: over the limit
    assert "Tool-call limit reached (2 calls)" in obs and info["tool_calls"] == 2 and not term
    obs, r, term, _, info = env.step("<search>again</search>")  # 4th turn = max_turns (limit + 2)
    assert (r, term, info["format_error"]) == (-1.0, True, True)


def test_answer_scores_f1_without_tools():
    env = make()
    env.reset(seed=5, options={"families": "multihop"})
    gold = env.unwrapped.task.answers[0]
    obs, r, term, _, info = env.step(f"<answer>It is \\boxed{{{gold} city}}</answer>")
    # pred [gold, city] vs gold [gold]: P 1/2, R 1 -> F1 2/3; no tools, no bonus; not an exact match
    assert r == pytest.approx(2 / 3) and term and not info["won"] and info["score"] == pytest.approx(2 / 3)


def test_snapshot_restore():
    env = make()
    env.reset(seed=5, options={"families": "multihop"})
    env.step("<search>anything</search>")
    snap = env.unwrapped.snapshot()
    env2 = make()
    env2.reset(seed=5, options={"families": "multihop"})
    env2.unwrapped.restore(snap)
    assert env2.unwrapped.snapshot() == snap == {"calls": 1, "used": ["search"], "steps": 1}
    # the expert continues from the restored state: the next hop, asked twice, is the same
    assert env2.unwrapped.expert_response() == env2.unwrapped.expert_response()
    assert env2.unwrapped.expert_response().endswith(f"<search>{env2.unwrapped.task.hops[1]}</search>")


# ----------------------------------------------------------------------------- the KB's search
def test_kb_search_finds_each_hop_and_earlier_hops_do_not_leak():
    kb, index = kb_index(0)
    for q in kb.questions:
        for i, hop in enumerate(q.hops):
            hits = index.search(hop, 3)
            assert hop in [d.title for d in hits], (q.question, hop)
            if i < len(q.hops) - 1 and q.meta["kind"] != "compare_founded":
                text = " ".join(normalize_answer(f"{d.title} {d.text}") for d in hits)
                assert f" {normalize_answer(q.answers[0])} " not in f" {text} ", (q.question, hop)


# ----------------------------------------------------------------------------- expert
def test_expert_wins_every_multihop_task_of_both_splits():
    env = make()
    for split in ("train", "valid"):
        for task in env.unwrapped.tasks(split, "multihop"):
            opts = {"split": split, "families": "multihop", "task_id": task.id}
            total, info, steps = play_expert(env, 0, opts)
            assert info["task_id"] == task.id
            assert info["won"] and total == 1.0 and info["tool_calls"] == steps - 1 == len(task.hops), info
    with pytest.raises(ValueError, match="no task"):
        env.reset(seed=0, options={"task_id": "kb0/nope"})


@pytest.mark.bwrap
@needs_sandbox
@pytest.mark.parametrize("split", ["train", "valid"])
def test_expert_wins_sampled_math_tasks(split):
    env = make()
    seeds = random.Random(split).sample(range(10_000), 12)
    for seed in seeds:
        total, info, steps = play_expert(env, seed, {"split": split, "families": "math"})
        assert info["won"] and total == 1.0 and steps == 2 and info["used_python"], info
    env.close()


# ----------------------------------------------------------------------------- python tool
@pytest.mark.bwrap
@needs_sandbox
def test_python_tool_notebook_semantics_and_isolation():
    env = make(python_timeout=2.0)
    env.reset(seed=1, options={"families": "math"})
    u = env.unwrapped
    assert u._run_python("x = 6\nprint('x is', x)\nx * 7") == "x is 6\n42"
    assert u._run_python("x") == "line 1: NameError: name 'x' is not defined"  # fresh interpreter per call
    assert u._run_python("None") == "(no output)"
    assert "SyntaxError" in u._run_python("def f(:")
    assert u._run_python("import random\nrandom.randint(0, 10**9)") == u._run_python(
        "import random\nrandom.randint(0, 10**9)")  # seeded: replays print the same
    assert "OSError" in u._run_python("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)")
    assert "MemoryError" in u._run_python("b = bytearray(2 * 1024**3)")
    assert "timed out after 2 s" in u._run_python("while True:\n    pass")
    out = u._run_python("print('y' * 10000)")
    assert len(out) < 2100 and "[... output clipped ...]" in out
    obs, r, term, _, info = env.step("<python>2 ** 10</python>")
    assert obs == "<result>\n1024\n</result>" and info["used_python"] and r == 0.0
    env.close()


@pytest.mark.bwrap
@needs_sandbox
def test_both_tools_bonus():
    env = make()
    env.reset(seed=5, options={"families": "multihop"})
    gold = env.unwrapped.task.answers[0]
    env.step("<python>1 + 1</python>")
    env.step("<search>x</search>")
    obs, r, term, _, info = env.step(f"<answer>\\boxed{{{gold}}}</answer>")
    assert r == pytest.approx(1.1) and info["won"] and term
    env.close()


# ----------------------------------------------------------------------------- trajectory rollout
def test_trajectory_rollout_with_the_expert():
    """The env through ``run_episodes`` in trajectory mode: the expert plays (via a shadow env in
    lock-step), tool results come back as masked env tokens, the return is APPO's reward."""
    from agentrl.models.tiny import train_tokenizer
    from agentrl.rollout import RolloutSettings, run_episodes

    tok = train_tokenizer(["<search>x</search> <answer>\\boxed{y}</answer> <result>z</result>"] * 5, 300)
    task_id = next(t.id for t in make().unwrapped.tasks("valid", "multihop") if len(t.hops) == 3)
    task = {"seed": 0, "group_id": "g",
            "options": {"families": "multihop", "task_id": task_id, "split": "valid"}}
    shadow = make()
    shadow.reset(seed=0, options=task["options"])

    def gen(prompts):
        assert len(prompts) == 1
        resp = shadow.unwrapped.expert_response()
        shadow.step(resp)
        return [tok(resp + tok.eos_token, add_special_tokens=False)["input_ids"]]

    settings = RolloutSettings("agentrl/ToolReason-v0", context_mode="trajectory", prefill="",
                               env_kwargs={"math_size": 20}, max_prompt_tokens=100_000)
    (ep,) = run_episodes([task], gen, tok, settings)
    hops = 3
    assert ep.length == hops + 1 and ep.won and ep.return_ == 1.0 and not ep.truncated
    assert [r.reward for r in ep.steps] == [0.0] * hops + [1.0]
    env_text = tok.decode([t for t, m in zip(ep.tokens.completion_ids, ep.tokens.env_mask, strict=True) if m == 0])
    model_text = tok.decode([t for t, m in zip(ep.tokens.completion_ids, ep.tokens.env_mask, strict=True) if m == 1])
    assert env_text.count("<result>") == hops and "<result>" not in model_text
    assert model_text.count("<search>") == hops and model_text.count("<answer>") == 1


# ----------------------------------------------------------------------------- dataset families
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "appo"


def test_dataset_families_from_files():
    env = make(datasets={"hotpotqa": {"valid": {"path": str(FIX / "hotpotqa.jsonl")}},
                         "bamboogle": {"valid": {"path": str(FIX / "bamboogle.jsonl")}},
                         "gsm8k": {"valid": {"path": str(FIX / "gsm8k.jsonl")}}})
    u = env.unwrapped
    assert [t.answers for t in u.tasks("valid", "gsm8k")] == [("22",), ("1500",)]
    obs, info = env.reset(seed=0, options={"split": "valid", "families": "hotpotqa",
                                           "task_id": "5a7a06935542990198eaf050"})
    assert info["task_family"] == "hotpotqa" and "Eiffel Tower" in obs
    # hotpotqa searches its own paragraphs
    obs, *_ = env.step("<search>capital of France Seine</search>")
    assert obs.startswith("<result>\n[1] Paris: Paris is the capital of France.")
    obs, r, term, _, info = env.step("<answer>\\boxed{the Seine}</answer>")
    assert r == 1.0 and info["won"] and term
    # bamboogle ships no paragraphs: nothing to find
    env.reset(seed=0, options={"split": "valid", "families": "bamboogle"})
    assert env.step("<search>Washington</search>")[0] == "<result>\nNo results.\n</result>"
    # the expert wins every task of these families without the sandbox's help on QA
    for fam in ("hotpotqa", "bamboogle"):
        for t in u.tasks("valid", fam):
            total, info, _ = play_expert(env, 0, {"split": "valid", "families": fam, "task_id": t.id})
            assert info["won"] and total == 1.0
    with pytest.raises(ValueError, match="no 'train' split"):
        env.reset(seed=0, options={"split": "train", "families": "gsm8k"})


def test_dataset_family_spec_errors():
    with pytest.raises(ValueError, match="must be a math benchmark"):
        make(datasets={"squad": {"valid": {}}})
    with pytest.raises(ValueError, match="loader kwargs per split"):
        make(datasets={"hotpotqa": {"test": {}}})


@pytest.mark.bwrap
@needs_sandbox
def test_latency_entry_point(capsys):
    from agentrl_envs.toolreason import latency

    assert latency.main(["--calls", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["python_call_trivial_ms"] > 0 and res["reset_multihop_ms"] > 0
