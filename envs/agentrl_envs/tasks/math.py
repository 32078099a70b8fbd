"""Math problems, the ``\\boxed{}`` answer extractor and the verifier.

A problem (``MathProblem``: question, gold answer never wrapped in ``\\boxed{}``) comes from a
reasoning-gym generator (offline) or a benchmark loader (``agentrl_envs.tasks.benchmarks``). The
verifier is math-verify on the content of the response's LAST ``\\boxed{...}``, run without its
``signal.alarm`` timeouts (so it works in worker threads) and bounded by ``MAX_ANSWER_CHARS``
instead. ``reasoning_gym_score`` gives reasoning-gym's scorer the extracted answer only (it reads
the first number of its input). Why: docs/environments.md, "Math and QA tasks".
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field
from typing import Any

MAX_ANSWER_CHARS = 1000
"""Boxed answers longer than this score as wrong without parsing: with math-verify's timeouts
off (see module doc), a pathological LaTeX string could otherwise keep sympy busy for minutes."""

SCALES = ("01", "pm1")
"""Verifier reward scales: 0/1 (the CCPO paper's App. B analysis, the authors' v1 code) or
-1/+1 (SEPO's R_ver, arXiv 2603.21563 Sec. 3.3)."""

MATH_TASKS = (
    "gsm_symbolic",
    "basic_arithmetic",
    "chain_sum",
    "decimal_arithmetic",
    "products",
    "fraction_simplification",
)
"""reasoning-gym datasets with numeric answers that the math verifier grades well. Any other
reasoning-gym dataset name is accepted too."""


@dataclass(frozen=True)
class MathProblem:
    """One math problem with its gold answer."""

    question: str
    """The problem statement, as the model should see it (no answer-format instruction)."""
    answer: str
    """Gold answer: LaTeX or plain text, never wrapped in ``\\boxed{}`` or ``$...$``."""
    source: str
    """Where it came from: a reasoning-gym dataset name or a benchmark name (``math500``, ...)."""
    id: str
    """Stable id inside ``source`` (reasoning-gym: ``name/seed/index``; benchmarks: their id)."""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Source-specific extras (level, subject, reasoning-gym's metadata for its own scorer)."""


# ============================================================================ boxed answers
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _box_spans(text: str) -> list[tuple[int, int, int]]:
    """(start of ``\\boxed``, start of content, end of content) of every balanced box, in order."""
    spans = []
    for m in _BOX.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            spans.append((m.start(), m.end(), i - 1))
    return spans


def last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, stripped.

    Nested braces are kept: ``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``. An unclosed box is
    skipped; no box at all gives None. A box nested inside another counts by its start, so the
    outer one of ``\\boxed{\\boxed{3}}`` is not "last": its inner content ``3`` is returned.
    """
    spans = _box_spans(text)
    if not spans:
        return None
    _, a, b = spans[-1]
    return text[a:b].strip()


def remove_boxed(text: str) -> str:
    """Delete every ``\\boxed{...}`` span (the box and its content) from ``text``.

    Used on the Thinker's thought, which must not state the final answer (arXiv 2603.21563
    Sec. 3, Think-Solve): dropping the content too, not only the wrapper, keeps a boxed final
    answer from leaking to the Solver. Unclosed boxes are left as they are.
    """
    out, pos = [], 0
    for s, _, e in _box_spans(text):
        if s < pos:  # nested inside a span already removed
            continue
        out.append(text[pos:s])
        pos = e + 1
    out.append(text[pos:])
    return "".join(out)


def clean_gold(answer: Any) -> str:
    """Gold answer as a plain string: numbers without a trailing ``.0``, ``$...$`` and a
    ``\\boxed{}`` wrapper removed (reasoning-gym writes ``$\\frac{23}{131}$``; some benchmark
    files store AMC answers as floats)."""
    if isinstance(answer, float) and answer.is_integer():
        answer = int(answer)
    s = str(answer).strip()
    while len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1].strip()
    boxed = last_boxed(s)
    if boxed is not None and s.startswith(("\\boxed", "\\fbox")) and s.endswith("}"):
        s = boxed
    return s


# ============================================================================ verifier
class _DropTimeoutNotice(logging.Filter):
    # math-verify logs a warning on every call made with timeouts off; we turn them off on purpose
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutNotice())


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple:
    from math_verify import parse

    return tuple(parse("\\boxed{" + gold + "}", parsing_timeout=None))


def answers_match(answer: str | None, gold: str) -> bool:
    """math-verify equivalence of an extracted answer and a gold answer (both bare, no box)."""
    if answer is None or not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
        return False
    from math_verify import parse, verify

    g = list(_parse_gold(clean_gold(gold)))
    p = parse("\\boxed{" + answer + "}", parsing_timeout=None)
    if not g or not p:
        return False
    return bool(verify(g, p, timeout_seconds=None))


def check_scale(scale: str) -> str:
    if scale not in SCALES:
        raise ValueError(f"verifier scale {scale!r}: must be one of {', '.join(map(repr, SCALES))}")
    return scale


def verify_response(response: str, gold: str, scale: str = "01") -> float:
    """Reward of one response: its last ``\\boxed{}`` against ``gold`` with math-verify.

    ``scale='01'`` gives 1.0 / 0.0; ``scale='pm1'`` gives +1.0 / -1.0. A response with no box
    is wrong. Thread-safe (no signals); see the module doc for the timeout trade-off.
    """
    check_scale(scale)
    ok = answers_match(last_boxed(response), gold)
    return 1.0 if ok else (0.0 if scale == "01" else -1.0)


# ============================================================================ reasoning-gym
def reasoning_gym_problems(
    names: str | list[str] | tuple[str, ...] = "gsm_symbolic",
    n: int = 100,
    seed: int = 0,
    task_kwargs: dict[str, dict[str, Any]] | None = None,
) -> list[MathProblem]:
    """``n`` problems from reasoning-gym, deterministic in (names, n, seed, task_kwargs).

    Several names are interleaved round-robin (problem i comes from ``names[i % len(names)]``);
    dataset k draws from seed ``seed + k`` so two tasks never share a random stream.
    ``task_kwargs[name]`` goes to that dataset's config (e.g. ``{"chain_sum": {"max_terms": 4}}``).
    """
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    names = [names] if isinstance(names, str) else list(names)
    if not names:
        raise ValueError("reasoning_gym_problems: names is empty; try one of " + ", ".join(MATH_TASKS))
    for name in names:
        if name not in DATASETS:
            raise ValueError(f"unknown reasoning-gym dataset {name!r}; math ones: {', '.join(MATH_TASKS)}")
    if n < 0:
        raise ValueError(f"reasoning_gym_problems: n={n} must be >= 0")
    task_kwargs = task_kwargs or {}
    counts = [len(range(k, n, len(names))) for k in range(len(names))]
    per = []
    for k, name in enumerate(names):
        if counts[k] == 0:
            per.append(None)
            continue
        per.append(
            reasoning_gym.create_dataset(name, size=counts[k], seed=seed + k, **task_kwargs.get(name, {}))
        )
    out = []
    for i in range(n):
        k, j = i % len(names), i // len(names)
        e = per[k][j]
        out.append(
            MathProblem(
                question=e["question"],
                answer=clean_gold(e["answer"]),
                source=names[k],
                id=f"{names[k]}/{seed + k}/{j}",
                meta={"rg_answer": e["answer"], "rg_metadata": e["metadata"]},
            )
        )
    return out


@functools.cache
def _rg_scorer(name: str):
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(name)


def reasoning_gym_score(problem: MathProblem, answer: str | None) -> float:
    """reasoning-gym's own score of an EXTRACTED answer (e.g. ``last_boxed(response)``).

    Its scorers read the first number of the string, so a whole response would be graded on
    whatever number it mentions first; None (no box) scores 0.0. Wrong answers score 0.01 in
    most of its tasks, not 0: threshold at 1.0 if a binary reward is wanted.
    """
    if answer is None or "rg_metadata" not in problem.meta:
        return 0.0
    entry = {
        "question": problem.question,
        "answer": problem.meta["rg_answer"],
        "metadata": problem.meta["rg_metadata"],
    }
    return float(_rg_scorer(problem.source)(answer, entry))
