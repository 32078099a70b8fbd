"""``RolloutSettings``: what ``run_episodes`` plays and how it keeps ranks in lock-step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.recipe_keys import default_of


@dataclass
class RolloutSettings:
    """Everything ``run_episodes`` needs besides the tasks, the generate callable and the tokenizer.

    The trainer builds one from its config (``AgentGRPOTrainer.rollout_settings``) and changes
    fields with ``dataclasses.replace`` for extra rollouts (e.g. counterfactuals with other
    ``env_kwargs``); eval, the demo and SFT build theirs directly. Its defaults are the recipe
    keys' (``agentrl.recipe_keys``, where each is declared once).
    """

    env_id: str
    """A registered gymnasium id (``agentrl/TextCraft-v0``). Used to make the default env batch."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``gymnasium.make`` (default env batch only)."""
    context_mode: str = default_of("context_mode")
    """Name of a registered context (``agentrl.rollout.contexts``): ``window`` (one prompt per
    step), ``trajectory`` (one growing sequence per episode), or one registered by a plug-in."""
    history_length: int = default_of("history_length")
    """(observation, action) pairs in a window prompt; shrinks turn by turn when over-long."""
    max_turns: int | None = None
    """Step cap per episode; None = the env's ``max_episode_steps`` (30 when it has none)."""
    max_prompt_tokens: int = default_of("max_prompt_tokens")
    """Prompt budget per turn. window: drop history pairs, then end the episode truncated;
    trajectory: the whole sequence so far must fit, else the episode ends truncated."""
    prefill: str = default_of("prefill")
    """Text put right after the assistant header; it is part of the response the env sees."""
    stop_strings: tuple[str, ...] = ()
    """A turn's response ends after the first of these strings (``cut_at_stop``): the tokens a
    generator produced past it are dropped before the env sees the response or a row is built."""
    progress: bool = False
    """Show a tqdm bar over turns."""
    sync: Callable[[int], int] | None = None
    """Lock-step hook for distributed training, called once per turn with this rank's count of
    active episodes; returns the largest count over ranks. While that is above 0 a rank with
    nothing left still calls ``generate`` (with ``dummy_prompt``): every rank makes the same
    number of generate calls (ZeRO-3 parameter gathers and vLLM are collectives)."""
    dummy_prompt: list[int] | None = None
    """Prompt ids of the filler row a finished rank sends (default: the first prompt of the call)."""
    pad_batch: bool = False
    """Call ``generate`` with as many prompts as the rank with the most active episodes has
    (``sync``'s answer), filled with ``dummy_prompt``: needed where ranks must pass equal list
    lengths (vLLM server mode, tensor-parallel colocate). Slots finished on every rank are not
    generated for."""
    fingerprints_after: Callable[[list[list[int]]], list[list[float]]] | None = None
    """When set, the steps' fingerprints are computed by one call with every step's prompt after
    the last turn (instead of coming back from ``generate`` each turn): under vLLM the trainer
    runs one truncated forward pass per rollout, with one ZeRO-3 parameter gather."""
