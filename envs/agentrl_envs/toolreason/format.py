"""APPO's response format: parse one model turn, score the answer.

A turn is free text (the model's thinking) followed by exactly one of

* ``<python>code</python>``: run the code (the python tool);
* ``<search>query</search>``: search the local corpus;
* ``<answer>...\\boxed{final}...</answer>``: the final answer (the last ``\\boxed{}`` inside).

The first closing tag ends the turn, as a generation stop string would: text after it is
ignored. Anything else (no complete block, an empty body, an answer without a box) is a bad
format. Reward (arXiv:2606.12384's code): -1 for a bad format; otherwise the answer's score
(token-F1 for QA, math-verify correctness for math) plus ``bonus`` when the score is > 0 and
both tools were used in the episode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentrl_envs.tasks.math import answers_match, last_boxed
from agentrl_envs.tasks.qa import exact_match, token_f1

TOOLS = ("python", "search")
FORMAT_PENALTY = -1.0
BOTH_TOOLS_BONUS = 0.1
MATH_REWARDS = ("verify", "f1")

_BLOCK = re.compile(r"<(python|search|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Turn:
    """One parsed model turn."""

    kind: str | None
    """``python``, ``search``, ``answer``, or None for a bad format."""
    body: str = ""
    """Tool input, or the whole ``<answer>`` content."""
    boxed: str | None = None
    """Answer turns: the content of the last ``\\boxed{}``."""
    error: str = ""
    """Why the turn is a bad format."""


def parse_turn(response: str | None) -> Turn:
    """The first complete ``<python>``, ``<search>`` or ``<answer>`` block of ``response``."""
    if not response:
        return Turn(None, error="empty response")
    m = _BLOCK.search(response)
    if m is None:
        return Turn(None, error="no complete <python>, <search> or <answer> block")
    kind, body = m.group(1).lower(), m.group(2).strip()
    if not body:
        return Turn(None, error=f"empty <{kind}> block")
    if kind == "answer":
        boxed = last_boxed(body)
        if boxed is None or not boxed:
            return Turn(None, body=body, error="the answer has no \\boxed{...}")
        return Turn("answer", body=body, boxed=boxed)
    return Turn(kind, body=body)


def answer_score(boxed: str | None, golds: tuple[str, ...], kind: str, math_reward: str = "verify") -> float:
    """Score of a boxed answer: token-F1 (QA, and math with ``math_reward="f1"``) or 0/1 math-verify."""
    if kind == "math" and math_reward == "verify":
        return float(any(answers_match(boxed, g) for g in golds))
    return token_f1(boxed, golds)


def answer_won(boxed: str | None, golds: tuple[str, ...], kind: str) -> bool:
    """Success flag: verified (math) or exact match after normalisation (QA)."""
    if kind == "math":
        return any(answers_match(boxed, g) for g in golds)
    return bool(exact_match(boxed, golds))


def appo_reward(score: float | None, used: set[str], bonus: float = BOTH_TOOLS_BONUS,
                penalty: float = FORMAT_PENALTY) -> float:
    """-1 (``penalty``) for a bad format (``score=None``); else score + bonus if score > 0 and both
    tools were used."""
    if score is None:
        return penalty
    return score + (bonus if score > 0 and set(TOOLS) <= set(used) else 0.0)
