"""Benchmark loaders on small fixtures written in each dataset's real column schema."""

from __future__ import annotations

import json
import os

import pytest
from agentrl_envs.tasks.benchmarks import BENCHMARKS, load_benchmark, read_rows
from agentrl_envs.tasks.math import verify_response

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "math")
FILES = {
    "gsm8k": "gsm8k.jsonl",
    "math_train": "math_train.jsonl",
    "math500": "math500.parquet",
    "aime24": "aime24.parquet",
    "aime25": "aime25.jsonl",
    "amc23": "amc23.jsonl",
    "gaokao2023en": "gaokao2023en.jsonl",
    "minervamath": "minervamath.jsonl",
}
# (first question's start, gold answers, ids)
WANT = {
    "gsm8k": ("Ana buys 3 boxes", ["31", "37500"], ["gsm8k/0", "gsm8k/1"]),
    "math_train": ("What is the value", ["\\frac{5}{6}", "4"], ["math_train/0", "math_train/1"]),
    "math500": (
        "Convert the point",
        ["\\left( 3, \\frac{\\pi}{2} \\right)", "1024"],
        ["test/precalculus/807.json", "test/algebra/1.json"],
    ),
    "aime24": ("Find the remainder", ["1"], ["60"]),
    "aime25": ("Find the sum", ["28"], ["0"]),
    "amc23": ("How many positive divisors", ["9", "2.5"], ["0", "1"]),
    "gaokao2023en": ("Given the set", ["\\{2,3\\}"], ["0"]),
    "minervamath": ("A star has a parallax", ["10"], ["minervamath/0"]),
}


def test_every_benchmark_has_a_fixture():
    assert set(FILES) == set(BENCHMARKS) == set(WANT)


@pytest.mark.parametrize("name", sorted(FILES))
def test_load_fixture(name):
    ps = load_benchmark(name, path=os.path.join(FIX, FILES[name]))
    start, golds, ids = WANT[name]
    assert ps[0].question.startswith(start)
    assert [p.answer for p in ps] == golds
    assert [p.id for p in ps] == ids
    assert {p.source for p in ps} == {name}
    for p in ps:  # the gold verifies against itself in a box
        assert verify_response(f"\\boxed{{{p.answer}}}", p.answer) == 1.0


def test_meta_columns():
    (p, _) = load_benchmark("math500", path=os.path.join(FIX, "math500.parquet"))
    assert p.meta == {"subject": "Precalculus", "level": 2}
    (p, _) = load_benchmark("math_train", path=os.path.join(FIX, "math_train.jsonl"))
    assert p.meta == {"level": "Level 1", "type": "Prealgebra"}


def test_limit_and_json_list(tmp_path):
    assert len(load_benchmark("gsm8k", path=os.path.join(FIX, "gsm8k.jsonl"), limit=1)) == 1
    f = tmp_path / "aime.json"
    f.write_text(json.dumps([{"problem": "p", "answer": "7", "id": 3}]))
    assert load_benchmark("aime25", path=str(f))[0].answer == "7"


def test_hub_call(monkeypatch):
    import datasets

    seen = []

    def fake(hub_id, config, split):
        seen.append((hub_id, config, split))
        return read_rows(os.path.join(FIX, "gsm8k.jsonl"))

    monkeypatch.setattr(datasets, "load_dataset", fake)
    assert [p.answer for p in load_benchmark("gsm8k")] == ["31", "37500"]
    load_benchmark("gsm8k", split="train")
    assert seen == [("openai/gsm8k", "main", "test"), ("openai/gsm8k", "main", "train")]


def test_errors(tmp_path):
    with pytest.raises(  # the registry's one line: a did-you-mean, then every registered name
        ValueError, match=r"unknown benchmark 'math501' \(did you mean 'math500'\?\); registered: gsm8k, math_train, math500"
    ):
        load_benchmark("math501")
    from agentrl_envs.tasks.benchmarks import BENCHMARKS, Benchmark, register

    with pytest.raises(ValueError, match=r"^benchmark 'gsm8k' is already registered \(by agentrl_envs.tasks"
                       r".benchmarks \(openai/gsm8k\)\); choose another name$"):
        register(Benchmark("gsm8k", "someone/else", "test", ("q",)))
    assert BENCHMARKS["gsm8k"].hub_id == "openai/gsm8k"
    with pytest.raises(FileNotFoundError, match="benchmark file not found: /no/such.jsonl"):
        load_benchmark("math500", path="/no/such.jsonl")
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported extension '.csv'"):
        load_benchmark("math500", path=str(bad))
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"question": "q", "solution": "s"}) + "\n")
    with pytest.raises(ValueError, match="row 0: missing column answer, problem; it has question, solution"):
        load_benchmark("math500", path=str(wrong))
    nobox = tmp_path / "nobox.jsonl"
    nobox.write_text(json.dumps({"problem": "q", "solution": "no box"}) + "\n")
    with pytest.raises(ValueError, match="row 0: solution has no"):
        load_benchmark("math_train", path=str(nobox))
