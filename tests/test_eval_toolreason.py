"""``agentrl eval`` on agentrl/ToolReason-v0: APPO's table (accuracy / F1 per family, Avg, tool
calls by tool, format-error rate) from real episodes of the real env.

The "model" is a policy function through ``evaluate(policy=...)``: the env's expert (played on a
shadow env in lock-step, one episode at a time), a policy that answers wrongly and one that never
uses the format. Their numbers are known: the expert scores 100 on every family with one python
call per math task and one search per hop; the wrong answer scores 0; the bad format gives a
format-error rate of 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import agentrl_envs  # noqa: F401  (registers the ids)
import gymnasium as gym
import pytest

from agentrl.evaluation.checkpoint import evaluate, has_tool_scores, markdown_table, tool_tables
from agentrl.evaluation.cli import main
from agentrl.models.tiny import train_tokenizer

ENV = "agentrl/ToolReason-v0"
KW = {"math_size": 20}
FIX = Path(__file__).resolve().parent / "fixtures" / "appo"
ROLLOUT = dict(env_id=ENV, context_mode="trajectory", prefill="", max_new_tokens=512,
               max_prompt_tokens=100_000, batch_size=1)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(["<python>x = 1</python> <search>x</search> <answer>\\boxed{y}</answer> "
                            "<result>z</result>"] * 5, 300)


class Expert:
    """The env's expert as a generate function: a shadow env replays the eval's tasks in order,
    resetting on the next task when its episode ends (eval runs with batch_size=1)."""

    def __init__(self, tok, tasks, env_kwargs=KW):
        self.tok, self.tasks = tok, list(tasks)
        self.env = gym.make(ENV, **env_kwargs)
        self.done = True

    def __call__(self, prompts):
        assert len(prompts) == 1
        if self.done:
            seed, options = self.tasks.pop(0)
            self.env.reset(seed=seed, options=options)
        resp = self.env.unwrapped.expert_response()
        self.done = self.env.step(resp)[2]
        return [self.tok(resp + self.tok.eos_token, add_special_tokens=False)["input_ids"]]


def scripted(tok, text):
    ids = tok(text + tok.eos_token, add_special_tokens=False)["input_ids"]
    return lambda prompts: [list(ids) for _ in prompts]


@pytest.mark.bwrap
def test_expert_table(tok, tmp_path):
    seeds = list(range(6))
    fams = ["math", "multihop"]
    opts = {"split": "valid", "families": fams}
    # which family each seed draws, from the env itself
    env = gym.make(ENV, **KW)
    drawn = [env.reset(seed=s, options=opts)[1]["task_family"] for s in seeds]
    hops = [len(env.unwrapped.task.hops) for s in seeds if env.reset(seed=s, options=opts)[1]["task_family"] == "multihop"]
    assert set(drawn) == set(fams), drawn  # both families are in the sample
    n_math, n_kb = drawn.count("math"), drawn.count("multihop")
    r = evaluate("expert", seeds=seeds, families=fams, env_kwargs=KW,
                 policy=(Expert(tok, [(s, opts) for s in seeds]), tok), **ROLLOUT)
    m, q = r.per_family["math"], r.per_family["multihop"]
    assert (m["episodes"], q["episodes"]) == (n_math, n_kb)
    assert m["accuracy"] == 100.0 and m["task_score"] == 100.0 and "f1" not in m and m["task_score_se"] == 0.0
    assert q["f1"] == 100.0 and q["task_score"] == 100.0 and "accuracy" not in q
    assert (m["python_calls"], m["search_calls"]) == (1.0, 0.0)  # compute once, then answer
    assert (q["python_calls"], q["search_calls"]) == (0.0, pytest.approx(sum(hops) / n_kb))  # one search per hop
    assert m["format_error_rate"] == q["format_error_rate"] == 0.0
    assert r.all["python_calls"] == pytest.approx(n_math / 6) and r.all["search_calls"] == pytest.approx(sum(hops) / 6)
    assert r.avg == {"task_score": 100.0, "task_score_se": 0.0, "families": 2, "episodes": 6}
    assert has_tool_scores([r])
    lines = tool_tables([r]).splitlines()
    assert lines[0].startswith("Accuracy (math, verified) / token-F1 (QA)")
    assert lines[2] == "| checkpoint | math (acc) | multihop (F1) | Avg |"
    assert lines[4] == f"| expert | 100.0 ({n_math}) | 100.0 ({n_kb}) | 100.0 (6) |"
    calls = lines[lines.index("Tool calls per episode (python / search):"):]
    assert calls[2] == "| checkpoint | math | multihop | All |" and calls[4] == (f"| expert | 1.00 / 0.00 | 0.00 / {sum(hops) / n_kb:.2f} | "
                        f"{n_math / 6:.2f} / {sum(hops) / 6:.2f} |")
    # the JSON carries the same numbers with their s.e.
    d = json.loads(json.dumps(r.to_dict()))
    assert d["per_family"]["multihop"]["f1_se"] == 0.0 and d["avg"]["task_score"] == 100.0


def test_wrong_answer_and_bad_format(tok):
    seeds = list(range(4))
    wrong = evaluate("wrong", seeds=seeds, families=["multihop"], env_kwargs=KW,
                     policy=(scripted(tok, "<answer>\\boxed{zzqx}</answer>"), tok), **ROLLOUT)
    c = wrong.per_family["multihop"]
    assert (c["f1"], c["format_error_rate"], c["python_calls"], c["search_calls"]) == (0.0, 0.0, 0.0, 0.0)
    assert c["episodes"] == 4 and wrong.avg["task_score"] == 0.0
    bad = evaluate("bad", seeds=seeds, families=["math", "multihop"], env_kwargs=KW,
                   policy=(scripted(tok, "The answer is 4."), tok), **ROLLOUT)
    assert bad.all["format_error_rate"] == 1.0 and bad.all["format_error_rate_se"] == 0.0
    assert bad.all["task_score"] == 0.0 and bad.all["tool_calls"] == 0.0
    # two checkpoints in one table, rows in the order given
    rows = tool_tables([wrong, bad]).splitlines()
    assert rows[2] == "| checkpoint | math (acc) | multihop (F1) | Avg |"
    assert rows[4] == "| wrong | - | 0.0 (4) | 0.0 (4) |" and rows[5].startswith("| bad | 0.0 (")


def test_tool_limit_counts_calls_that_ran(tok):
    # five searches with a limit of 3: three run, the rest get "limit reached"; no answer within
    # the turn limit (5 turns) is a format error
    r = evaluate("searcher", seeds=[0, 1], families=["multihop"], env_kwargs=KW,
                 policy=(scripted(tok, "<search>capital</search>"), tok), **ROLLOUT)
    c = r.per_family["multihop"]
    assert (c["search_calls"], c["tool_calls"], c["format_error_rate"], c["f1"]) == (3.0, 3.0, 1.0, 0.0)


@pytest.mark.bwrap
def test_eval_on_local_benchmark_files(tok):
    files = {"gsm8k": str(FIX / "gsm8k.jsonl"), "hotpotqa": str(FIX / "hotpotqa.jsonl")}
    env_kw = {**KW, "datasets": {f: {"valid": {"path": p}} for f, p in files.items()}}
    env = gym.make(ENV, **env_kw)
    tasks = [(0, {"split": "valid", "families": [f], "task_id": t.id})
             for f in files for t in env.unwrapped.tasks("valid", f)]
    tasks = [(i, o) for i, (_, o) in enumerate(tasks)]
    r = evaluate("expert", datasets=files, env_kwargs=KW, policy=(Expert(tok, tasks, env_kw), tok), **ROLLOUT)
    g, h = r.per_family["gsm8k"], r.per_family["hotpotqa"]
    assert (g["episodes"], h["episodes"]) == (2, 2)  # every problem of each file, once
    assert g["accuracy"] == 100.0 and h["f1"] == 100.0 and r.avg["task_score"] == 100.0
    assert (g["python_calls"], h["search_calls"]) == (1.0, 1.0)
    assert r.settings["datasets"] == files and r.settings["families"] == ["gsm8k", "hotpotqa"]


def test_other_envs_keep_their_table():
    from agentrl.evaluation.checkpoint import summarize
    from agentrl.records import StepRecord
    from agentrl.rollout.episodes import Episode

    # an episode whose steps carry no tool info: no tool numbers, the success table
    ep = Episode("g", "t", steps=[StepRecord("g", "t", 0, "", "", 1.0, True)], won=True, return_=1.0, length=1,
                 task_family="a")
    r = summarize([ep], "ck", "agentrl/X-v0", "valid", {})
    assert r.avg == {} and "task_score" not in r.all and not has_tool_scores([r])
    assert markdown_table([r]).splitlines()[2] == "| ck | 100.0 (1) | 100.0 (1) |"


def test_trainer_metrics_carry_tool_numbers(tok):
    # the trainer logs episode_metrics over episode_summary dicts: the same numbers reach it
    from agentrl.rollout import RolloutSettings, run_episodes
    from agentrl.rollout.metrics import episode_metrics, episode_summary

    settings = RolloutSettings(ENV, context_mode="trajectory", prefill="", env_kwargs=KW, max_prompt_tokens=100_000)
    tasks = [{"seed": s, "group_id": f"g{s}", "options": {"split": "valid", "families": ["multihop"]}}
             for s in range(3)]
    eps = run_episodes(tasks, scripted(tok, "<search>capital</search>"), tok, settings)
    m = episode_metrics([episode_summary(e) for e in eps])
    assert m["env/tool_calls/search"] == 3.0 and m["env/tool_calls/python"] == 0.0
    assert m["env/format_error_rate"] == 1.0 and m["env/f1"] == 0.0 and "env/accuracy" not in m
    assert [r.info["tool"] for r in eps[0].steps] == ["search"] * 3 + [None] * 2


def test_bad_dataset_arguments(capsys):
    base = ["--checkpoint", "none", "--env", ENV, "--env-kwargs", json.dumps(KW)]
    cases = [(["--dataset", "gsm8k"], "--dataset takes NAME=PATH"),
             (["--dataset", "gsm8k=/nonexistent.jsonl"], "file not found: /nonexistent.jsonl"),
             (["--dataset", f"squad={FIX / 'gsm8k.jsonl'}"], "must be a math benchmark")]
    for extra, needle in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (extra, err)
