"""``AgentRLConfig``: GRPOConfig + the multi-turn agent fields, and recipe loading/validation.

A recipe is a YAML mapping of config keys (TrlParser format: any GRPOConfig/TrainingArguments
key, the fields below, and an optional ``env:`` mapping of environment variables). CLI
``--key value`` overrides win over the recipe. ``load_recipe`` validates everything up front and
raises ``RecipeError`` (one line, naming the valid choices) on bad input.

Batch vocabulary (TRL's, reused): a *task* is one dataset row (seed + reset options); TRL's
sampler repeats it ``num_generations`` times (= one group of G rollouts from the same initial
state). ``per_device_train_batch_size * steps_per_generation`` rollouts per rank per iteration
(TRL's generation batch). Training *rows* come out of the rollouts (window: one per step,
trajectory: one per episode) and their number varies: see ``max_rows_per_rank``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import MISSING as _MISSING
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agentrl_envs.probe import probe_task
from trl import GRPOConfig

from agentrl.recipe_file import RecipeError, apply_recipe_env, first_line, read_recipe_file


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


@dataclass
class AgentRLConfig(GRPOConfig):
    """GRPOConfig plus the environment, rollout, credit and model fields of agentrl.

    Defaults that differ from GRPOConfig: ``bf16`` is off when no CUDA device is visible,
    ``remove_unused_columns`` is False (task columns must reach the rollout), ``report_to``
    is ``wandb`` with ``WANDB_MODE=offline`` unless set, ``max_completion_length`` is 64 (one
    action per turn).
    """

    # --- model -------------------------------------------------------------------------------
    model_name_or_path: str = field(
        default="smollm2",
        metadata={"help": "Local model folder, an embedded name (smollm2) or a hub id (hub machines only)."},
    )
    use_peft: bool = field(default=False, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank (use_peft)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (use_peft)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout (use_peft)."})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={"help": "Module names LoRA wraps; None = all linear layers of the decoder."},
    )

    # --- environment and tasks ---------------------------------------------------------------
    env_id: str = field(default="agentrl/TextCraft-v0", metadata={"help": "Gymnasium id of the env (agentrl/*)."})
    env_kwargs: dict | str | None = field(
        default=None,
        metadata={"help": "Keyword arguments for gymnasium.make (a mapping, or a JSON string on the CLI)."},
    )
    env_modules: list[str] | None = field(
        default=None,
        metadata={"help": "Extra modules imported before making the env (they register custom env ids)."},
    )
    task_split: str = field(default="train", metadata={"help": "Reset option 'split' of the training tasks."})
    task_families: list[str] | None = field(
        default=None, metadata={"help": "Reset option 'families' (None = all of the env's families)."}
    )
    task_options: dict | str | None = field(
        default=None, metadata={"help": "Extra reset options merged into every task (mapping or JSON)."}
    )
    task_seed_start: int = field(default=0, metadata={"help": "First task seed of the training set."})
    num_tasks: int = field(default=256, metadata={"help": "Number of training tasks (seeds start..start+n-1)."})
    task_seeds: list[int] | None = field(
        default=None,
        metadata={"help": "Explicit training task seeds (distinct, >= 0); when set, task_seed_start and num_tasks "
                          "follow from it (e.g. a chosen set of goals to practise)."},
    )

    # --- rollout -----------------------------------------------------------------------------
    context_mode: str = field(
        default="window",
        metadata={"help": "'window' (one row per step, last history_length steps in the prompt) or "
                          "'trajectory' (one row per episode, env tokens masked)."},
    )
    history_length: int = field(default=2, metadata={"help": "(obs, action) pairs in a window prompt."})
    max_turns: int | None = field(default=None, metadata={"help": "Step cap per episode (default: the env's limit)."})
    max_prompt_tokens: int = field(
        default=2048,
        metadata={"help": "Prompt budget per turn: window shrinks history, then ends the episode truncated; "
                          "trajectory ends the episode when the whole sequence outgrows it."},
    )
    prefill: str = field(default="<action>", metadata={"help": "Text put after the assistant header (BiPACE, arXiv 2606.25556, App. J)."})
    stop_strings: list[str] | None = field(
        default=None,
        metadata={"help": "A turn ends after the first of these strings (a tool call's closing tag, e.g. "
                          "</python>): vLLM stops there; transformers generation is cut after the token that "
                          "completes it, so the tokens after it are neither seen by the env nor trained on."},
    )
    valid_action_reward: float = field(
        default=0.0,
        metadata={"help": "Shaping reward added to each step whose action the env accepted, so groups with "
                          "0% success still have reward spread (zero spread in a group = zero advantage)."},
    )
    env_workers: str = field(
        default="0",
        metadata={"help": "Env worker processes per rank (agentrl.rollout.env_pool): each keeps its envs across "
                          "iterations and steps them in parallel with the others; a worker that crashes or exceeds "
                          "env_timeout_s ends its episodes as errors and is replaced. 0 = envs in the training "
                          "process; 'auto' = this rank's share of the cores, at most its episodes. Pays where "
                          "env steps are costly (ALFWorld, SWE), not for TextCraft/WebShop (round trips > env)."},
    )
    env_timeout_s: float = field(
        default=300.0,
        metadata={"help": "Seconds one env call may take in a worker before its episode ends as an error."},
    )
    max_rows_per_rank: int | None = field(
        default=None,
        metadata={"help": "Cap on training rows per rank per iteration. Every rank trains on the same number "
                          "of rows R = min(cap, max over ranks of its rows), rounded up to a multiple of "
                          "steps_per_generation: ranks with fewer rows add masked filler rows (no gradient), "
                          "ranks with more sample R rows uniformly (seeded). Equal R keeps ZeRO-3 forwards in step."},
    )
    save_rollouts: bool = field(
        default=False,
        metadata={"help": "Write each iteration's step records (with advantages) to output_dir/rollouts/iter_XXXXX.jsonl."},
    )

    # --- credit ------------------------------------------------------------------------------
    credit: str = field(default="grpo", metadata={"help": "Credit module name (agentrl.credit)."})
    credit_kwargs: dict | str | None = field(
        default=None, metadata={"help": "Keyword arguments of the credit module (mapping or JSON)."}
    )
    gamma: float = field(default=0.95, metadata={"help": "Discount for returns-to-go in step-level credit."})
    fingerprint_layer: int = field(
        default=-8,
        metadata={"help": "Decoder block whose output at the last prompt token is the state fingerprint "
                          "(BiGPO; Python index into model.layers, -8 for Qwen2.5-7B, -12 for 1.5B). "
                          "Only computed when the credit module needs fingerprints."},
    )

    # --- algorithm and update ------------------------------------------------------------------
    algorithm: str | None = field(
        default=None,
        metadata={"help": "The algorithm plug-in (agentrl.algorithms: grpo, appo, collab, or one a module in "
                          "env_modules registers). Unset: inferred from the older keys (collab: set -> collab, "
                          "credit: appo -> appo, else grpo)."},
    )
    algorithm_kwargs: dict | str | None = field(
        default=None,
        metadata={"help": "The algorithm's own kwargs (mapping or JSON), checked against its declared params."},
    )
    nonfinite_max_consecutive: int = field(
        default=3,
        metadata={"help": "An optimizer step whose loss or gradient holds NaN/inf is skipped (no update, schedule "
                          "held, counted as train/nonfinite_steps); this many skips in a row stop the run with "
                          "one line and exit 2 (0: never stop)."},
    )
    allow_cudnn_attention: bool = field(
        default=False,
        metadata={"help": "Let SDPA use cuDNN attention in training. Off: its backward returns NaN gradients on "
                          "H100/H200 with torch >= 2.11 at sequence lengths 64 mod 128 (pytorch/pytorch#196678)."},
    )

    # --- collaboration (CCPO / SEPO, agentrl.collab) ------------------------------------------
    collab: dict | str | None = field(
        default=None,
        metadata={"help": "A collaboration of roles trained with role-level credit: 'think_solve' or a mapping "
                          "{name, roles: [{name, policy, template, ...}]} (agentrl.collab.spec). Set, training runs "
                          "the collab algorithm (agentrl.algorithms.collab) on env agentrl/MathAnswer-v0 with credit shared, ccpo, "
                          "ccpo_bonus or sepo."},
    )
    collab_policies: str = field(
        default="shared",
        metadata={"help": "How the roles' policies are realised: 'shared' (one model plays every role), 'lora' "
                          "(one LoRA adapter per policy on the shared base; use_peft), 'full' (a full copy of the "
                          "weights per policy)."},
    )
    role_schedule: str = field(
        default="blocks",
        metadata={"help": "'blocks': one role trains for role_block_steps optimizer steps, in role order (Thinker "
                          "first; arXiv 2603.21563 Thm. 4.1); 'both': every role on every rollout (one shared policy: "
                          "in the same steps; separate policies: in role-ordered steps, steps_per_generation a "
                          "multiple of gradient_accumulation_steps x roles; agentrl.algorithms.role_steps)."},
    )
    role_block_steps: int = field(default=10, metadata={"help": "Optimizer steps per role block (paper: 10)."})
    collab_models: dict | str | None = field(
        default=None,
        metadata={"help": "Roles played by their own base model, {role: model path or hub id} (arXiv 2603.21563 "
                          "Table 3: two different LLMs); the other roles use model_name_or_path. Each such model "
                          "has its own tokenizer and optimizer and trains every weight (collab_policies: full) or "
                          "its own LoRA adapter (lora); role_schedule: blocks (agentrl.policies.separate)."},
    )
    collab_rating_template: str | None = field(
        default=None,
        metadata={"help": "SEPO's rating prompt with fields {me} {outcome} {problem} {thinker} {solver} {share} "
                          "{levels} (default: agentrl.credit.collab.RATING_TEMPLATE)."},
    )

    # --- run folder --------------------------------------------------------------------------
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Clear a non-empty output_dir before training (without it, and without "
                          "--resume_from_checkpoint, a reused output_dir is refused: never a mixture of two runs)."},
    )

    # --- launch ------------------------------------------------------------------------------
    accelerate_config: str | None = field(
        default=None, metadata={"help": "accelerate config used by `agentrl launch` (ignored by train)."}
    )

    def __post_init__(self):
        for name in ("env_kwargs", "credit_kwargs", "task_options", "collab_models", "algorithm_kwargs"):
            v = getattr(self, name)
            if isinstance(v, str):
                try:
                    v = json.loads(v) if v.strip() else {}
                except json.JSONDecodeError as e:
                    raise RecipeError(f"{name} must be a mapping or a JSON object string ({e.msg})") from None
            if v is None:
                v = {}
            if not isinstance(v, dict):
                raise RecipeError(f"{name} must be a mapping, got {type(v).__name__}")
            setattr(self, name, v)
        if isinstance(self.collab, str) and self.collab.strip().startswith("{"):
            try:
                self.collab = json.loads(self.collab)
            except json.JSONDecodeError as e:
                raise RecipeError(f"collab must be a name or a mapping ({e.msg})") from None
        if self.bf16 is None and not self.fp16:
            self.bf16 = _cuda()
        if (self.ddp_backend is None and os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"
                and int(os.environ.get("WORLD_SIZE", "1")) > 1 and not _cuda()):
            # DeepSpeed on CPU: without an explicit backend accelerate's PartialState sees no
            # backend and reports 1 process, and DeepSpeed's batch-size check fails (2 != 2*1*2).
            self.ddp_backend = "gloo"
        if self.report_to is None:
            self.report_to = ["wandb"]
        check_values(self)
        if self.task_seeds is not None:
            self.task_seed_start, self.num_tasks = self.task_seeds[0], len(self.task_seeds)
        if self.stop_strings and self.use_vllm:  # vLLM's SamplingParams stop there (TRL passes generation_kwargs)
            self.generation_kwargs = {**(self.generation_kwargs or {}), "stop": list(self.stop_strings),
                                      "include_stop_str_in_output": True}
        if self.disable_tqdm is None and not sys.stderr.isatty():
            # progress bars written to a log file are one line per refresh: thousands of lines
            self.disable_tqdm = True
        super().__post_init__()
        groups = self.generation_batch_size // max(self.num_generations or 1, 1)
        if self.num_tasks < groups:
            raise RecipeError(f"num_tasks ({self.num_tasks}) must be >= groups per iteration "
                              f"(generation_batch_size {self.generation_batch_size} / num_generations "
                              f"{self.num_generations} = {groups})")

    def reset_options(self) -> dict[str, Any]:
        """The reset options of every training task."""
        opts = {"split": self.task_split} if self.task_split else {}
        if self.task_families:
            opts["families"] = list(self.task_families)
        opts.update(self.task_options or {})
        return opts


# Every range check on a single value, in one place: (key, test, what it must be). A new field
# gets its line here; ``check_values`` runs them all before anything loads (RecipeError, exit 2).
VALUE_CHECKS: list[tuple[str, Callable[[Any], bool], str]] = [
    ("learning_rate", lambda v: v > 0, "> 0"),
    ("temperature", lambda v: v > 0, "> 0 (sampling; `agentrl eval --greedy` evaluates greedily)"),
    ("max_completion_length", lambda v: v is None or v > 0, ">= 1 (tokens per action)"),
    ("max_steps", lambda v: v != 0 and v >= -1, ">= 1 (or -1: num_train_epochs decides)"),
    ("num_train_epochs", lambda v: v > 0, "> 0"),
    ("num_generations", lambda v: v is None or v >= 1, ">= 1"),
    ("per_device_train_batch_size", lambda v: v >= 1, ">= 1"),
    ("gradient_accumulation_steps", lambda v: v >= 1, ">= 1"),
    ("beta", lambda v: v >= 0, ">= 0"),
    ("gamma", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("max_prompt_tokens", lambda v: v >= 1, ">= 1"),
    ("stop_strings", lambda v: v is None or (isinstance(v, list | tuple) and all(isinstance(x, str) and x for x in v)),
     "a list of non-empty strings"),
    ("max_turns", lambda v: v is None or v >= 1, ">= 1"),
    ("history_length", lambda v: v >= 0, ">= 0"),
    ("num_tasks", lambda v: v >= 1, ">= 1"),
    ("task_seeds", lambda v: v is None or (isinstance(v, list | tuple) and len(v) >= 1 and len(set(v)) == len(v)
                                           and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                   for x in v)),
     "a non-empty list of distinct integers >= 0"),
    ("max_rows_per_rank", lambda v: v is None or v >= 1, ">= 1"),
    ("env_workers", lambda v: v == "auto" or (str(v).isdigit() and int(v) >= 0), ">= 0 or 'auto'"),
    ("env_timeout_s", lambda v: v > 0, "> 0"),
    ("collab_policies", lambda v: v in ("shared", "lora", "full"), "one of shared, lora, full"),
    ("role_schedule", lambda v: v in ("blocks", "both"), "one of blocks, both"),
    ("role_block_steps", lambda v: v >= 1, ">= 1"),
    ("nonfinite_max_consecutive", lambda v: v >= 0, ">= 0 (0: never stop)"),
]


CREDIT_TOP_LEVEL_KEYS = {"gamma"}
"""Config keys the trainer itself passes to the credit module (``credit_kwargs`` must not repeat them)."""


def check_values(cfg: AgentRLConfig) -> None:
    """RecipeError (one line) on the first value outside its range (``VALUE_CHECKS``), or on a
    setting given twice (``gamma`` inside ``credit_kwargs``: the trainer passes the top-level one)."""
    for key, ok, want in VALUE_CHECKS:
        v = getattr(cfg, key)
        try:
            good = ok(v)
        except TypeError:
            good = False
        if not good:
            raise RecipeError(f"{key} must be {want}, got {v!r}")
    twice = sorted(set(cfg.credit_kwargs or {}) & CREDIT_TOP_LEVEL_KEYS)
    if twice:
        k = twice[0]
        raise RecipeError(f"{k} is set twice: top-level and inside credit_kwargs; set it once, as the "
                          f"top-level key {k} (the credit module receives it from there)")


# Defaults applied when a recipe does not set them (GRPOConfig's are for GPU LLM training).
# logging_nan_inf_filter off: a NaN loss is logged as NaN, never replaced by an average.
_AGENT_DEFAULTS = {"max_completion_length": 64, "remove_unused_columns": False, "report_to": None,
                   "logging_nan_inf_filter": False}

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def config_keys() -> set[str]:
    return {f.name for f in fields(AgentRLConfig) if f.init}


def _unknown_key_error(key: str, where: str) -> RecipeError:
    key = str(key)
    close = difflib.get_close_matches(key, sorted(config_keys()), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see AgentRLConfig in agentrl/config.py"
    return RecipeError(f"unknown config key {key!r} in {where}{hint}")


# `agentrl train --help`: every agentrl key, grouped, and the TRL keys recipes use most.
KEY_GROUPS: dict[str, list[str]] = {
    "model": ["model_name_or_path", "use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules"],
    "environment and tasks": ["env_id", "env_kwargs", "env_modules", "task_split", "task_families",
                              "task_options", "task_seed_start", "num_tasks", "task_seeds"],
    "rollout": ["context_mode", "history_length", "max_turns", "max_prompt_tokens", "prefill", "stop_strings",
                "valid_action_reward", "max_rows_per_rank", "save_rollouts", "env_workers", "env_timeout_s"],
    "credit": ["credit", "credit_kwargs", "gamma", "fingerprint_layer"],
    "algorithm and update": ["algorithm", "algorithm_kwargs", "loss_type", "nonfinite_max_consecutive",
                             "allow_cudnn_attention"],
    "collaboration": ["collab", "collab_policies", "role_schedule", "role_block_steps", "collab_rating_template",
                      "collab_models"],
    "run folder and launch": ["output_dir", "overwrite_output_dir", "resume_from_checkpoint", "accelerate_config"],
    "optimisation and sampling (TRL GRPOConfig; every GRPOConfig / TrainingArguments key is accepted)": [
        "learning_rate", "max_steps", "num_generations", "per_device_train_batch_size",
        "gradient_accumulation_steps", "steps_per_generation", "temperature", "max_completion_length",
        "beta", "lr_scheduler_type", "warmup_steps", "seed", "bf16", "use_cpu", "gradient_checkpointing",
        "use_vllm", "vllm_mode"],
    "logging and checkpoints (TRL / Trainer)": ["logging_steps", "save_steps", "save_total_limit", "report_to"],
}


def recipe_keys_help(width: int = 100) -> str:
    """The recipe keys of ``KEY_GROUPS`` with their defaults and docs, for ``agentrl train --help``."""
    import textwrap

    by_name = {f.name: f for f in fields(AgentRLConfig)}
    out = []
    for group, names in KEY_GROUPS.items():
        out.append(f"\n{group}:")
        for name in names:
            f = by_name[name]
            default = _AGENT_DEFAULTS.get(name, f.default)
            if default is _MISSING:
                default = f.default_factory() if f.default_factory is not _MISSING else "(computed)"
            doc = " ".join(str(f.metadata.get("help", "")).replace("%%", "%").split())
            out.append(f"  {name} (default {default!r})")
            out += textwrap.wrap(doc, width, initial_indent="      ", subsequent_indent="      ")
    n_other = len(config_keys()) - sum(len(v) for v in KEY_GROUPS.values())
    out.append(f"\n...and {n_other} more GRPOConfig / TrainingArguments keys (TRL and transformers docs).")
    return "\n".join(out)


_NEGATIVE_NUMBER = re.compile(r"^-(\d|\.\d|inf$|nan$)")


def join_negative_values(overrides: list[str]) -> list[str]:
    """``--learning_rate -1e-4`` -> ``--learning_rate=-1e-4``: argparse takes a token starting with
    '-' for an option unless it looks like a plain negative integer or decimal (not ``-1e-4``)."""
    out, i = [], 0
    while i < len(overrides):
        tok = overrides[i]
        nxt = overrides[i + 1] if i + 1 < len(overrides) else None
        if tok.startswith("--") and "=" not in tok and nxt is not None and _NEGATIVE_NUMBER.match(nxt):
            out.append(f"{tok}={nxt}")
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


def _import_env_modules(modules) -> None:
    import importlib

    import agentrl_envs  # noqa: F401  (registers agentrl/* ids)

    for m in modules or []:
        try:
            importlib.import_module(m)
        except ImportError as e:
            raise RecipeError(f"env_modules: cannot import {m!r} ({e})") from None


def validate_env(env_id: str, env_modules=None) -> None:
    from agentrl_envs.probe import check_env_id

    _import_env_modules(env_modules)
    try:
        check_env_id(env_id)
    except ValueError as e:
        raise RecipeError(str(e)) from None


_CHECKED_TASKS: set[str] = set()


def validate_tasks(cfg: AgentRLConfig) -> None:
    """Make the env and reset it on the first training task: bad env_kwargs or reset options
    (split, families) fail here, once, instead of turning every episode into an env error.
    A combination that passed is remembered for the process (checking many recipes resets
    ALFWorld, 2-3 s a reset, once per distinct setting)."""
    key = json.dumps([cfg.env_id, cfg.env_kwargs, cfg.reset_options(), cfg.task_seed_start],
                     sort_keys=True, default=str)
    if key in _CHECKED_TASKS:
        return
    try:
        probe_task(cfg.env_id, cfg.env_kwargs, cfg.task_seed_start, cfg.reset_options())
    except ValueError as e:
        raise RecipeError(str(e)) from None
    _CHECKED_TASKS.add(key)


def validate_context(name: str) -> None:
    """A registered context name (``agentrl.rollout.contexts``; a recipe's env_modules, imported
    by ``validate_env`` before this runs, may register more)."""
    from agentrl.rollout.contexts import context_names

    if name not in context_names():
        raise RecipeError(f"context_mode must be one of {context_names()}, got {name!r}")


def validate_credit(name: str, kwargs: dict) -> None:
    """agentrl.credit.validate with the kwargs the trainer will pass (gamma + credit_kwargs)."""
    from agentrl import credit as credit_mod

    try:
        credit_mod.validate(name, **kwargs)
    except (ValueError, TypeError, KeyError) as e:
        raise RecipeError(f"credit {name!r}: {first_line(e)}") from None


def validate_algorithm(cfg: AgentRLConfig) -> None:
    """Settings the recipe's algorithm cannot run with (``agentrl.algorithms``: APPO's context and
    reference model, a collaboration's keys, credit module, env and policies)."""
    from agentrl import algorithms

    algorithms.check(cfg)


# GRPOConfig features our losses (agentrl.losses) do not implement: (key, is it in use?, why).
_LOSS_UNSUPPORTED = [
    ("top_entropy_quantile", lambda c: c.top_entropy_quantile != 1.0, "the high-entropy token mask"),
    ("entropy_coef", lambda c: c.entropy_coef != 0.0 or c.use_adaptive_entropy, "the entropy bonus"),
    ("off_policy_mask_threshold", lambda c: c.off_policy_mask_threshold is not None, "the off-policy sequence mask"),
    ("use_liger_kernel", lambda c: bool(c.use_liger_kernel), "Liger's fused GRPO loss"),
]


def validate_loss(cfg: AgentRLConfig) -> None:
    """The algorithm's policy loss is registered (``agentrl.losses``) and the recipe asks for no
    TRL loss feature agentrl's losses leave out."""
    from agentrl import algorithms, losses

    name, _ = algorithms.for_config(cfg).loss(cfg)
    if name not in losses.policy_loss_names():
        raise RecipeError(f"loss_type {name!r} is not a registered policy loss; registered: "
                          f"{', '.join(losses.policy_loss_names())}")
    for key, used, what in _LOSS_UNSUPPORTED:
        if used(cfg):
            raise RecipeError(f"{key}: {what} is not implemented by agentrl's policy losses; leave {key} at "
                              "its default")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # a malformed id or an unreadable cache: not cached
        return False


def validate_model(path: str) -> None:
    from agentrl.models.registry import EMBEDDED_MODELS

    if not isinstance(path, str) or not path.strip():
        raise RecipeError("model_name_or_path must be set (a local folder, an embedded model "
                          f"({', '.join(EMBEDDED_MODELS)}) or a hub id)")
    if path in EMBEDDED_MODELS:
        return
    p = Path(path).expanduser()
    looks_local = path.startswith(("/", ".", "~")) or os.sep in path and not _HUB_ID.match(path)
    if p.exists():
        if not p.is_dir():
            raise RecipeError(f"model_name_or_path {path} is a file, not a model folder")
        if not (p / "config.json").is_file():
            raise RecipeError(f"model folder {path} has no config.json")
        return
    if looks_local:
        raise RecipeError(f"model folder not found: {path} (model_name_or_path)")
    if not _HUB_ID.match(path):
        raise RecipeError(f"model_name_or_path {path!r} is neither a local folder, an embedded model "
                          f"({', '.join(EMBEDDED_MODELS)}) nor a hub id")
    if p.parent != Path(".") and p.parent.is_dir():
        # "runs/tiny_model" looks like a hub id, but its folder "runs/" exists here: a missing
        # local folder (a real hub id's owner, e.g. "Qwen/", is not a local folder)
        raise RecipeError(f"model folder not found: {path} (model_name_or_path)")
    if _offline() and not _in_hub_cache(path):
        raise RecipeError(f"model folder not found: {path} (model_name_or_path; not a local folder, and "
                          "not in the Hugging Face cache while HF_HUB_OFFLINE is set)")


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def load_recipe(path: str | None, overrides: list[str] | None = None) -> AgentRLConfig:
    """Parse ``path`` (YAML) + CLI ``overrides`` into a validated AgentRLConfig; RecipeError on bad input."""

    overrides = join_negative_values(list(overrides or []))
    data: dict[str, Any] = {}
    if path is not None:
        data = read_recipe_file(path)
    apply_recipe_env(data)  # a no-op when the entry point already applied it before importing torch
    if "OMP_NUM_THREADS" in os.environ and os.environ["OMP_NUM_THREADS"].isdigit():
        import torch  # already imported by trl; it read OMP_NUM_THREADS only if set before that

        torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
    keys = config_keys()
    for k in data:
        if k not in keys:
            raise _unknown_key_error(k, path or "recipe")
    for tok in overrides:
        if tok.startswith("--"):
            k = tok[2:].split("=", 1)[0].replace("-", "_")  # TrlParser takes --learning-rate too
            if k not in keys and not (k.startswith("no_") and k[3:] in keys):
                raise _unknown_key_error(k, "command line")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    for k, v in _AGENT_DEFAULTS.items():
        data.setdefault(k, v)
    # dict fields go through argparse as strings; pass them as JSON so both paths agree
    for k in ("env_kwargs", "credit_kwargs", "task_options", "collab", "collab_models", "algorithm_kwargs"):
        if isinstance(data.get(k), dict):
            data[k] = json.dumps(data[k])

    from trl import TrlParser

    parser = TrlParser([AgentRLConfig])

    def _error(message: str):
        raise RecipeError(message.splitlines()[0])

    parser.error = _error  # argparse would print usage and sys.exit(2)
    try:
        with warnings.catch_warnings():
            # transformers 5 renames gradient_checkpointing; TRL's docs and recipes still use it
            warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)
            parser.set_defaults_with_config(**data)
            (cfg,) = parser.parse_args_into_dataclasses(args=overrides)
    except RecipeError:
        raise
    except (ValueError, TypeError) as e:
        raise RecipeError(first_line(e)) from None
    given = set(data) | {t[2:].split("=", 1)[0].replace("-", "_") for t in overrides if t.startswith("--")}
    cfg.recipe_keys = sorted(k for k in given if k in keys)  # what runinfo.resolved_recipe writes back
    validate_config(cfg)
    return cfg


def validate_config(cfg: AgentRLConfig) -> None:
    """Checks that need other modules (env registry, credit modules, model folders, vLLM)."""
    validate_env(cfg.env_id, cfg.env_modules)
    validate_context(cfg.context_mode)
    validate_tasks(cfg)
    validate_credit(cfg.credit, {"gamma": cfg.gamma, **(cfg.credit_kwargs or {})})
    validate_algorithm(cfg)
    validate_loss(cfg)
    validate_model(cfg.model_name_or_path)
    if cfg.use_vllm and not vllm_available():
        raise RecipeError("use_vllm: true needs vllm (pip install 'agentrl[vllm]' on a CUDA machine); "
                          "set use_vllm: false to generate with transformers")
    if cfg.use_vllm and cfg.vllm_mode not in ("server", "colocate"):
        raise RecipeError(f"vllm_mode must be 'server' or 'colocate', got {cfg.vllm_mode!r}")
