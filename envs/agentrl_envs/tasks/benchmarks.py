"""Loaders for the math benchmarks of the CCPO/SEPO paper (arXiv 2603.21563 Sec. 5.1) and GSM8K.

Each benchmark (``BENCHMARKS``: gsm8k, math_train, math500, aime24, aime25, amc23,
gaokao2023en, minervamath) is read from the Hugging Face hub (``datasets.load_dataset``) or from
a local ``.jsonl`` / ``.json`` / ``.parquet`` file in the same column schema, and becomes a list
of ``MathProblem``. ``math_train`` is MATH's 7.5k training split (the paper's training set); the
others are evaluation sets. The question column is the first of ``question_columns`` present, so
mirrors that swap ``problem`` and ``question`` load too. Hub ids, splits and columns:
docs/environments.md, "Math and QA tasks".
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..registry import Registry
from .math import MathProblem, clean_gold, last_boxed


def _gsm8k_answer(row: dict) -> str:
    # the final answer follows '####' at the end of the worked solution; some carry commas
    return row["answer"].rsplit("####", 1)[-1].strip().replace(",", "")


def _solution_boxed(row: dict) -> str:
    if row.get("answer") not in (None, ""):
        return clean_gold(row["answer"])
    boxed = last_boxed(row["solution"])
    if boxed is None:
        raise ValueError("solution has no \\boxed{} answer")
    return boxed


def _answer(row: dict) -> str:
    return clean_gold(row["answer"])


@dataclass(frozen=True)
class Benchmark:
    """Where a benchmark lives and how a row becomes a ``MathProblem``."""

    name: str
    """Our name for it (``load_benchmark``'s first argument)."""
    hub_id: str
    """Hugging Face dataset id."""
    split: str
    """Split read by default (the evaluation split; ``train`` for training sets)."""
    question_columns: tuple[str, ...]
    """Candidate question columns, first present wins."""
    gold: Callable[[dict], str] = _answer
    """Row -> gold answer string."""
    answer_columns: tuple[str, ...] = ("answer",)
    """Columns ``gold`` needs (checked before use: a missing one is a one-line error)."""
    config: str | None = None
    """Hub config name, if the dataset has several."""
    id_column: str | None = None
    """Row id column; None gives ``name/row-index``."""
    meta_columns: tuple[str, ...] = ()
    """Columns copied into ``MathProblem.meta`` when present."""


BENCHMARKS: Registry[Benchmark] = Registry("benchmark")
"""Benchmark name -> ``Benchmark`` (``agentrl_envs.registry``: a taken name is refused)."""


def register(b: Benchmark) -> Benchmark:
    """Register ``b`` under its name."""
    return BENCHMARKS.add(b.name, b, by=f"{__name__} ({b.hub_id})")


register(Benchmark("gsm8k", "openai/gsm8k", "test", ("question",), _gsm8k_answer, config="main"))
register(
    Benchmark(
        "math_train",
        "DigitalLearningGmbH/MATH-lighteval",
        "train",
        ("problem",),
        _solution_boxed,
        answer_columns=("solution",),
        meta_columns=("level", "type"),
    )
)
register(
    Benchmark(
        "math500",
        "HuggingFaceH4/MATH-500",
        "test",
        ("problem",),
        id_column="unique_id",
        meta_columns=("subject", "level"),
    )
)
register(Benchmark("aime24", "HuggingFaceH4/aime_2024", "train", ("problem",), id_column="id"))
register(Benchmark("aime25", "math-ai/aime25", "test", ("problem", "question"), id_column="id"))
register(Benchmark("amc23", "math-ai/amc23", "test", ("question", "problem"), id_column="id"))
register(
    Benchmark(
        "gaokao2023en",
        "MARIO-Math-Reasoning/Gaokao2023-Math-En",
        "train",
        ("question", "problem"),
        id_column="id",
    )
)
register(Benchmark("minervamath", "math-ai/minervamath", "test", ("question", "problem")))


def read_rows(path: str) -> list[dict[str, Any]]:
    """Rows of a local ``.jsonl`` / ``.json`` (a list of objects) / ``.parquet`` file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"benchmark file not found: {path}")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if ext in (".jsonl", ".json"):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if ext == ".json" and text.lstrip().startswith("["):
            return json.loads(text)
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    raise ValueError(f"benchmark file {path}: unsupported extension {ext!r}; use .jsonl, .json or .parquet")


def _to_problem(b: Benchmark, row: dict, i: int) -> MathProblem:
    q = next((c for c in b.question_columns if c in row), None)
    missing = [c for c in b.answer_columns if c not in row] + ([] if q else [" or ".join(b.question_columns)])
    if missing:
        raise ValueError(
            f"benchmark {b.name!r} row {i}: missing column {', '.join(missing)}; it has {', '.join(sorted(row))}"
        )
    try:
        gold = b.gold(row)
    except ValueError as e:
        raise ValueError(f"benchmark {b.name!r} row {i}: {e}") from None
    rid = row.get(b.id_column) if b.id_column else None
    return MathProblem(
        question=str(row[q]).strip(),
        answer=gold,
        source=b.name,
        id=str(rid) if rid is not None else f"{b.name}/{i}",
        meta={c: row[c] for c in b.meta_columns if c in row},
    )


def load_benchmark(
    name: str, path: str | None = None, split: str | None = None, limit: int | None = None
) -> list[MathProblem]:
    """Problems of benchmark ``name`` from ``path`` (a local file) or else from the hub.

    ``split`` overrides the benchmark's default split (hub only); ``limit`` keeps the first
    ``limit`` rows. Errors are one line: an unknown name lists the known ones, a missing file
    names the path, a missing column names the columns the file has.
    """
    b = BENCHMARKS.lookup(name)
    if path is not None:
        rows = read_rows(path)
    else:
        import datasets

        rows = datasets.load_dataset(b.hub_id, b.config, split=split or b.split)
    out = []
    for i, row in enumerate(rows):
        if limit is not None and i >= limit:
            break
        out.append(_to_problem(b, dict(row), i))
    return out
