"""What the config builds for the other stages, each in one place: the credit module's kwargs and
the rollout's settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrl.credit.registry import credit_kwargs  # noqa: F401  (the config builds it for every caller)
from agentrl.rollout.settings import RolloutSettings


def rollout_settings(cfg, **overrides) -> RolloutSettings:
    """``RolloutSettings`` from a config (or any object or mapping with its rollout keys, e.g. a
    run's recorded settings), plus ``overrides`` (any ``RolloutSettings`` field)."""
    get = cfg.get if isinstance(cfg, Mapping) else lambda k: getattr(cfg, k)
    kw: dict[str, Any] = dict(
        env_id=get("env_id"), env_kwargs=dict(get("env_kwargs") or {}), context_mode=get("context_mode"),
        history_length=get("history_length"), max_turns=get("max_turns"), max_prompt_tokens=get("max_prompt_tokens"),
        prefill=get("prefill"), stop_strings=tuple(get("stop_strings") or ()))
    kw.update(overrides)
    return RolloutSettings(**kw)
