"""Checks of a parsed config that need other modules: env registry and one env reset (bad
env_kwargs or reset options fail here, once), context, credit module and its kwargs, the
algorithm and its policy loss, the model folder, vLLM. ``validate_config`` runs them all; each
raises ``RecipeError`` (one line)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from agentrl_envs.probe import probe_task

from agentrl.recipe_file import RecipeError, first_line

from .build import credit_kwargs
from .schema import AgentRLConfig

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def validate_env(env_id: str, env_modules=None) -> None:
    """The recipe's plug-in modules import (``agentrl.plugins``; ``load_recipe`` imported them
    already, with the recipe's folder on the path) and its env id is registered."""
    from agentrl_envs.probe import check_env_id

    from agentrl.plugins import import_plugins

    import_plugins(env_modules, [Path.cwd()])
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
    from agentrl.registry import unknown_name
    from agentrl.rollout.contexts import context_names

    if name not in context_names():
        raise RecipeError("context_mode: " + unknown_name("context", name, context_names()))


def validate_credit(name: str, kwargs: dict) -> None:
    """agentrl.credit.validate with the kwargs the trainer will pass (gamma + credit_kwargs); its
    message names the estimator already (said once)."""
    from agentrl import credit as credit_mod

    try:
        credit_mod.validate(name, **kwargs)
    except (ValueError, TypeError, KeyError) as e:
        raise RecipeError(first_line(e)) from None


def validate_algorithm(cfg: AgentRLConfig) -> None:
    """Settings the recipe's algorithm cannot run with (``agentrl.algorithms``: APPO's context and
    reference model, a collaboration's keys, credit module, env and policies)."""
    from agentrl import algorithms

    algorithms.check(cfg)


# GRPOConfig features our losses (agentrl.losses) do not implement: (key, is it in use?, why).
_LOSSES_UNSUPPORTED = [
    ("top_entropy_quantile", lambda c: c.top_entropy_quantile != 1.0, "the high-entropy token mask"),
    ("entropy_coef", lambda c: c.entropy_coef != 0.0 or c.use_adaptive_entropy, "the entropy bonus"),
    ("off_policy_mask_threshold", lambda c: c.off_policy_mask_threshold is not None, "the off-policy sequence mask"),
    ("use_liger_kernel", lambda c: bool(c.use_liger_kernel), "Liger's fused GRPO loss"),
]


def validate_loss(cfg: AgentRLConfig) -> None:
    """The algorithm's policy loss is registered (``agentrl.losses``; did-you-mean for the recipe's
    ``loss_type``), a loss that only one algorithm can drive runs under that algorithm
    (``Algorithm.own_losses``: ``loss_type: appo`` under grpo would miss the settings APPO gives
    it), its params resolve from the recipe (``loss_kwargs``), the rollout correction's mode is
    registered, and the recipe asks for
    no TRL loss feature agentrl's losses leave out."""
    from agentrl import algorithms, losses
    from agentrl.registry import unknown_name

    algo = algorithms.for_config(cfg)
    owner = algorithms.loss_owner(cfg.loss_type.split("+")[0])
    if owner is not None and owner != algo.name:
        free = [x for x in losses.policy_loss_names() if algorithms.loss_owner(x) is None]
        raise RecipeError(f"loss_type {cfg.loss_type!r} is algorithm {owner!r}'s own loss (it reads the settings "
                          f"that algorithm gives it): set algorithm: {owner}, or under {algo.name!r} a loss_type of "
                          f"{', '.join(free)}")
    try:
        losses.loss_options(algo.loss(cfg)[0], cfg)
    except KeyError as e:
        names = losses.policy_loss_names()
        if "+" not in cfg.loss_type and cfg.loss_type not in names:
            raise RecipeError("loss_type: " + unknown_name("policy loss", cfg.loss_type, names)) from None
        raise RecipeError(f"loss_type {cfg.loss_type!r}: {e.args[0]}") from None
    except ValueError as e:
        raise RecipeError(first_line(e)) from None
    validate_correction(cfg)
    for key, used, what in _LOSSES_UNSUPPORTED:
        if used(cfg):
            raise RecipeError(f"{key}: {what} is not implemented by agentrl's policy losses; leave {key} at "
                              "its default")


def validate_correction(cfg: AgentRLConfig) -> None:
    """A registered rollout correction mode; under vLLM, VESPO with a per-token mode (TRL's own
    trainer refuses the others there when it is built)."""
    from agentrl import losses

    mode = cfg.vllm_importance_sampling_mode
    if mode not in losses.rollout_correction_names():
        raise RecipeError(f"vllm_importance_sampling_mode must be one of {', '.join(losses.rollout_correction_names())}, "
                          f"got {mode!r}")
    if (cfg.use_vllm and cfg.vllm_importance_sampling_correction and cfg.loss_type == "vespo"
            and mode not in ("token_truncate", "token_mask")):
        raise RecipeError(f"loss_type vespo under vLLM needs vllm_importance_sampling_mode token_truncate or token_mask "
                          f"(TRL's rule), got {mode!r}")


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
    """vLLM in this process (TRL's ``VLLMGeneration``) or its CPU build's venv (agentrl's engine)."""
    from agentrl.sampling.vllm_engine import vllm_in_process, vllm_python

    return vllm_in_process() or vllm_python() is not None


def _config_folder(name: str) -> Path | None:
    """A folder holding the model's config.json, found without building or downloading anything
    (None: not found that way; the trainer's build checks the folder it resolves)."""
    from agentrl.models.registry import EMBEDDED_MODELS, WARM_STARTS, ensure_tiny

    if name == "tiny" or name in WARM_STARTS:  # the warm starts are the tiny model after SFT: its shape
        return ensure_tiny()  # built once in about a second, cached
    if name in EMBEDDED_MODELS:
        return None
    p = Path(name).expanduser()
    if p.is_dir():
        return p
    if _HUB_ID.match(name):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name, "config.json")
        except Exception:  # a malformed id or an unreadable cache: not cached
            return None
        return Path(cached).parent if isinstance(cached, str) else None
    return None


def validate_vllm_model(cfg: AgentRLConfig) -> None:
    """Under agentrl's vLLM engine (vLLM's CPU build), a model whose attention head size the build
    has kernels for (it refuses any other a minute into starting; ``agentrl.sampling.vllm_heads``)."""
    from agentrl.sampling.vllm_engine import uses_engine
    from agentrl.sampling.vllm_heads import head_size_refusal

    if not uses_engine(cfg):
        return
    folder = _config_folder(cfg.model_name_or_path)
    why = folder is not None and head_size_refusal(folder, "use_vllm: false", cfg.model_name_or_path)
    if why:
        raise RecipeError(f"use_vllm: model_name_or_path {why}")


def validate_config(cfg: AgentRLConfig) -> None:
    """Checks that need other modules (env registry, credit modules, model folders, vLLM)."""
    validate_env(cfg.env_id, cfg.env_modules)
    validate_context(cfg.context_mode)
    validate_tasks(cfg)
    validate_credit(cfg.credit, credit_kwargs(cfg))
    validate_algorithm(cfg)
    validate_loss(cfg)
    validate_model(cfg.model_name_or_path)
    if cfg.use_vllm and not vllm_available():
        raise RecipeError("use_vllm: true needs vLLM: its CPU build's venv (make vllm-venv) or, on a CUDA "
                          "machine, pip install 'agentrl[vllm]'; set use_vllm: false to generate with transformers")
    if cfg.use_vllm and cfg.vllm_mode not in ("server", "colocate"):
        raise RecipeError(f"vllm_mode must be 'server' or 'colocate', got {cfg.vllm_mode!r}")
    validate_vllm_model(cfg)
    if cfg.sampler_dtype is not None and (cfg.use_vllm or cfg.use_transformers_continuous_batching):
        raise RecipeError("sampler_dtype applies to transformers' generate; vLLM and continuous batching sample "
                          "in their own dtype: leave sampler_dtype unset")
