"""The LoRA adapter config of a run (``use_peft``): one place for the trainer, role models and apps."""

from __future__ import annotations


def build_peft_config(cfg):
    """A ``peft.LoraConfig`` from the recipe's ``lora_*`` keys, or None without ``use_peft``."""
    if not cfg.use_peft:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_target_modules or "all-linear", task_type="CAUSAL_LM")
