"""Roles on their own base model (``collab_models``): a heterogeneous pair, e.g. a 7B Thinker with
a 1.5B Solver (arXiv 2603.21563 Table 3).

``SwappedPolicies`` swaps policies through one model's parameters, so its policies must share an
architecture and a tokenizer. A role named in ``collab_models`` instead gets a second model
object with its own tokenizer and its own optimizer (same class and settings as the Trainer's,
``Trainer.get_optimizer_cls_and_kwargs``); the Trainer's model plays and trains the other roles.
With ``collab_policies: full`` every weight of it trains; with ``lora`` it gets its own LoRA
adapter (the run's ``lora_*`` settings) on its frozen base, as the Trainer's model does.

* **Generation**: the role's prompts are encoded with its tokenizer (its chat template) and
  sampled with the run's sampling settings (``GRPOTrainer.generation_kwargs``) and its own pad /
  eos ids. Roles exchange text only (the Thinker's cleaned plan), so vocabularies may differ.
* **Update**: role blocks only (one role's rows per rollout, so one tokenizer per batch). In the
  role's block the trainer runs TRL's loss on this model; at the end of each optimizer step it
  clips this model's gradients (``max_grad_norm``), steps its optimizer at the learning rate of
  the run's schedule at that step (one schedule for every model) and clears them. The Trainer's
  own optimizer steps too, with no gradients: AdamW leaves such parameters and their state alone.
* **Checkpoints**: ``role_models/<role>.pt`` in each checkpoint (its trainable weights and its
  optimizer state, exact); the final ``save_model`` writes ``policies/<policy>/`` (the model or
  the adapter) with the role's tokenizer.

One process only: the second model is not wrapped for DDP and ZeRO-3 would partition it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoTokenizer, Trainer
from trl.trainer import add_fused_lm_head
from trl.trainer.utils import create_model_from_path

from agentrl.rollout.episodes import GenerateOutput
from agentrl.sampling import SamplingSpec, hf_sample

ROLE_MODELS_DIR = "role_models"


@dataclass
class RoleModel:
    """One role's own model, tokenizer and optimizer."""

    role: str
    """The role it plays."""
    path: str
    """Where it was loaded from (``collab_models``)."""
    model: torch.nn.Module
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    spec: SamplingSpec
    """The run's sampling spec with this model's end tokens (``agentrl.sampling``)."""
    engine_kwargs: dict[str, Any]
    """The generation settings beside the spec (the recipe's cache implementation, this
    tokenizer's bos id)."""
    checkpointing: dict | None = None
    """Gradient checkpointing kwargs when it is on (off while generating: it disables the KV cache)."""

    @property
    def eos_ids(self) -> list[int]:
        return list(self.spec.end_token_ids)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]]) -> GenerateOutput:
        """Sampled completions of ``prompts`` (token ids of this tokenizer), each cut after its first
        end token (kept, as TRL keeps it), with each token's log-prob under the distribution it was
        drawn from: the one sampler's HF call (``agentrl.sampling.hf_sample``), as the trained
        policy's generation."""
        if self.checkpointing is not None:
            self.model.gradient_checkpointing_disable()
        try:
            completions, logprobs = hf_sample(self.model, prompts, self.spec, self.tokenizer.pad_token_id,
                                              generation_kwargs=self.engine_kwargs)
        finally:
            if self.checkpointing is not None:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=self.checkpointing)
        return GenerateOutput(completions, logprobs=logprobs)

    def step(self, lr: float, max_grad_norm: float | None) -> float:
        """One optimizer step on the accumulated gradients; returns the gradient norm before clipping."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm else float("inf"))
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def state_dict(self) -> dict[str, Any]:
        """The trainable weights (a frozen base is reloaded from ``path``) and the optimizer state."""
        return {"role": self.role, "path": self.path,
                "trainable": {n: p.detach().cpu() for n, p in self.model.named_parameters() if p.requires_grad},
                "optimizer": self.optimizer.state_dict()}

    @torch.no_grad()
    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Weights copied into the existing parameters (the optimizer keeps pointing at them)."""
        if d["role"] != self.role:
            raise ValueError(f"checkpoint holds role {d['role']!r}'s model, not {self.role!r}'s")
        params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        if set(params) != set(d["trainable"]):
            raise ValueError(f"checkpoint's {self.role} model has other trainable parameters than this run's")
        for n, p in params.items():
            p.copy_(d["trainable"][n])
        self.optimizer.load_state_dict(d["optimizer"])


def load_role_model(role: str, path: str, learner) -> RoleModel:
    """``path``'s model and tokenizer for ``role``, on the learner's device, with an optimizer like
    the Trainer's (class, betas, eps, weight decay on the same parameter kinds). ``learner``: the
    ``agentrl.algorithms.learner.Learner`` handle."""
    from agentrl.models import resolve_model

    args = learner.config
    sampling = learner.sampling
    local = resolve_model(path)
    tok = AutoTokenizer.from_pretrained(local)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = create_model_from_path(local, **dict(args.model_init_kwargs or {})).to(learner.accelerator.device)
    base = model
    if args.use_peft:
        from peft import get_peft_model

        from agentrl.models.lora import build_peft_config

        model = get_peft_model(model, build_peft_config(args))
    # TRL's loss asks the model for log-probs through the fused LM head it patches into the
    # Trainer's model (GRPOTrainer.__init__); the role model gets the same patch
    add_fused_lm_head(base, temperature=sampling["temperature"], cast_lm_head_to_fp32=args.cast_lm_head_to_fp32,
                      outputs=("log_probs", "entropy"))
    model.train()
    checkpointing = None
    if args.gradient_checkpointing:
        checkpointing = dict(args.gradient_checkpointing_kwargs or {"use_reentrant": False})
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
    decay = set(learner.decay_parameter_names(model))
    groups = [{"params": [p for n, p in model.named_parameters() if p.requires_grad and (n in decay) == d],
               "weight_decay": args.weight_decay if d else 0.0} for d in (True, False)]
    opt_cls, opt_kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    optimizer = opt_cls([g for g in groups if g["params"]], **opt_kwargs)
    spec = SamplingSpec.from_config(args, base, tok)
    engine = {k: v for k, v in (("cache_implementation", sampling["generation_kwargs"].get("cache_implementation")),
                                ("bos_token_id", tok.bos_token_id)) if v is not None}
    return RoleModel(role, path, model, tok, optimizer, spec, engine, checkpointing)
