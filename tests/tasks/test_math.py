"""Boxed extraction, the math-verify verifier and reasoning-gym problems."""

from __future__ import annotations

import threading

import pytest
from agentrl_envs.tasks.math import (
    MathProblem,
    clean_gold,
    last_boxed,
    reasoning_gym_problems,
    reasoning_gym_score,
    remove_boxed,
    verify_response,
)


# ----------------------------------------------------------------------------- extraction
@pytest.mark.parametrize(
    "text, want",
    [
        ("so \\boxed{5}", "5"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed { 7 }", "7"),
        ("\\fbox{8}", "8"),
        ("\\boxed{1} and an unclosed \\boxed{2", "1"),
        ("\\boxed{\\boxed{3}}", "3"),
        ("no box 70", None),
        ("", None),
    ],
)
def test_last_boxed(text, want):
    assert last_boxed(text) == want


def test_remove_boxed():
    assert remove_boxed("plan: add them. \\boxed{42}") == "plan: add them. "
    assert remove_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{3} c") == "a  b  c"
    assert remove_boxed("outer \\boxed{x \\boxed{y} z} end") == "outer  end"
    assert remove_boxed("unclosed \\boxed{1") == "unclosed \\boxed{1"
    assert remove_boxed("nothing here") == "nothing here"


@pytest.mark.parametrize(
    "gold, want",
    [
        ("$\\frac{23}{131}$", "\\frac{23}{131}"),
        (27.0, "27"),
        (2.5, "2.5"),
        (" 70 ", "70"),
        ("\\boxed{4}", "4"),
    ],
)
def test_clean_gold(gold, want):
    assert clean_gold(gold) == want


# ----------------------------------------------------------------------------- verifier
@pytest.mark.parametrize(
    "response, gold, ok",
    [
        ("the answer is \\boxed{70}", "70", True),
        ("\\boxed{23/131}", "\\frac{23}{131}", True),
        ("\\boxed{2.22}", "2.220", True),
        ("\\boxed{0.5}", "\\frac{1}{2}", True),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "(3, \\frac{\\pi}{2})", True),
        ("\\boxed{71}", "70", False),
        ("no box, but 70", "70", False),  # the box is required
        ("\\boxed{1} ... wait, \\boxed{70}", "70", True),  # the last box counts
        ("\\boxed{70} ... wait, \\boxed{1}", "70", False),
        ("\\boxed{" + "1+" * 600 + "1}", "1201", False),  # over MAX_ANSWER_CHARS: refused unparsed
    ],
)
def test_verify_response(response, gold, ok):
    assert verify_response(response, gold) == (1.0 if ok else 0.0)
    assert verify_response(response, gold, scale="pm1") == (1.0 if ok else -1.0)


def test_verify_scale_error():
    with pytest.raises(ValueError, match="must be one of '01', 'pm1'"):
        verify_response("\\boxed{1}", "1", scale="binary")


def test_verify_off_main_thread():
    # math-verify's default timeouts use signal.alarm, which raises in a worker thread
    out = []
    t = threading.Thread(target=lambda: out.append(verify_response("\\boxed{\\frac{6}{4}}", "1.5")))
    t.start()
    t.join()
    assert out == [1.0]


# ----------------------------------------------------------------------------- reasoning-gym
def test_reasoning_gym_deterministic_and_interleaved():
    a = reasoning_gym_problems(["gsm_symbolic", "chain_sum", "basic_arithmetic"], n=7, seed=3)
    b = reasoning_gym_problems(["gsm_symbolic", "chain_sum", "basic_arithmetic"], n=7, seed=3)
    assert a == b
    assert [p.source for p in a] == ["gsm_symbolic", "chain_sum", "basic_arithmetic"] * 2 + ["gsm_symbolic"]
    assert [p.id for p in a[:4]] == [
        "gsm_symbolic/3/0",
        "chain_sum/4/0",
        "basic_arithmetic/5/0",
        "gsm_symbolic/3/1",
    ]
    assert len({p.question for p in a}) == 7
    c = reasoning_gym_problems(["gsm_symbolic", "chain_sum", "basic_arithmetic"], n=7, seed=4)
    assert [p.question for p in c] != [p.question for p in a]
    # every gold answer verifies against itself in a box
    for p in a:
        assert verify_response(f"\\boxed{{{p.answer}}}", p.answer) == 1.0, p


def test_reasoning_gym_gold_cleaned_and_scored():
    (p,) = reasoning_gym_problems("fraction_simplification", n=1, seed=0)
    assert not p.answer.startswith("$") and "frac{" in p.answer
    assert verify_response(f"so \\boxed{{{p.answer}}}", p.answer) == 1.0
    # reasoning-gym's own scorer: on the extracted answer only
    assert reasoning_gym_score(p, p.meta["rg_answer"]) == 1.0
    assert reasoning_gym_score(p, None) == 0.0


def test_reasoning_gym_score_reads_first_number():
    # why only the extracted answer may be passed: the scorer grades the first number it sees
    (p,) = reasoning_gym_problems("chain_sum", n=1, seed=0)
    whole = f"We have 2 numbers. \\boxed{{{p.answer}}}"
    assert reasoning_gym_score(p, last_boxed(whole)) == 1.0
    assert reasoning_gym_score(p, whole) < 1.0
    assert (
        reasoning_gym_score(MathProblem("q", "1", "math500", "x"), "1") == 0.0
    )  # not a reasoning-gym problem


def test_reasoning_gym_task_kwargs_and_errors():
    ps = reasoning_gym_problems(
        "chain_sum", n=3, seed=0, task_kwargs={"chain_sum": {"min_terms": 5, "max_terms": 5}}
    )
    assert all(p.question.count("+") + p.question.count("-") >= 4 for p in ps)
    assert reasoning_gym_problems("chain_sum", n=0) == []
    with pytest.raises(ValueError, match="unknown reasoning-gym dataset 'gsm9k'; math ones: gsm_symbolic"):
        reasoning_gym_problems("gsm9k", n=1)
    with pytest.raises(ValueError, match="names is empty"):
        reasoning_gym_problems([], n=1)
