"""Where ToolReason's tasks come from, and which corpus their searches run over.

Built-in families (offline): ``math`` (reasoning-gym, ``agentrl_envs.tasks.math``) and
``multihop`` (``agentrl_envs.tasks.qa.generate_kb``; search runs over its documents). Dataset
families (GPU runs) name a math benchmark of ``agentrl_envs.tasks.benchmarks`` or a QA dataset of
``agentrl_envs.tasks.qa``, each with the loader's keyword arguments per split::

    {"hotpotqa": {"valid": {"path": "hotpot_dev.jsonl", "limit": 500}},
     "gsm8k": {"train": {"split": "train"}, "valid": {}}}

A QA dataset family searches the paragraphs shipped with its examples (both splits; Bamboogle
ships none). Everything is loaded once per process.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from agentrl_envs.tasks import qa
from agentrl_envs.toolreason.tools import SearchIndex, kb_index

BUILTIN = ("math", "multihop")
SPLITS = ("train", "valid")
MATH_TASKS = ("gsm_symbolic", "basic_arithmetic", "chain_sum")
VALID_SEED_OFFSET = 100_000  # valid math problems come from generator seeds disjoint from train's


@dataclass(frozen=True)
class Task:
    """One problem as the env sees it."""

    question: str
    answers: tuple[str, ...]
    family: str
    id: str
    kind: str
    """``math`` (graded by math-verify) or ``qa`` (graded by token-F1)."""
    hops: tuple[str, ...] = ()
    """Search queries of the expert's plan (KB: the documents to read, in order)."""
    code: str = ""
    """Math: what the expert computes with the python tool."""


def _math_code(answer: str, expression: str | None) -> str:
    return expression if expression else f"answer = {answer!r}\nprint(answer)"


@functools.lru_cache(maxsize=16)
def math_tasks(split: str, names: tuple[str, ...], n: int, seed: int) -> tuple[Task, ...]:
    """reasoning-gym problems of ``split`` (valid: generator seeds offset by VALID_SEED_OFFSET)."""
    from agentrl_envs.tasks.math import reasoning_gym_problems

    base = seed + (VALID_SEED_OFFSET if split == "valid" else 0)
    return tuple(Task(p.question, (p.answer,), "math", p.id, "math",
                      code=_math_code(p.answer, p.meta.get("rg_metadata", {}).get("expression")))
                 for p in reasoning_gym_problems(list(names), n=n, seed=base))


@functools.lru_cache(maxsize=16)
def kb_tasks(split: str, kb_seed: int) -> tuple[Task, ...]:
    kb, _ = kb_index(kb_seed)
    return tuple(Task(q.question, q.answers, "multihop", q.id, "qa", hops=q.hops) for q in kb.split[split])


def check_datasets(datasets: dict[str, dict] | None) -> dict[str, dict]:
    """Validate the dataset families' spec (see the module docstring); return it as plain dicts."""
    from agentrl_envs.tasks.benchmarks import BENCHMARKS

    out: dict[str, dict] = {}
    for fam, spec in (datasets or {}).items():
        if fam in BUILTIN or (fam not in BENCHMARKS and fam not in qa.DATASETS):
            raise ValueError(f"dataset family {fam!r}: must be a math benchmark ({', '.join(BENCHMARKS)}) or "
                             f"a QA dataset ({', '.join(qa.DATASETS)})")
        if not isinstance(spec, dict) or not spec or set(spec) - set(SPLITS):
            raise ValueError(f"dataset family {fam!r}: give loader kwargs per split (train/valid), "
                             "e.g. {'valid': {'path': ...}}")
        out[fam] = {s: dict(kw or {}) for s, kw in spec.items()}
    return out


@functools.lru_cache(maxsize=32)
def _dataset_tasks(family: str, split: str, kwargs_json: str) -> tuple[Task, ...]:
    kw = json.loads(kwargs_json)
    if family in qa.DATASETS:
        exs = qa.load_qa_dataset(family, split=kw.pop("split", split), **kw)
        return tuple(Task(e.question, e.answers, family, e.id, "qa", hops=(e.question,)) for e in exs)
    from agentrl_envs.tasks.benchmarks import load_benchmark

    return tuple(Task(p.question, (p.answer,), family, p.id, "math", code=_math_code(p.answer, None))
                 for p in load_benchmark(family, **kw))


def dataset_tasks(family: str, split: str, spec: dict[str, Any]) -> tuple[Task, ...]:
    """Tasks of a dataset family in ``split`` (ValueError if the spec has no such split)."""
    if split not in spec:
        raise ValueError(f"dataset family {family!r} has no {split!r} split in its spec; "
                         f"it has {sorted(spec)}")
    return _dataset_tasks(family, split, json.dumps(spec[split], sort_keys=True))


@functools.lru_cache(maxsize=16)
def _dataset_index(family: str, spec_json: str) -> SearchIndex | None:
    spec = json.loads(spec_json)
    docs: list[qa.Document] = []
    for split, kw in sorted(spec.items()):
        kw = dict(kw)
        docs += qa.corpus_from_examples(qa.load_qa_dataset(family, split=kw.pop("split", split), **kw))
    docs = list(dict.fromkeys(docs))
    return SearchIndex(docs) if docs else None


def dataset_index(family: str, spec: dict[str, Any]) -> SearchIndex | None:
    """Search index over a QA family's paragraphs (None when its examples ship none)."""
    return _dataset_index(family, json.dumps(spec, sort_keys=True))
