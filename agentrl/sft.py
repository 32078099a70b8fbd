"""``agentrl sft``: supervised warm start on an env's expert trajectories (TRL's SFTTrainer).

    python -m agentrl.sft --env agentrl/TextCraft-v0 --model smollm2 --episodes 64 --out runs/sft \
        [--options '{"families": ["depth2"]}'] [--env-kwargs '{"prompt_style": "compact"}'] \
        [--max-steps 50 | --epochs 1] [--lr 1e-4] [--batch-size 8]

Any registered env works: an episode is played by the env's own ``expert_action()``; every turn
becomes one chat-format example whose prompt is exactly the window prompt the RL rollout builds
(``env.prompt`` with the same history, the tokenizer's chat template and the ``<action>`` prefill
after the assistant header) and whose completion is the rest of the expert's action
(``BODY</action>`` + end of turn). Training is on completion tokens only, so after SFT the policy
writes the actions that RL then samples in exactly the same token context.

``--out`` receives the model + tokenizer (a folder RL can start from), ``sft_data.jsonl`` (the
examples in chat format: ``prompt`` / ``completion`` message lists, reusable with any SFT tool)
and ``sft_metrics.json`` (expert success, example count, the loss curve).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl_envs.actions import format_action

from agentrl.cli_args import add_env_modules, both_spellings, json_mapping
from agentrl.plugins import import_plugins
from agentrl.recipe_keys import default_of

HISTORY_LENGTH = default_of("history_length")
"""(obs, action) pairs in the prompt: the RL recipe's default, so that both see the same prompts."""
PREFILL = default_of("prefill")
"""Text after the assistant header: the RL recipe's default (the ``<action>`` tag the expert's action follows)."""
MAX_LENGTH = default_of("max_prompt_tokens")
"""Tokens of the longest example kept: the RL recipe's prompt budget (recorded as its max_prompt_tokens)."""


class SFTError(Exception):
    """Bad SFT input: reported as one line, exit code 2."""


@dataclass
class ExpertStep:
    """One expert turn: the user message the policy sees and the expert's action body."""

    user: str
    """The env's rendered user message (``env.prompt``) at this turn."""
    action: str
    """The expert's action body (without the ``<action>`` tags)."""
    task_family: str = ""
    """The task family, for per-family counts."""


@dataclass
class ExpertData:
    """Expert rollouts turned into SFT examples, plus what happened while collecting them."""

    steps: list[ExpertStep] = field(default_factory=list)
    """One example per expert turn (from won episodes only unless ``keep_failed``)."""
    episodes: int = 0
    """Episodes played."""
    won: int = 0
    """Episodes the expert won."""
    corpus: list[str] = field(default_factory=list)
    """Env text seen while collecting (user messages and actions): a tokenizer corpus."""
    records: list[dict[str, Any]] = field(default_factory=list)
    """Every expert step as a step record (``agentrl.records.StepRecord.to_dict``): the run
    record's ``rollouts/iter_00000.jsonl``, so ``agentrl show`` prints what SFT imitated."""


def make_env(env_id: str, env_kwargs: dict | None = None):
    """``agentrl_envs.make_env`` with its one-line error as an SFTError."""
    from agentrl_envs.probe import make_env as _make

    try:
        return _make(env_id, env_kwargs)
    except ValueError as e:
        raise SFTError(str(e)) from None


def collect_expert(
    env_id: str,
    seeds: list[int],
    options: dict | None = None,
    env_kwargs: dict | None = None,
    history_length: int = HISTORY_LENGTH,
    max_turns: int | None = None,
    keep_failed: bool = False,
) -> ExpertData:
    """Play the env's expert on ``seeds`` and record (user message, expert action) per turn.

    The user message comes from the rollout's own prompt builder with the same history the RL
    rollout keeps ((observation, parsed action body) pairs, the last ``history_length`` shown).
    """
    from agentrl.rollout.prompts import user_prompt

    env = make_env(env_id, env_kwargs)
    base = env.unwrapped
    if max_turns is None:
        max_turns = env.spec.max_episode_steps or 50 if env.spec else 50
    data = ExpertData()
    for seed in seeds:
        obs, info = env.reset(seed=int(seed), options=dict(options or {}))
        history: list[tuple[str, str]] = []
        ep_steps: list[ExpertStep] = []
        won = False
        for t in range(max_turns):
            user = user_prompt(base, obs, info, history, t, history_length)
            try:
                body = base.expert_action()
            except NotImplementedError:
                raise SFTError(f"{env_id} has no expert (expert_action() is not implemented)") from None
            if body is None:
                break
            ep_steps.append(ExpertStep(user, body, str(info.get("task_family", ""))))
            response = format_action(body)
            data.corpus += [user, response]
            family = str(info.get("task_family", "")) or None
            next_obs, r, terminated, truncated, info = env.step(response)
            history.append((obs, info.get("action") or body))
            won = bool(info.get("won"))
            data.records.append(_expert_record(seed, t, obs, response, r, terminated or truncated, won, family))
            obs = next_obs
            if terminated or truncated:
                break
        data.episodes += 1
        data.won += int(won)
        if won or keep_failed:
            data.steps += ep_steps
    env.close()
    return data


def _expert_record(seed: int, t: int, obs: str, response: str, reward: float, done: bool, won: bool,
                   family: str | None) -> dict[str, Any]:
    from agentrl.records import StepRecord

    rec = StepRecord(group_id=f"expert:{seed}", traj_id=f"expert:{seed}", t=t, obs=obs, action=response,
                     reward=float(reward), done=bool(done), won=won, task_family=family,
                     info={"response": response, "advantage": 0.0, "env_reward": float(reward)})
    return rec.to_dict()


def write_run_record(out: Path, settings: dict[str, Any], metrics: dict[str, Any], records: list[dict],
                     argv: list[str] | None = None) -> None:
    """What an RL run's folder holds, for an SFT folder: ``recipe.yaml`` (the settings an episode
    depends on, so ``agentrl eval`` replays them), ``run_info.json``, ``metrics.jsonl`` (the loss
    curve) and the expert's episodes as ``rollouts/iter_00000.jsonl`` (``agentrl show``)."""
    from agentrl.records import write_jsonl
    from agentrl.runinfo import METRICS_FILE, metrics_line, write_run_files

    write_run_files(out, settings, argv, by="agentrl sft")
    with (out / METRICS_FILE).open("w") as f:
        for step, loss in metrics.get("loss_curve", []):
            f.write(metrics_line({"step": step, "loss": loss}) + "\n")
    write_jsonl(records, out / "rollouts" / "iter_00000.jsonl")


def run_settings(env_id: str, model: str, env_kwargs: dict | None, options: dict | None, history_length: int,
                 prefill: str = PREFILL, max_length: int = MAX_LENGTH, **train) -> dict[str, Any]:
    """The recipe keys of an SFT run, as an RL recipe names them: every key an episode depends on
    (``recipe_keys.episode_keys``; the defaults where SFT does not set it), the tasks and the model."""
    from agentrl.recipe_keys import episode_keys
    from agentrl.rollout.contexts import WindowContext

    opts = dict(options or {})
    settings = {k: default_of(k) for k in episode_keys()}
    settings.update(env_id=env_id, env_kwargs=dict(env_kwargs or {}), context_mode=WindowContext.name,  # a row a step
                    history_length=history_length, prefill=prefill, max_prompt_tokens=max_length, max_turns=None,
                    task_split=opts.pop("split", "train"), task_families=opts.pop("families", None),
                    task_options=opts, model_name_or_path=model)
    return {**settings, **train}


def prompt_ids(tokenizer, user: str, prefill: str = PREFILL) -> list[int]:
    """Token ids of the RL window prompt, built exactly as ``agentrl.rollout`` builds them: the
    chat template (user turn + assistant header) as text, the prefill appended, tokenized once.
    """
    from agentrl.rollout.prompts import chat_text, encode

    return encode(tokenizer, chat_text(tokenizer, user) + prefill)


def completion_ids(tokenizer, body: str) -> list[int]:
    """Token ids the policy must write after the prefill: ``BODY</action>`` + end of turn."""
    ids = tokenizer(f"{body}</action>", add_special_tokens=False)["input_ids"]
    return list(ids) + [tokenizer.eos_token_id]


def to_chat_rows(steps: list[ExpertStep]) -> list[dict[str, Any]]:
    """Prompt-completion rows in TRL's conversational format (what ``sft_data.jsonl`` holds)."""
    return [{"prompt": [{"role": "user", "content": s.user}],
             "completion": [{"role": "assistant", "content": format_action(s.action)}],
             "task_family": s.task_family} for s in steps]


def tokenize_steps(tokenizer, steps: list[ExpertStep], prefill: str = PREFILL,
                   max_length: int | None = None):
    """A pre-tokenized ``datasets.Dataset`` (input_ids, completion_mask) for SFTTrainer."""
    from datasets import Dataset

    rows = {"input_ids": [], "completion_mask": []}
    for s in steps:
        p, c = prompt_ids(tokenizer, s.user, prefill), completion_ids(tokenizer, s.action)
        ids = p + c
        if max_length is not None and len(ids) > max_length:
            continue  # RL would have shrunk history; skip rather than train on a cut prompt
        rows["input_ids"].append(ids)
        rows["completion_mask"].append([0] * len(p) + [1] * len(c))
    return Dataset.from_dict(rows)


def sft_train(
    model_path: str,
    steps: list[ExpertStep],
    out_dir: str | Path,
    max_steps: int = -1,
    epochs: float = 1.0,
    learning_rate: float = 1e-4,
    batch_size: int = 8,
    grad_accum: int = 1,
    warmup_ratio: float = 0.0,
    weight_decay: float = 0.0,
    seed: int = 0,
    prefill: str = PREFILL,
    max_length: int = MAX_LENGTH,
    logging_steps: int = 5,
    quiet: bool = False,
    bf16: bool = False,
) -> dict[str, Any]:
    """Fine-tune ``model_path`` on ``steps`` with TRL's SFTTrainer; save model + tokenizer.

    Args:
        model_path: model folder or embedded name (``smollm2``).
        steps: the expert examples (``collect_expert(...).steps``).
        out_dir: where the fine-tuned model + tokenizer are saved.
        max_steps: optimizer steps; when > 0 it overrides ``epochs`` (a short warm start).
        epochs: passes over the examples when ``max_steps`` <= 0.
        learning_rate: constant learning rate (after the optional warm-up).
        batch_size: examples per device step.
        grad_accum: gradient accumulation steps.
        warmup_ratio: warm-up as a fraction of the steps (0 = none).
        weight_decay: AdamW weight decay.
        seed: seed of model init order, data shuffling and dropout.
        prefill: text after the assistant header, part of the prompt (as in the rollout).
        max_length: examples longer than this (tokens) are skipped.
        logging_steps: loss logged every this many steps.
        quiet: no progress bar.
        bf16: bf16 autocast (weights and optimizer stay fp32). On CPUs with AMX it runs a 135M
            model's step about twice as fast; without AMX it is slower.

    Returns metrics: examples, train steps, seconds, final loss, the logged loss curve, and the
    trainer itself under ``"trainer"`` (its model is the fine-tuned one).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import SFTConfig, SFTTrainer

    from agentrl.models import resolve_model

    if not steps:
        raise SFTError("no expert examples to train on (did the expert win any episode?)")
    set_seed(seed)
    src = resolve_model(model_path)
    tok = AutoTokenizer.from_pretrained(src)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    ds = tokenize_steps(tok, steps, prefill, max_length)
    out = Path(out_dir)
    cfg = SFTConfig(
        output_dir=str(out / "sft_trainer"),
        max_steps=max_steps,
        num_train_epochs=epochs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        warmup_steps=warmup_ratio,  # a float < 1 is a ratio of the total steps
        weight_decay=weight_decay,
        lr_scheduler_type="constant_with_warmup" if warmup_ratio else "constant",
        logging_steps=logging_steps,
        save_strategy="no",
        report_to=[],
        bf16=bf16,
        use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=False,  # small models on CPU: recomputation only costs time
        completion_only_loss=True,  # loss on the expert's action tokens only
        max_length=max_length,
        seed=seed,
        data_seed=seed,
        disable_tqdm=quiet,
        dataloader_num_workers=0,
    )
    t0 = time.time()
    from agentrl.trainer.callbacks import ReleaseFreedMemory

    # on a CPU, each step's freed heap back to the OS (as the RL trainer does: without it resident
    # memory creeps up step by step, docs/results/alfworld.md)
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok,
                         callbacks=None if torch.cuda.is_available() else [ReleaseFreedMemory()])
    result = trainer.train()
    secs = time.time() - t0
    save_model_atomically(trainer, tok, out)
    losses = [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h]
    return {"examples": len(ds), "train_steps": trainer.state.global_step, "seconds": secs,
            "train_loss": float(result.training_loss), "loss_curve": losses,
            "model": str(out), "trainer": trainer}


def save_model_atomically(trainer, tok, out: Path) -> None:
    """Save model + tokenizer into ``out`` so that ``out/config.json`` exists only beside a complete
    model (the demo and ``make arena`` skip an SFT whose config.json exists): everything is
    written to ``out/.partial-model``, flushed, then moved in with config.json last."""
    import shutil

    tmp = out / ".partial-model"
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.save_model(str(tmp))
    tok.save_pretrained(str(tmp))
    (out / "config.json").unlink(missing_ok=True)  # an older model's: not a marker for this one
    names = sorted(p.name for p in tmp.iterdir() if p.name != "config.json") + ["config.json"]
    for name in names:
        fd = os.open(tmp / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp / name, out / name)
    tmp.rmdir()


def run_sft(
    env_id: str,
    model: str,
    out_dir: str | Path,
    episodes: int,
    seed_start: int = 0,
    options: dict | None = None,
    env_kwargs: dict | None = None,
    history_length: int = HISTORY_LENGTH,
    argv: list[str] | None = None,
    env_modules: list[str] | None = None,
    **train_kwargs,
) -> dict[str, Any]:
    """Collect expert episodes (seeds ``seed_start..+episodes``), write the chat data, train.

    Args:
        env_id: registered gymnasium id.
        model: model folder or embedded name.
        out_dir: output folder (model, tokenizer, ``sft_data.jsonl``, ``sft_metrics.json``).
        episodes: expert episodes to play (one task seed each).
        seed_start: first task seed.
        options: reset options; ``split`` defaults to ``train`` so held-out tasks stay unseen.
        env_kwargs: ``gymnasium.make`` kwargs (e.g. ``{"prompt_style": "compact"}``).
        history_length: steps of history in the prompt; use the RL recipe's value.
        argv: the command line, for ``run_info.json``.
        env_modules: the plug-in modules that registered ``env_id`` (already imported), recorded
            in the run's ``recipe.yaml`` so that ``agentrl eval`` imports them too.
        **train_kwargs: passed to ``sft_train``.
    """
    if episodes <= 0:
        raise SFTError("--episodes must be positive")
    options = {"split": "train", **(options or {})}
    data = collect_expert(env_id, list(range(seed_start, seed_start + episodes)), options, env_kwargs,
                          history_length)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "sft_data.jsonl").open("w") as f:
        for row in to_chat_rows(data.steps):
            f.write(json.dumps(row) + "\n")
    metrics = sft_train(model, data.steps, out, **train_kwargs)
    metrics.pop("trainer", None)
    metrics.update({"env": env_id, "options": options, "env_kwargs": env_kwargs or {},
                    "expert_episodes": data.episodes, "expert_won": data.won})
    (out / "sft_metrics.json").write_text(json.dumps(metrics, indent=2))
    keep = {k: train_kwargs[k] for k in ("max_steps", "learning_rate", "seed") if k in train_kwargs}
    settings = run_settings(env_id, model, env_kwargs, options, history_length, **keep)
    settings["env_modules"] = list(env_modules) or None if env_modules else None
    write_run_record(out, settings, metrics, data.records, argv)
    return metrics


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="agentrl sft", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", required=True, help="gymnasium id, e.g. agentrl/TextCraft-v0")
    p.add_argument("--model", default="smollm2", help="model folder or embedded name (smollm2)")
    p.add_argument("--out", required=True, help="output folder (model + tokenizer + sft_data.jsonl)")
    p.add_argument("--episodes", type=int, default=64, help="expert episodes (task seeds) to imitate")
    p.add_argument("--seed-start", type=int, default=0, help="first task seed")
    p.add_argument("--options", default="{}", help='JSON reset options, e.g. \'{"families": ["depth2"]}\'')
    p.add_argument("--env-kwargs", default="{}", help='JSON dict for gymnasium.make, e.g. \'{"prompt_style": "compact"}\'')
    p.add_argument("--history-length", type=int, default=HISTORY_LENGTH,
                   help=f"steps of history in window prompts (as in RL; default {HISTORY_LENGTH})")
    p.add_argument("--max-steps", type=int, default=-1, help="optimizer steps (overrides --epochs when > 0)")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over the expert data")
    p.add_argument("--learning-rate", "--lr", dest="lr", type=float, default=1e-4,
                   help="learning rate (constant; the recipe key's name, as in agentrl train)")
    p.add_argument("--batch-size", type=int, default=8, help="examples per optimizer step")
    p.add_argument("--seed", type=int, default=0, help="training seed")
    add_env_modules(p)
    return both_spellings(p).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        env_modules = import_plugins(args.env_modules, [Path.cwd()])
        m = run_sft(args.env, args.model, args.out, args.episodes, args.seed_start,
                    json_mapping(args.options, "--options", SFTError),
                    json_mapping(args.env_kwargs, "--env-kwargs", SFTError),
                    args.history_length, argv=list(sys.argv[1:] if argv is None else argv), max_steps=args.max_steps,
                    epochs=args.epochs, learning_rate=args.lr, batch_size=args.batch_size, seed=args.seed,
                    env_modules=env_modules)
    except (SFTError, ValueError) as e:
        print(f"agentrl sft: {e}", file=sys.stderr)
        return 2
    print(f"sft: expert won {m['expert_won']}/{m['expert_episodes']}, {m['examples']} examples, "
          f"{m['train_steps']} steps in {m['seconds']:.0f}s, loss {m['train_loss']:.3f} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
