"""The demo's evaluation: the sets of episodes each checkpoint is played on (practised goals or
games, unseen games of the practised types, the held-out split), greedy and sampled, timed and
metered per phase (``agentrl.demo``; docs/results/demo.md, docs/results/alfworld.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentrl.demo_goals import practised_seeds


def phase(meter, name: str):
    """``meter.phase(name)``, then freed heap pages back to the OS (so the next phase does not carry
    this one's peak as resident memory); nothing without a meter."""
    import contextlib

    from agentrl.memory_meter import release_freed_memory

    @contextlib.contextmanager
    def ctx():
        try:
            if meter is None:
                yield
            else:
                with meter.phase(name):
                    yield
        finally:
            release_freed_memory()

    return ctx()


def fresh_draws(design: dict, scale: dict) -> int:
    """Fresh episodes per practised goal: TextCraft redraws a goal's distractor recipes; an
    ALFWorld game (a design with ``games``) is the same on every reset, so one episode says all."""
    return 1 if "games" in design else scale["fresh_draws"]


def held_out_settings(argv: list[str], n_eval: int, eval_turns: int, families: list[str], split: str = "valid",
                      seeds: list[int] | None = None, max_batch: int = 0):
    """The recipe's own rollout settings (prompt style, history, completion length) on the valid
    goals (``split="train"`` with ``seeds``: on fresh episodes of the practised goals)."""
    from agentrl.config import load_recipe
    from agentrl.evaluation.heldout import HeldOutSettings

    cfg = load_recipe(argv[0], argv[1:])
    hs = HeldOutSettings.from_config(cfg, split=split, episodes=n_eval, families=families, seeds=seeds or None)
    hs.max_turns, hs.max_batch = eval_turns, max_batch
    return hs


def evaluate_sets(model_dir: Path, sets: dict, timings: dict[str, float], meter=None) -> dict[str, dict[str, Any]]:
    """Greedy evaluation of one checkpoint on each named set of episodes (timed per set)."""
    from agentrl.evaluation.heldout import evaluate_wins

    res = {}
    for name, hs in sets.items():
        t = time.time()
        with phase(meter, "eval"):
            res[name] = evaluate_wins(str(model_dir), hs)
        timings[f"eval_{name}_s"] = timings.get(f"eval_{name}_s", 0.0) + time.time() - t
    return res


def sampled_practised(model_dir: Path, hs, samples: int, seed: int, timings: dict[str, float], meter=None) -> list[float]:
    """Per practised game, the share of ``samples`` episodes won, sampled under the recipe's
    sampling settings with the evaluation's own key (the same before and after RL)."""
    from agentrl.evaluation.heldout import sampled_success

    t = time.time()
    with phase(meter, "eval"):
        rates = sampled_success(str(model_dir), hs, samples, seed=seed + 7919)
    timings["eval_sampled_s"] = timings.get("eval_sampled_s", 0.0) + time.time() - t
    return rates


def eval_sets(argv: list[str], design: dict, scale: dict, goals: list[int]) -> dict[str, Any]:
    """The greedy evaluation's sets of episodes: ``practised`` (fresh episodes of the practised
    goals), ``unseen`` where the design names an ``unseen_split`` (unseen games of the practised
    task types), ``heldout`` (the design's ``heldout_split``, default ``valid``). ``eval_episodes``
    None (or more than a split holds) plays each game of the split once."""
    fams, turns, sizes = design["families"], scale["eval_turns"], design.get("split_sizes", {})
    batch = design.get("eval_batch", 0)

    def n(split: str) -> int:
        want = scale["eval_episodes"]
        return sizes[split] if split in sizes and (want is None or want > sizes[split]) else want

    sets = {"practised": held_out_settings(argv, 0, turns, fams, "train",
                                           practised_seeds(goals, fresh_draws(design, scale), design["pool"]), batch)}
    if design.get("unseen_split"):
        sets["unseen"] = held_out_settings(argv, n(design["unseen_split"]), turns, fams, design["unseen_split"],
                                           max_batch=batch)
    split = design.get("heldout_split", "valid")
    sets["heldout"] = held_out_settings(argv, n(split), turns, fams, split, max_batch=batch)
    return sets
