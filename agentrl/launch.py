"""``agentrl launch RECIPE.yaml [--field value ...]``: exec ``accelerate launch`` with the
accelerate config the recipe names (key ``accelerate_config``).

Without that key: ``accelerate_configs/single_gpu.yaml`` when CUDA is visible, else
``accelerate_configs/cpu.yaml``. The recipe (with the overrides) is validated first, as
``agentrl check-recipe`` does: a bad recipe is one line and exit 2 before any process starts.
``--dry-run`` validates and prints the command instead of running it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from agentrl.recipe_file import RecipeError, apply_recipe_env, read_recipe_file

REPO_CONFIGS = Path(__file__).resolve().parent.parent / "accelerate_configs"


def _default_config() -> str:
    try:
        import torch

        gpu = torch.cuda.is_available()
    except Exception:  # torch missing or broken: the train step will say so
        gpu = False
    return str(REPO_CONFIGS / ("single_gpu.yaml" if gpu else "cpu.yaml"))


def _accelerate_executable() -> str:
    # The venv's own script first: `.venv/bin/agentrl launch` must work without an activated venv.
    beside = Path(sys.executable).parent / "accelerate"
    if beside.is_file():
        return str(beside)
    found = shutil.which("accelerate")
    if found is None:
        raise RecipeError("the `accelerate` command is not installed (pip install accelerate)")
    return found


def _pop_override(overrides: list[str], key: str) -> tuple[str | None, list[str]]:
    """The value of ``--key X`` / ``--key=X`` (dashes or underscores) and the other overrides."""
    names = {f"--{key}", f"--{key.replace('_', '-')}"}
    value, rest, i = None, [], 0
    while i < len(overrides):
        tok = overrides[i]
        name, eq, val = tok.partition("=")
        if name in names:
            if not eq:
                if i + 1 >= len(overrides):
                    raise RecipeError(f"{tok} needs a value")
                val = overrides[i + 1]
                i += 1
            value = val
        else:
            rest.append(tok)
        i += 1
    return value, rest


def build_command(recipe: str, overrides: list[str], data: dict | None = None) -> list[str]:
    """The ``accelerate launch`` argv for ``recipe`` (``data``: the recipe, when already read)."""
    path = Path(recipe)
    data = read_recipe_file(path) if data is None else data
    cli_cfg, overrides = _pop_override(list(overrides), "accelerate_config")
    cfg = cli_cfg or data.get("accelerate_config") or _default_config()  # the CLI wins
    if not isinstance(cfg, str):
        raise RecipeError(f"accelerate_config must be a path, got {cfg!r}")
    cfg_path = Path(cfg)
    if not cfg_path.is_absolute() and not cfg_path.is_file():
        cfg_path = REPO_CONFIGS.parent / cfg
    if not cfg_path.is_file():
        raise RecipeError(f"accelerate config not found: {cfg}")
    return [_accelerate_executable(), "launch", "--config_file", str(cfg_path), "-m", "agentrl.train", str(path), *overrides]


USAGE = "usage: agentrl launch RECIPE.yaml [--dry-run] [--accelerate_config PATH] [--field value ...]"


def validate(recipe: str, overrides: list[str]) -> None:
    """RecipeError unless ``agentrl train`` would accept the recipe (imports TRL: 10-16 s)."""
    import subprocess

    # a child process: the recipe's env: block must not leak into this one before accelerate starts
    p = subprocess.run([sys.executable, "-m", "agentrl", "check-recipe", recipe, *overrides],
                       capture_output=True, text=True)
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        msg = lines[-1] if lines else f"check-recipe exited with {p.returncode}"
        raise RecipeError(msg.removeprefix("agentrl check-recipe: error: "))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + __doc__.strip())
        return 0
    dry = bool({"--dry-run", "--dry_run"} & set(argv))
    argv = [a for a in argv if a not in ("--dry-run", "--dry_run")]
    if not argv or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        data = read_recipe_file(argv[0])
        cmd = build_command(argv[0], argv[1:], data)
        _, overrides = _pop_override(argv[1:], "accelerate_config")
        validate(argv[0], overrides)
        if not dry:  # every process accelerate starts inherits the recipe's env: block
            apply_recipe_env(data)
    except RecipeError as e:
        print(f"agentrl launch: {e}", file=sys.stderr)
        return 2
    if dry:
        print(shlex.join(cmd))
        return 0
    from agentrl.recipe_hook import VALIDATED

    os.environ[VALIDATED] = "1"  # the launch process need not check it again
    os.execvp(cmd[0], cmd)
    return 0  # unreachable


if __name__ == "__main__":
    sys.exit(main())
