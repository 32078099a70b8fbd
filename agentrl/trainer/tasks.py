"""What TRL's ``GRPOTrainer`` is built with besides the model: the task dataset (one row per task
seed) and a placeholder reward function; and the check of ``fingerprint_layer`` before the model
loads."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import TrainerCallback

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


class EpochTaskOrder(TrainerCallback):
    """Makes the task order of every epoch a function of (seed, epoch), so a resumed run sees the
    order the uninterrupted one saw.

    TRL's RepeatSampler draws one permutation per epoch from a generator seeded once: a run resumed
    in epoch k rebuilt it fresh and replayed epoch 0's order (a two-role CCPO run resumed at a
    role-block boundary that was also an epoch boundary trained on other tasks than the
    uninterrupted run). At the start of each epoch the sampler's generator is reseeded and advanced
    by k permutations: the order the uninterrupted run draws, recomputed."""

    def on_epoch_begin(self, args, state, control, train_dataloader=None, **kw):
        sampler = _repeat_sampler(train_dataloader)
        if sampler is None or not sampler.shuffle or sampler.seed is None:
            return
        import math

        import torch

        sampler.generator.manual_seed(sampler.seed)
        for _ in range(math.floor(state.epoch + 1e-9)):
            torch.randperm(sampler.num_samples, generator=sampler.generator)


def _repeat_sampler(loader):
    """TRL's RepeatSampler under a (possibly accelerate-wrapped) training DataLoader, or None."""
    from trl.trainer.utils import RepeatSampler

    for s in (getattr(getattr(loader, "batch_sampler", None), "sampler", None), getattr(loader, "sampler", None)):
        if isinstance(s, RepeatSampler):
            return s
    return None
