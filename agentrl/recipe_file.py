"""Reading a recipe file: a YAML mapping of config keys.

Kept free of heavy imports (TRL takes 10-16 s to import) so that ``agentrl launch`` can read the
recipe's ``accelerate_config`` before handing over to ``accelerate launch``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class RecipeError(ValueError):
    """A user error in a recipe or CLI override: printed as one line, exit code 2."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty):
    what a one-line error shows of a library's multi-line message."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def read_recipe_file(path: str | Path) -> dict[str, Any]:
    """Parse ``path`` into a dict; RecipeError (one line) if missing, not YAML or not a mapping."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise RecipeError(f"recipe not found: {path}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise RecipeError(f"{path} is not valid YAML ({first_line(e)})") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path} must be a YAML mapping of config keys")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise RecipeError(f"{path}: config keys must be names, got {bad[0]!r}")
    return data


def apply_recipe_env(data: dict[str, Any]) -> None:
    """Export the recipe's ``env:`` mapping (pops it from ``data``).

    Call it before torch, transformers or huggingface_hub are imported: they read variables such
    as OMP_NUM_THREADS and HF_HUB_OFFLINE once, at import.
    """
    import os

    env_vars = data.pop("env", None) or {}
    if not isinstance(env_vars, dict):
        raise RecipeError("recipe key 'env' must be a mapping of environment variables")
    for k, v in env_vars.items():
        os.environ[str(k)] = str(v)
