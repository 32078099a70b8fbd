"""``python -m agentrl.train RECIPE.yaml [--field value ...]``: train an agent from a recipe.

Also ``accelerate launch --config_file accelerate_configs/zero3.yaml -m agentrl.train RECIPE.yaml``.
Bad input (unknown key, env id, credit module, missing model folder, vLLM absent) prints one
line on stderr and exits with code 2. ``--resume_from_checkpoint PATH|true`` continues a run.
"""

from __future__ import annotations

import os
import sys

from agentrl.config import AgentRLConfig, RecipeError, load_recipe


def split_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """Recipe path (positional, or TrlParser's ``--config PATH``) and the remaining overrides."""
    argv = list(argv)
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise RecipeError("--config needs a recipe path")
        path = argv[i + 1]
        return path, argv[:i] + argv[i + 2:]
    if argv and not argv[0].startswith("-"):
        return argv[0], argv[1:]
    return None, argv


def _fail(prog: str, e: BaseException) -> int:
    print(f"{prog}: error: {e}", file=sys.stderr)
    return 2


def check_recipe(path: str | None, overrides: list[str] | None = None) -> int:
    """Validate a recipe (+ overrides) without training: 0 if fine, 2 with one line on stderr."""
    try:
        cfg = load_recipe(path, overrides)
    except RecipeError as e:
        return _fail("agentrl check-recipe", e)
    print(f"recipe OK: env {cfg.env_id}, credit {cfg.credit}, model {cfg.model_name_or_path}, "
          f"context {cfg.context_mode}")
    return 0


def check_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        path, rest = split_argv(argv)
    except RecipeError as e:
        return _fail("agentrl check-recipe", e)
    return check_recipe(path, rest)


def build_peft_config(cfg: AgentRLConfig):
    if not cfg.use_peft:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_target_modules or "all-linear", task_type="CAUSAL_LM")


def build_trainer(cfg: AgentRLConfig, hooks=None):
    """Resolve the model, load the tokenizer and construct the AgentGRPOTrainer."""
    from transformers import AutoTokenizer

    from agentrl.models import resolve_model
    from agentrl.trainer import AgentGRPOTrainer

    model_path = resolve_model(cfg.model_name_or_path)
    tok = AutoTokenizer.from_pretrained(model_path)
    if tok.chat_template is None:
        raise RecipeError(f"the tokenizer of {model_path} has no chat template")
    return AgentGRPOTrainer(model=model_path, args=cfg, processing_class=tok,
                            peft_config=build_peft_config(cfg), hooks=hooks)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print("\nrecipe keys: see AgentRLConfig in agentrl/config.py (plus every GRPOConfig key)")
        return 0
    try:
        path, rest = split_argv(argv)
        if path is None:
            raise RecipeError("usage: python -m agentrl.train RECIPE.yaml [--field value ...]")
        cfg = load_recipe(path, rest)
        trainer = build_trainer(cfg)
    except RecipeError as e:
        return _fail("agentrl train", e)
    resume = cfg.resume_from_checkpoint
    if isinstance(resume, str) and resume.lower() in ("true", "last", "latest"):
        resume = True
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(cfg.output_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
