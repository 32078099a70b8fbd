"""A tiny ToolReason policy for APPO's CPU checks: ``agentrl bench appo-warm --out DIR``.

A random-init tiny model never writes a well-formed tool call, so every rollout would score -1,
every group advantage would be 0 and a test of APPO would check nothing. This builds a tiny Qwen2
model whose tokenizer is trained on ToolReason text and warm-starts it on the env's expert
(``expert_response``) in trajectory mode, loss on the model's tokens only. 150 steps
are enough for sampled rollouts (temperature 1) that mix well-formed tool calls and answers with
broken ones (with the recipe's bonus for accepted tool calls, groups with reward spread).
Takes ~90 s on a loaded 2-core machine.

``expert_episodes`` is also the reference the branch tests replay: episodes played by the expert
through ``run_episodes`` with the ``trajectory`` context, tokens as the trainer would keep them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ENV_ID = "agentrl/ToolReason-v0"
ENV_KWARGS = {"math_size": 40, "math_tasks": ["basic_arithmetic"], "tool_call_limit": 2}
"""Small, fast tasks: one-line arithmetic (one python call + an answer) and 2-hop KB questions."""
OPTIONS = {"split": "train"}


def expert_generate(envs, tokenizer):
    """A ``generate`` callable that answers every prompt with the expert's next response (+ EOS).
    Use it with one task per ``run_episodes`` call: the prompt is then env slot 0's."""
    from agentrl.rollout.prompts import encode

    def gen(prompts: list[list[int]]) -> list[list[int]]:
        env = envs.envs[0].unwrapped
        text = env.expert_response() or "<answer>\\boxed{0}</answer>"
        return [encode(tokenizer, text) + [tokenizer.eos_token_id] for _ in prompts]

    return gen


def expert_episodes(tokenizer, seeds, env_kwargs=None, options=None, max_prompt_tokens: int = 4096):
    """Expert episodes of ToolReason (trajectory context, prefill ""), one per seed."""
    from agentrl.rollout import InProcessEnvs, RolloutSettings, run_episodes

    kw = dict(ENV_KWARGS if env_kwargs is None else env_kwargs)
    settings = RolloutSettings(env_id=ENV_ID, env_kwargs=kw, context_mode="trajectory", prefill="",
                               max_prompt_tokens=max_prompt_tokens)
    envs = InProcessEnvs(ENV_ID, kw, 1)
    try:
        return [run_episodes([{"seed": int(s), "options": dict(options or OPTIONS), "group_id": f"g{s}",
                               "traj_id": f"g{s}/0"}], expert_generate(envs, tokenizer), tokenizer, settings,
                             envs=envs)[0] for s in seeds]
    finally:
        envs.close()


def corpus(n: int = 60, env_kwargs=None) -> list[str]:
    """ToolReason text for the tokenizer: prompts, expert responses and tool results."""
    import agentrl_envs  # noqa: F401  (registers the ids)
    import gymnasium as gym

    env = gym.make(ENV_ID, **dict(ENV_KWARGS if env_kwargs is None else env_kwargs))
    texts = []
    try:
        for s in range(n):
            obs, info = env.reset(seed=s, options=OPTIONS)
            texts.append(env.unwrapped.prompt(obs, info, [], 0))
            while (resp := env.unwrapped.expert_response()) is not None:
                obs, *_ = env.step(resp)
                texts += [resp, obs]
    finally:
        env.close()
    return texts


def warm_tiny_model(out_dir: str | Path, steps: int = 150, tasks: int = 32, seed: int = 0,
                    lr: float = 3e-3, batch: int = 4, hidden_size: int = 64) -> Path:
    """Build the tiny model in ``out_dir`` and fit it to ``tasks`` expert episodes; returns the path."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.models import build_tiny_model

    out = Path(out_dir)
    texts = corpus(tasks)
    build_tiny_model(out, texts=texts * 3, vocab_size=600, hidden_size=hidden_size, num_layers=2, num_heads=2,
                     num_kv_heads=1, seed=seed)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    eps = expert_episodes(tok, range(tasks))
    seqs = [(ep.tokens.prompt_ids + ep.tokens.completion_ids,
             [0] * len(ep.tokens.prompt_ids) + ep.tokens.env_mask) for ep in eps if ep.steps]
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(seqs), (batch,), generator=g).tolist()
        width = max(len(seqs[i][0]) for i in idx)
        ids = torch.full((batch, width), tok.pad_token_id)
        att = torch.zeros((batch, width), dtype=torch.long)
        labels = torch.full((batch, width), -100)
        for row, i in enumerate(idx):
            x, m = seqs[i]
            ids[row, :len(x)] = torch.tensor(x)
            att[row, :len(x)] = 1
            labels[row, :len(x)] = torch.where(torch.tensor(m) == 1, torch.tensor(x), -100)
        loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    model.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl bench appo-warm", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="model folder to write")
    ap.add_argument("--steps", type=int, default=150, help="warm-start steps (default 150)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    print(warm_tiny_model(args.out, steps=args.steps, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
