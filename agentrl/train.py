"""``python -m agentrl.train RECIPE.yaml [--field value ...]``: train an agent from a recipe.

Also ``accelerate launch --config_file accelerate_configs/zero3.yaml -m agentrl.train RECIPE.yaml``.
Bad input (unknown key, env id, credit module, missing model folder, vLLM absent, a value out of
range) prints one line on stderr and exits with code 2; so does a run whose updates the non-finite
guard refused ``nonfinite_max_consecutive`` times in a row. ``--resume_from_checkpoint
PATH|true|auto`` continues a run (true: the newest complete checkpoint; auto: that, or start an
empty folder, or do nothing for a finished run; see ``resume_target``); a non-empty ``output_dir``
is refused otherwise, unless ``--overwrite_output_dir true`` (the folder is then cleared first).
Checkpoints appear only when complete (``agentrl.checkpoints``). The run folder gets ``recipe.yaml`` (resolved),
``run_info.json`` (versions, git commit), ``metrics.jsonl`` (one line per logged step) and wandb's
files.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# agentrl.config imports TRL (and torch): deferred so that a recipe's env: block is exported first
from agentrl.recipe_file import RecipeError, apply_recipe_env, first_line, read_recipe_file

if TYPE_CHECKING:
    from agentrl.config import AgentRLConfig


def _load(path: str | None, overrides: list[str]) -> AgentRLConfig:
    """Export the recipe's env: block, then import TRL and build the validated config."""
    if path is not None:
        apply_recipe_env(read_recipe_file(path))
    from agentrl.runinfo import quiet_wandb_banner

    quiet_wandb_banner()
    from agentrl.config import load_recipe

    return load_recipe(path, overrides)


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


CHECK_USAGE = """usage: agentrl check-recipe RECIPE.yaml [--field value ...]
       agentrl check-recipe [RECIPE.yaml] --list [--env-modules MODULE ...]

Validate a recipe (and CLI overrides) as `agentrl train` would, without loading the model or
training: unknown keys (with "did you mean"), values out of range, its env_modules (imported with
the recipe's folder and the working folder on the path), env id, env kwargs and task options (one
env reset), credit module and its kwargs, algorithm, policy loss, model folder, vLLM; then runs each
plug-in the recipe names (an env of its own, estimator, loss, reward shaping) once on a small synthetic
input and checks what it returns, as training would. Prints
"recipe OK" and exits 0, or prints one line and exits 2. `agentrl train --help` lists the recipe
keys; --list prints what the registries hold (env ids, contexts, credit estimators, policy losses,
algorithms), a recipe's or --env-modules' plug-ins included."""


def registered_names() -> dict[str, list[str]]:
    """What each registry holds (a plug-in's names with their module in brackets)."""
    from agentrl_envs.probe import registered_env_ids
    from gymnasium.envs.registration import registry as envs

    from agentrl import algorithms, credit, losses
    from agentrl.algorithms.base import _ALGORITHMS
    from agentrl.credit.registry import REGISTRY
    from agentrl.rollout.contexts import _CONTEXTS, context_names

    def mark(name: str, module: str) -> str:
        return name if module.startswith(("agentrl.", "agentrl_envs")) else f"{name} ({module})"

    def entry(env_id: str) -> str:
        ep = envs[env_id].entry_point
        return ep.split(":")[0] if isinstance(ep, str) else getattr(ep, "__module__", "?")

    return {
        "env ids": [mark(i, entry(i)) for i in registered_env_ids()],
        "contexts (context_mode)": [mark(n, _CONTEXTS[n].__module__) for n in context_names()],
        "credit estimators (credit)": [mark(n, REGISTRY[n].fn.__module__) for n in credit.available("all")],
        "policy losses (loss_type)": [mark(n, losses.get_policy_loss(n).__module__)
                                      for n in losses.policy_loss_names()],
        "algorithms (algorithm)": [mark(n, _ALGORITHMS[n].__module__) for n in algorithms.algorithm_names()],
    }


def list_registered(path: str | None, argv: list[str]) -> int:
    """``check-recipe --list``: the registries after the recipe's and the flag's plug-ins are imported."""
    from agentrl.plugins import import_plugins, module_names, recipe_dirs

    flag, rest = [], []
    it = iter(argv)
    for a in it:
        if a in ("--env-modules", "--env_modules"):
            flag.append(next(it, ""))
        elif a.startswith(("--env-modules=", "--env_modules=")):
            flag.append(a.split("=", 1)[1])
        else:
            rest.append(a)
    try:
        recipe_mods = read_recipe_file(path).get("env_modules") if path is not None else None
        import_plugins([*module_names(recipe_mods), *module_names(flag)], recipe_dirs(path))
    except RecipeError as e:
        return _fail("agentrl check-recipe", e)
    for what, names in registered_names().items():
        print(f"{what}: {', '.join(names)}")
    return 0


def check_recipe(path: str | None, overrides: list[str] | None = None) -> int:
    """Validate a recipe (+ overrides) without training: 0 if fine, 2 with one line on stderr."""
    try:
        if path is None:
            raise RecipeError("usage: agentrl check-recipe RECIPE.yaml [--field value ...]")
        cfg = _load(path, list(overrides or []))
        from agentrl.config.plugin_check import check_plugins

        check_plugins(cfg)  # each plug-in once on a synthetic input: its output breaches caught now
    except RecipeError as e:
        return _fail("agentrl check-recipe", e)
    print(f"recipe OK: env {cfg.env_id}, credit {cfg.credit}, model {cfg.model_name_or_path}, "
          f"context {cfg.context_mode}")
    return 0


def check_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(CHECK_USAGE)
        return 0
    try:
        path, rest = split_argv(argv)
    except RecipeError as e:
        return _fail("agentrl check-recipe", e)
    if "--list" in rest:
        return list_registered(path, [a for a in rest if a != "--list"])
    return check_recipe(path, rest)


def build_trainer(cfg: AgentRLConfig, algorithm=None, meter=None):
    """Resolve the model, load the tokenizer and construct the AgentGRPOTrainer (``algorithm``:
    an ``agentrl.algorithms`` plug-in instead of the one the recipe selects). With ``log_memory``
    or a ``meter`` (``agentrl.memory_meter.PhaseMeter``) its steps are metered (``agentrl.trainer.memory_phases``)."""
    from transformers import AutoTokenizer

    from agentrl.models import resolve_model
    from agentrl.models.lora import build_peft_config
    from agentrl.trainer import AgentGRPOTrainer

    model_path = _warm_start(cfg.model_name_or_path) or resolve_model(cfg.model_name_or_path)
    from agentrl.sampling.vllm_engine import uses_engine
    from agentrl.sampling.vllm_heads import head_size_refusal

    why = uses_engine(cfg) and head_size_refusal(model_path, "use_vllm: false", cfg.model_name_or_path)
    if why:  # the folder resolved here (SmolLM2, a hub snapshot) was not open to validate_config
        raise RecipeError(f"use_vllm: model_name_or_path {why}")
    try:
        tok = AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError) as e:  # not on the hub / no network / not a model folder
        raise RecipeError(f"cannot load the tokenizer of {cfg.model_name_or_path}: {first_line(e)}") from None
    if tok.chat_template is None:
        raise RecipeError(f"the tokenizer of {model_path} has no chat template")
    trainer = AgentGRPOTrainer(model=model_path, args=cfg, processing_class=tok, peft_config=build_peft_config(cfg),
                               algorithm=algorithm)
    _install_callbacks(trainer)
    from agentrl.checkpoints import install_atomic_saves
    from agentrl.runinfo import name_base_model

    install_atomic_saves(trainer)
    name_base_model(trainer, cfg.model_name_or_path)
    if meter is not None or cfg.log_memory:
        from agentrl.memory_meter import PhaseMeter, default_gauges
        from agentrl.trainer.memory_phases import instrument

        instrument(trainer, meter or PhaseMeter(default_gauges(trainer.accelerator.device.type)))
    return trainer


def _warm_start(name: str) -> str | None:
    """The folder of an embedded warm start (``agentrl.warm_start``), built on first use; None for
    any other model name."""
    from agentrl.models.registry import WARM_STARTS

    if name not in WARM_STARTS:
        return None
    from agentrl.warm_start import ensure_warm_start

    return str(ensure_warm_start(name))


def success_line(log_history: list[dict], k: int = 5) -> str | None:
    """``env/success`` of the run's first and last ``k`` logged training steps (means), as one
    line: whether the sampled success rose, in the run's own output. None with fewer than 2 steps."""
    rows = [(h["step"], h["env/success"]) for h in log_history if "env/success" in h and "loss" in h]
    if len(rows) < 2:
        return None
    k = min(k, len(rows) // 2)
    first, last = rows[:k], rows[-k:]

    def span(part):
        return f"step {part[0][0]}" if len(part) == 1 else f"steps {part[0][0]}-{part[-1][0]}"

    def mean(part):
        return sum(v for _, v in part) / len(part)

    return (f"env/success (sampled, {len(rows)} steps): {span(first)} {mean(first):.2f} -> "
            f"{span(last)} {mean(last):.2f}")


def compared_steps(cfg: AgentRLConfig, world: int = 1) -> int:
    """How many steps ``success_line`` averages at each end: a quarter of the run in whole passes
    over the training tasks (both ends then saw every task equally often), else 5 when the run
    makes fewer than four passes."""
    per_step = max(1, cfg.per_device_train_batch_size * world * cfg.gradient_accumulation_steps // cfg.num_generations)
    epoch = -(-cfg.num_tasks // per_step)   # steps per pass over the tasks (an epoch of the task order)
    passes = cfg.max_steps // (4 * epoch) if cfg.max_steps > 0 else 0
    return epoch * passes if passes else 5


def _install_callbacks(trainer) -> None:
    """metrics.jsonl, a log line with the step and numbers as numbers (instead of TRL's printer /
    progress callbacks), and no false alarm about a tied lm_head on resume."""
    import logging

    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from agentrl.runinfo import TiedHeadFilter, make_callbacks, ties_embeddings

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    for cb in make_callbacks():
        trainer.add_callback(cb)
    if ties_embeddings(trainer.model):
        log = logging.getLogger("transformers.trainer")
        if not any(isinstance(f, TiedHeadFilter) for f in log.filters):
            log.addFilter(TiedHeadFilter())


def _wandb_dir_in_run(output_dir: str) -> None:
    """wandb writes into the run folder (``output_dir/wandb``), not ``./wandb``, unless the user
    set WANDB_DIR (a value we set for an earlier run of this process is replaced)."""
    ours = os.environ.get("AGENTRL_SET_WANDB_DIR")
    if "WANDB_DIR" in os.environ and os.environ["WANDB_DIR"] != ours:
        return
    os.environ["WANDB_DIR"] = os.environ["AGENTRL_SET_WANDB_DIR"] = str(Path(output_dir).resolve())


def check_output_dir(cfg: AgentRLConfig, resume: str | None) -> bool:
    """RecipeError when output_dir cannot take this run: a file, or a non-empty folder without a
    resume or ``overwrite_output_dir`` (a new run must never mix with another's checkpoints and
    rollouts). True when it is to be cleared first. No side effects (a launcher checks it too)."""
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():
        raise RecipeError(f"output_dir {out} is a file")
    if resume is not None or not out.is_dir() or not any(out.iterdir()):
        return False
    if not cfg.overwrite_output_dir:
        raise RecipeError(f"output_dir {out} is not empty: resume with --resume_from_checkpoint true, "
                          "clear it with --overwrite_output_dir true, or pick another --output_dir")
    if out.resolve() in (Path.cwd().resolve(), Path.home().resolve(), Path("/")):
        raise RecipeError(f"overwrite_output_dir: refusing to clear {out}")
    return True


def prepare_output_dir(cfg: AgentRLConfig, resume: str | None) -> None:
    """``check_output_dir``, then clear the folder when asked to. Main process only (the others
    start after it, under accelerate)."""
    if int(os.environ.get("RANK", "0")) == 0 and check_output_dir(cfg, resume):
        shutil.rmtree(cfg.output_dir)


# the files agentrl train writes into output_dir before its first checkpoint
_OWN_FILES = {"recipe.yaml", "run_info.json", "metrics.jsonl", "wandb", "rollouts", "README.md", ".partial"}


class RunFinished(Exception):
    """``--resume_from_checkpoint auto`` on a run that already reached max_steps."""


def _say(msg: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"agentrl train: {msg}", file=sys.stderr, flush=True)


def _finished_step(output_dir: Path) -> int | None:
    from agentrl.runinfo import RUN_INFO_FILE

    try:
        return json.loads((output_dir / RUN_INFO_FILE).read_text()).get("finished_step")
    except (OSError, ValueError, AttributeError):
        return None


def _skipped(skipped) -> str:
    return "; ".join(f"skipped {ck.name}: {why}" for ck, why in skipped)


def resume_target(value, output_dir: str, max_steps: int = -1) -> str | None:
    """``--resume_from_checkpoint``: true/last/latest = the newest complete checkpoint in
    output_dir (newer incomplete ones are skipped, saying why), false/no/none = start fresh,
    auto = resume if a complete checkpoint exists, start if output_dir is empty or holds only what
    a run killed before its first checkpoint leaves (cleared first), RunFinished if the run already
    reached max_steps, else refuse; any other value is a checkpoint folder that must be complete."""
    from agentrl.checkpoints import incomplete_reason, newest_complete

    if value is None or value is False:
        return None
    text = str(value).strip()
    if text.lower() in ("", "false", "no", "none", "0"):
        return None
    out = Path(output_dir)
    if text.lower() == "auto":
        done = _finished_step(out)
        if done is not None and (max_steps <= 0 or done >= max_steps):
            raise RunFinished(f"{out} already finished (step {done}): nothing to do")
        ck, skipped = newest_complete(out)
        if ck is not None:
            _say(f"resuming from {ck}" + (f" ({_skipped(skipped)})" if skipped else ""))
            return str(ck)
        rest = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        foreign = [n for n in rest if n not in _OWN_FILES and not n.startswith("checkpoint-")]
        if foreign:
            raise RecipeError(f"--resume_from_checkpoint auto: {out} has no complete checkpoint and holds files "
                              f"agentrl train did not write ({', '.join(foreign[:3])}): pick another --output_dir "
                              "or clear it with --overwrite_output_dir true")
        if rest and int(os.environ.get("RANK", "0")) == 0:
            _say(f"{out}: no complete checkpoint, starting over" + (f" ({_skipped(skipped)})" if skipped else ""))
            shutil.rmtree(out)
        return None
    if text.lower() in ("true", "last", "latest", "1", "yes"):
        ck, skipped = newest_complete(out)
        if ck is None:
            why = f" ({_skipped(skipped)})" if skipped else ""
            raise RecipeError(f"--resume_from_checkpoint {text}: no complete checkpoint-* folder in {output_dir}{why}")
        _say(f"resuming from {ck}" + (f" ({_skipped(skipped)})" if skipped else ""))
        return str(ck)
    if not Path(text).is_dir():
        raise RecipeError(f"--resume_from_checkpoint: {text} is not a checkpoint folder")
    why = incomplete_reason(Path(text))
    if why is not None:
        raise RecipeError(f"--resume_from_checkpoint: {text} is incomplete ({why})")
    return text


def keys_help() -> str:
    """The recipe keys help (``agentrl.recipe_keys``: no TRL import, so ``--help`` is fast)."""
    from agentrl.recipe_keys import recipe_keys_help

    return recipe_keys_help()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        print("\nRecipe keys (YAML `key: value`, or `--key value` / `--key-with-dashes value` on the command "
              "line, which wins):")
        print(keys_help())
        print("\nThe names the registries hold (env ids, contexts, credit estimators, policy losses, algorithms; a "
              "plug-in's too): agentrl check-recipe [RECIPE] --list [--env-modules MODULE]")
        return 0
    try:
        path, rest = split_argv(argv)
        if path is None:
            raise RecipeError("usage: python -m agentrl.train RECIPE.yaml [--field value ...]")
        cfg = _load(path, rest)
        from agentrl.config.plugin_check import check_plugins

        check_plugins(cfg)  # a second, before the model loads: a plug-in's breach is said before training
        try:
            resume = resume_target(cfg.resume_from_checkpoint, cfg.output_dir, cfg.max_steps)
        except RunFinished as e:
            _say(str(e))
            return 0
        prepare_output_dir(cfg, resume)
        _wandb_dir_in_run(cfg.output_dir)
        from agentrl.precision import emulated_bf16_warning

        if warning := emulated_bf16_warning(bool(cfg.bf16), bool(cfg.use_cpu)):
            _say(warning)
        trainer = build_trainer(cfg)
    except RecipeError as e:
        return _fail("agentrl train", e)
    if trainer.accelerator.is_main_process:
        from agentrl.runinfo import write_run_info

        write_run_info(cfg, argv)
    if trainer.accelerator.is_main_process:
        from agentrl.checkpoints import clear_staging

        left = clear_staging(cfg.output_dir)
        if left:
            _say(f"removed {', '.join(left)}: half-written by a killed run")
    from agentrl.producer.async_source import ProducerStop
    from agentrl.rollout.failures import EnvFailureStop
    from agentrl.trainer.guard import NonFiniteStop

    try:
        trainer.train(resume_from_checkpoint=resume)
        trainer.env_failures.check_end()  # a run that trained on nothing but env failures
    except (NonFiniteStop, EnvFailureStop, ProducerStop, RecipeError) as e:  # every rank stops alike: a global verdict, or the
        if trainer.accelerator.is_main_process:  # checkpoint all ranks were asked to resume from
            _fail("agentrl train", e)
        _leave_together(trainer)
        return 2
    trainer.save_model(cfg.output_dir)
    line = success_line(trainer.state.log_history, compared_steps(cfg, trainer.accelerator.num_processes))
    if line:
        _say(line)
    if trainer.accelerator.is_main_process:
        from agentrl.runinfo import mark_finished

        mark_finished(cfg.output_dir, trainer.state.global_step)
    _leave_together(trainer)
    return 0


def _leave_together(trainer) -> None:
    """Every rank waits for the others, then closes the process group: a rank that exits while
    the group's background threads still run can abort ("terminate called without an active
    exception") and fail a run that has finished and saved."""
    import torch.distributed as dist

    trainer.accelerator.wait_for_everyone()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
