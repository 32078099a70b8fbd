"""What TRL's ``GRPOTrainer`` is built with besides the model: the task dataset (one row per task
seed) and a placeholder reward function; and the check of ``fingerprint_layer`` before the model
loads."""

from __future__ import annotations

import json
from pathlib import Path

from agentrl.config import AgentRLConfig
from agentrl.recipe_file import RecipeError


def env_reward(prompts=None, completions=None, **kwargs):
    """Placeholder reward function: GRPOTrainer requires one, but rewards come from the env
    (step records) and advantages from the credit module; TRL's reward path is never called."""
    raise RuntimeError("env_reward is a placeholder: AgentGRPOTrainer scores episodes itself")


def build_task_dataset(args: AgentRLConfig):
    """Training tasks: the recipe's ``task_seeds``, else seeds task_seed_start .. +num_tasks, with the
    recipe's reset options."""
    from datasets import Dataset

    opts = json.dumps(args.reset_options(), sort_keys=True)
    seeds = (list(args.task_seeds) if args.task_seeds is not None
             else list(range(args.task_seed_start, args.task_seed_start + args.num_tasks)))
    return Dataset.from_dict({
        "prompt": [f"{args.env_id} seed={s}" for s in seeds],  # TRL expects a prompt column
        "task_id": list(range(len(seeds))),
        "task_seed": seeds,
        "task_options": [opts] * len(seeds),
    })


def _check_fingerprint_layer(model, layer: int) -> None:
    """RecipeError unless ``fingerprint_layer`` indexes one of the model's decoder layers."""
    if isinstance(model, (str, Path)):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model)
    else:
        config = model.config
    n = getattr(config, "num_hidden_layers", None)
    if isinstance(n, int) and not -n <= layer < n:
        raise RecipeError(f"fingerprint_layer {layer} is out of range for a model with {n} decoder layers "
                          f"(valid: {-n}..{n - 1})")
