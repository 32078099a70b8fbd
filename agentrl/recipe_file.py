"""Reading a recipe file: a YAML mapping of config keys.

Kept free of heavy imports (TRL takes 10-16 s to import) so that ``agentrl launch`` can read the
recipe's ``accelerate_config`` before handing over to ``accelerate launch``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl_envs.probe import first_line  # noqa: F401  (re-exported: the one-line error helper)


class RecipeError(ValueError):
    """A user error in a recipe or CLI override: printed as one line, exit code 2."""


def _unique_key_loader():
    """A yaml SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently: a recipe with ``learning_rate`` twice trained at the second value)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    dup = key in seen
                except TypeError:  # an unhashable key: the base class reports it
                    dup = False
                if dup:
                    raise RecipeError(f"key {key!r} is given twice (line {key_node.start_mark.line + 1})")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


BASE_KEY = "base"
"""A recipe may name another recipe (path relative to its own folder) whose keys it starts from;
a key the recipe sets replaces the base's value (mappings such as ``credit_kwargs`` included)."""


def _read_one(p: Path, shown: str | Path) -> dict[str, Any]:
    import yaml

    if not p.is_file():
        raise RecipeError(f"recipe not found: {shown}")
    try:
        data = yaml.load(p.read_text(), Loader=_unique_key_loader())
    except RecipeError as e:
        raise RecipeError(f"{shown}: {e}") from None
    except yaml.YAMLError as e:
        raise RecipeError(f"{shown} is not valid YAML ({first_line(e)})") from None
    if data is None or data == {}:
        raise RecipeError(f"{shown} is empty: a recipe sets at least env_id and output_dir "
                          "(see recipes/ for examples)")
    if not isinstance(data, dict):
        raise RecipeError(f"{shown} must be a YAML mapping of config keys")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise RecipeError(f"{shown}: config keys must be names, got {bad[0]!r}")
    return data


def read_recipe_file(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Parse ``path`` into a dict, with its ``base:`` recipes resolved; RecipeError (one line) if a
    file is missing, empty, not YAML, not a mapping, repeats a key, or the bases form a cycle."""
    p = Path(path)
    data = _read_one(p, path)
    base = data.pop(BASE_KEY, None)
    if base is None:
        return data
    if not isinstance(base, str) or not base.strip():
        raise RecipeError(f"{path}: {BASE_KEY} must be the path of another recipe, got {base!r}")
    here = p.resolve()
    chain = (*_chain, here)
    base_path = (p.parent / base).resolve()
    if base_path in chain:
        cycle = " -> ".join(c.name for c in (*chain, base_path))
        raise RecipeError(f"{path}: base recipes form a cycle ({cycle})")
    if not base_path.is_file():
        raise RecipeError(f"{path}: base recipe not found: {base}")
    merged = read_recipe_file(base_path, chain)
    merged.update(data)
    return merged


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
