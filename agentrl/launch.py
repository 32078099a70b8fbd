"""``agentrl launch RECIPE.yaml [--field value ...]``: exec ``accelerate launch`` with the
accelerate config the recipe names (key ``accelerate_config``).

Without that key: ``accelerate_configs/single_gpu.yaml`` when CUDA is visible, else
``accelerate_configs/cpu.yaml``. ``--dry-run`` prints the command instead of running it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from agentrl.recipe_file import RecipeError, read_recipe_file

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


def build_command(recipe: str, overrides: list[str]) -> list[str]:
    path = Path(recipe)
    data = read_recipe_file(path)
    cfg = data.get("accelerate_config") or _default_config()
    cfg_path = Path(cfg)
    if not cfg_path.is_absolute() and not cfg_path.is_file():
        cfg_path = REPO_CONFIGS.parent / cfg
    if not cfg_path.is_file():
        raise RecipeError(f"accelerate config not found: {cfg}")
    return [_accelerate_executable(), "launch", "--config_file", str(cfg_path), "-m", "agentrl.train", str(path), *overrides]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dry = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    if not argv or argv[0].startswith("-"):
        print("usage: agentrl launch RECIPE.yaml [--dry-run] [--field value ...]", file=sys.stderr)
        return 2
    try:
        cmd = build_command(argv[0], argv[1:])
    except RecipeError as e:
        print(f"agentrl launch: {e}", file=sys.stderr)
        return 2
    if dry:
        print(shlex.join(cmd))
        return 0
    os.execvp(cmd[0], cmd)
    return 0  # unreachable


if __name__ == "__main__":
    sys.exit(main())
