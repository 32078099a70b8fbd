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
"""A recipe may start from other recipe files, paths relative to its own folder: ``base: FILE`` (a
chain) or ``base: [PART, PART, ...]`` (a composition). Parts are merged left to right, then the
recipe's own keys replace theirs (a mapping such as ``credit_kwargs`` is replaced whole, never
merged). Two parts of one list may not set the same key: a list of parts reads as independent
pieces (env, model size, credit), so a key in two of them would make the order silently decide the
run; the recipe itself may set any key a part set."""

RUNS_DIR = "runs"
RECIPES_DIR = "recipes"


def default_output_dir(path: str | Path) -> str:
    """``runs/<path below the last recipes/ folder, without .yaml>``, e.g. recipes/bipace/x_7b.yaml
    -> runs/bipace/x_7b; ``runs/<file stem>`` for a recipe outside a recipes/ folder."""
    p = Path(path).resolve()
    parts = p.parts
    if RECIPES_DIR in parts[:-1]:
        at = len(parts) - 1 - parts[::-1].index(RECIPES_DIR)
        return str(Path(RUNS_DIR, *parts[at + 1:]).with_suffix(""))
    return str(Path(RUNS_DIR, p.stem))


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
        raise RecipeError(f"{shown} is empty: a recipe sets at least env_id (see recipes/ for examples)")
    if not isinstance(data, dict):
        raise RecipeError(f"{shown} must be a YAML mapping of config keys")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise RecipeError(f"{shown}: config keys must be names, got {bad[0]!r}")
    return data


def _base_names(base: Any, shown: str | Path) -> list[str]:
    """The ``base:`` value as a list of paths; RecipeError for anything else or a path named twice."""
    names = [base] if isinstance(base, str) else base
    if not isinstance(names, list) or not names or not all(isinstance(b, str) and b.strip() for b in names):
        raise RecipeError(f"{shown}: {BASE_KEY} must be the path of another recipe or a list of them, got {base!r}")
    twice = sorted({b for b in names if names.count(b) > 1})
    if twice:
        raise RecipeError(f"{shown}: {BASE_KEY} names {twice[0]} twice")
    return names


def _resolve(p: Path, shown: str | Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    """``p``'s keys over its bases' (recursively); ``chain``: the files that led here (cycles)."""
    data = _read_one(p, shown)
    if BASE_KEY not in data:
        return data
    names = _base_names(data.pop(BASE_KEY), shown)
    chain = (*chain, p.resolve())
    merged: dict[str, Any] = {}
    set_by: dict[str, str] = {}
    for name in names:
        base_path = (p.parent / name).resolve()
        if base_path in chain:
            cycle = " -> ".join(c.name for c in (*chain, base_path))
            raise RecipeError(f"{shown}: base recipes form a cycle ({cycle})")
        if not base_path.is_file():
            raise RecipeError(f"{shown}: base recipe not found: {name}")
        part = _resolve(base_path, f"{shown}: base {name}", chain)
        for k in part:
            if k in set_by:
                raise RecipeError(f"{shown}: key {k!r} is set by two of its bases, {set_by[k]} and {name}; "
                                  f"set it in one of them, or in {p.name} itself")
            set_by[k] = name
        merged.update(part)
    merged.update(data)
    return merged


def fold_dotted_keys(data: dict[str, Any], shown: str | Path) -> dict[str, Any]:
    """``KEY.NAME: v`` sets entry NAME of the mapping KEY (after KEY itself, if given whole): how a
    part sets one of ``algorithm_kwargs`` or ``credit_kwargs`` while another part sets others."""
    out = {k: v for k, v in data.items() if "." not in k}
    for k, v in data.items():
        if "." not in k:
            continue
        outer, inner = k.split(".", 1)
        if not outer or not inner:
            raise RecipeError(f"{shown}: key {k!r}: a dotted key is MAPPING_KEY.ENTRY")
        base = out.get(outer) or {}
        if not isinstance(base, dict):
            raise RecipeError(f"{shown}: key {k!r} sets an entry of {outer!r}, which is not a mapping")
        out[outer] = {**base, inner: v}
    return out


def read_recipe_file(path: str | Path) -> dict[str, Any]:
    """Parse ``path`` into a dict, with its ``base:`` recipes resolved, dotted keys folded into their
    mappings (``fold_dotted_keys``) and ``output_dir`` derived from the path unless set
    (``default_output_dir``); RecipeError (one line) if a file is missing, empty, not YAML, not a
    mapping, repeats a key, two parts of one base list set the same key, or the bases form a cycle."""
    data = fold_dotted_keys(_resolve(Path(path), path, ()), path)
    data.setdefault("output_dir", default_output_dir(path))
    return data


def apply_recipe_env(data: dict[str, Any]) -> None:
    """Export the recipe's ``env:`` mapping (pops it from ``data``): its values are defaults, and a
    variable the caller already set keeps the caller's value (``OMP_NUM_THREADS=2 agentrl train
    R.yaml`` runs on two threads whatever R says; a demo or bench that sets the threads of a phase
    gets them; the recipe once overrode them, and `agentrl bench async --sync-threads 2` ran on one).

    Call it before torch, transformers or huggingface_hub are imported: they read variables such
    as OMP_NUM_THREADS and HF_HUB_OFFLINE once, at import.
    """
    import os

    env_vars = data.pop("env", None) or {}
    if not isinstance(env_vars, dict):
        raise RecipeError("recipe key 'env' must be a mapping of environment variables")
    for k, v in env_vars.items():
        os.environ.setdefault(str(k), str(v))
