"""Evaluation, one door: ``agentrl eval`` (``agentrl.evaluation.cli``; also ``python -m
agentrl.evaluation``). Every episode is played by ``agentrl.rollout.run_episodes``, the loop
training plays, with the settings the policy was trained with.

* ``checkpoint``: a checkpoint on an env split, paper-style tables (``evaluate``,
  ``markdown_table``, ``tool_tables``); the notebook ``notebooks/evaluate_checkpoints.ipynb``.
* ``heldout``: a greedy policy on fixed held-out tasks with per-task outcomes, for paired
  comparisons (``agentrl demo``, ``agentrl arena``).
* ``collab``: a collaboration run (CCPO/SEPO) per benchmark, full pipeline and last role alone;
  ``agentrl eval`` picks it for a folder holding ``collab.json``.
"""

from agentrl.evaluation.checkpoint import (
    DEFAULT_EPISODES,
    EvalError,
    EvalResult,
    cell,
    evaluate,
    load_policy,
    markdown_table,
    resolve_settings,
    row_labels,
    summarize,
    tool_tables,
)
from agentrl.evaluation.heldout import HeldOutSettings, evaluate_wins, paired_difference

__all__ = [
    "DEFAULT_EPISODES",
    "EvalError",
    "EvalResult",
    "HeldOutSettings",
    "cell",
    "evaluate",
    "evaluate_wins",
    "load_policy",
    "markdown_table",
    "paired_difference",
    "resolve_settings",
    "row_labels",
    "summarize",
    "tool_tables",
]
