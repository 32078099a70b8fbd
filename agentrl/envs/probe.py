"""Make an env with a one-line error, and probe a task setting once before a run uses it.

Here (not in the rollout) so that the config can check a recipe's env settings without importing
the rollout: the data flows env -> rollout -> trainer, and so do the imports.
"""

from __future__ import annotations

from typing import Any

from agentrl.recipe_file import first_line


def make_env(env_id: str, env_kwargs: dict[str, Any] | None = None):
    """``gymnasium.make(env_id, **env_kwargs)``; a bad id or bad kwargs raise a one-line ValueError."""
    import gymnasium as gym

    import agentrl.envs  # noqa: F401  (registers agentrl/* ids)

    try:
        return gym.make(env_id, **(env_kwargs or {}))
    except Exception as e:
        raise ValueError(f"cannot make {env_id} with env_kwargs {env_kwargs or {}}: {first_line(e)}") from None


def probe_task(env_id: str, env_kwargs: dict[str, Any] | None, seed: int | None,
               options: dict[str, Any]) -> None:
    """Make the env and reset it once: bad env kwargs or reset options (split, families) raise a
    one-line ValueError here, instead of turning every episode of a run into an env error."""
    env = make_env(env_id, env_kwargs)
    try:
        env.reset(seed=seed, options=options)
    except Exception as e:
        raise ValueError(f"cannot reset {env_id} with task options {options}: {first_line(e)}") from None
    finally:
        env.close()
