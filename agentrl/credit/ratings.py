"""SEPO's rating protocol (arXiv 2603.21563, Sec. 3.3): the prompt each role answers after a
verified outcome, and the parser that turns its reply into a (Thinker share, Solver share) pair.
The reward formulas that consume the ratings are in ``collab.py``; the parser's fallbacks and
where they depart from the authors' code are in this folder's README ("SEPO's rating parser")."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

THINKER, SOLVER = "thinker", "solver"
ROLES = (THINKER, SOLVER)

LEVELS = tuple((round(0.1 * k, 1), round(1 - 0.1 * k, 1)) for k in range(9, 0, -1))
"""The 9 admissible (Thinker share, Solver share) pairs: (0.9, 0.1), ..., (0.1, 0.9)."""
OUTCOMES = {True: "correct", False: "incorrect"}


@dataclass(frozen=True)
class Rating:
    """One role's parsed rating of one rollout."""

    thinker: float
    """The Thinker's share (credit if correct, responsibility if wrong)."""
    solver: float
    """The Solver's share (1 - thinker)."""
    valid: bool
    """False when nothing parsed and the (0.5, 0.5) fallback was used."""
    how: str
    """'json', 'regex' or 'fallback'."""


def _share(x: Any) -> tuple[float, bool] | None:
    """One number of a pair and whether it is a percentage ('70%', or a number above 1)."""
    text = str(x).strip()
    try:
        v = float(text.removesuffix("%").strip())
    except ValueError:
        return None
    pct = text.endswith("%") or v > 1.0
    return (v / 100.0 if pct else v), pct


def _level(pair: Any) -> tuple[float, float] | None:
    """The level a pair names, or None: exactly two numbers, both fractions or both percentages."""
    if isinstance(pair, str | bytes) or not hasattr(pair, "__len__") or len(pair) != 2:
        return None
    a, b = (_share(x) for x in pair)
    if a is None or b is None or a[1] != b[1]:
        return None
    for lv in LEVELS:
        if abs(a[0] - lv[0]) < 1e-6 and abs(b[0] - lv[1]) < 1e-6:
            return lv
    return None


_RX_OUTCOME = re.compile(r"outcome\W{0,4}(correct|incorrect|wrong)", re.I)
_NUM = r"(\d+(?:\.\d+)?%?|\.\d+)"
# two numbers after a "pair" label, not followed by a third (a three-number pair names no level)
_RX_PAIR = re.compile(rf"pair[^\w.]{{0,6}}{_NUM}\s*[,;/ ]\s*{_NUM}(?!\s*[,;/]?\s*\.?\d)", re.I)


def _first_rating_object(text: str) -> dict | None:
    """The first JSON object of ``text`` that has an ``outcome`` or ``pair`` key (the rating)."""
    dec = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and ("outcome" in obj or "pair" in obj):
            return obj
    return None


def parse_rating(text: str, correct: bool) -> Rating:
    """Parse a rater's reply against the verifier's outcome (the module doc; the credit README
    gives each fallback choice and how the authors' code differs)."""
    want = OUTCOMES[bool(correct)]
    obj = _first_rating_object(text)
    if obj is not None and str(obj.get("outcome", "")).strip().lower() == want:
        lv = _level(obj.get("pair"))
        if lv:
            return Rating(lv[0], lv[1], True, "json")
    said = _RX_OUTCOME.search(text)
    said_ok = said is None or said.group(1).lower().replace("wrong", "incorrect") == want
    for m in _RX_PAIR.finditer(text):
        lv = _level(m.groups())
        if lv and said_ok:
            return Rating(lv[0], lv[1], True, "regex")
    return Rating(0.5, 0.5, False, "fallback")


RATING_TEMPLATE = (
    "You were the {me} in a two-person team solving the problem below: the Thinker wrote a plan "
    "and the Solver wrote the final answer from it. A verifier checked the final answer: it is "
    "{outcome}.\n\nProblem:\n{problem}\n\nThinker's plan:\n{thinker}\n\nSolver's answer:\n{solver}\n\n"
    "Split the {share} between the Thinker and the Solver. Choose exactly one pair "
    "[Thinker share, Solver share] from: {levels}. Reply with one JSON object and nothing else:\n"
    '{"outcome": "{outcome}", "pair": [Thinker share, Solver share], "brief_reason": "one sentence"}'
)
"""The rating prompt both roles answer (SEPO, Sec. 3.3): ``rating_prompt`` fills it in."""
SHARE = {True: "credit for the correct answer", False: "responsibility for the wrong answer"}


def rating_prompt(
    rater: str, problem: str, thought: str, answer: str, correct: bool, template: str = RATING_TEMPLATE
) -> str:
    """The rating prompt for ``rater`` ('thinker' or 'solver'); a recipe may pass its own
    template with the same fields: {me} {outcome} {problem} {thinker} {solver} {share} {levels}."""
    if rater not in ROLES:
        raise ValueError(f"rating_prompt: rater {rater!r} must be one of {', '.join(ROLES)}")
    fields_ = {
        "me": rater.capitalize(),
        "outcome": OUTCOMES[bool(correct)],
        "problem": problem,
        "thinker": thought,
        "solver": answer,
        "share": SHARE[bool(correct)],
        "levels": ", ".join(f"[{a}, {b}]" for a, b in LEVELS),
    }
    return re.sub(r"\{(\w+)\}", lambda m: fields_.get(m.group(1), m.group(0)), template)
