"""Held-out evaluation of a checkpoint with the settings it was trained with.

The demo and the arena both ask the same question of every checkpoint: "how many of these fixed
held-out tasks does the greedy policy solve, with exactly the prompt, history, completion length
and turn limit it was trained with?" Keeping per-task outcomes (not only the rate) lets two
checkpoints be compared *paired* over the same tasks, whose variance is far smaller than the
binomial one (see :func:`paired_difference`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from agentrl.recipe_keys import default_of


@dataclass
class HeldOutSettings:
    """How a policy is rolled out for held-out evaluation (copied from its training recipe; the
    defaults are the recipe keys', ``agentrl.recipe_keys``)."""

    env_id: str
    """Gymnasium id of the env."""
    split: str = "valid"
    """Reset option ``split`` of the held-out tasks (never trained on)."""
    families: list[str] | None = None
    """Reset option ``families`` (None = all of the env's families)."""
    episodes: int = 59
    """Held-out tasks: seeds 0..episodes-1 of the split (unless ``seeds`` is given)."""
    seeds: list[int] | None = None
    """Explicit task seeds instead of 0..episodes-1 (e.g. fresh distractor draws of the goals RL
    practised: in TextCraft seed s and s + k x the pool size give the same goal)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make`` (e.g. ``prompt_style``)."""
    context_mode: str = default_of("context_mode")
    """Context mode the policy was trained in."""
    history_length: int = default_of("history_length")
    """(obs, action) pairs in a window prompt."""
    max_turns: int | None = None
    """Step cap per episode (None = the env's limit)."""
    max_prompt_tokens: int = default_of("max_prompt_tokens")
    """Prompt budget per turn."""
    max_new_tokens: int = default_of("max_completion_length")
    """Completion length per turn (the recipe's ``max_completion_length``)."""
    prefill: str = default_of("prefill")
    """Text after the assistant header."""
    stop_strings: tuple[str, ...] = ()
    """Strings that end a turn (the recipe's ``stop_strings``)."""
    temperature: float = 1.0
    """Sampled evaluation's temperature (the recipe's)."""
    top_k: int = 0
    """Sampled evaluation's top-k (the recipe's; 0: none)."""
    top_p: float = 1.0
    """Sampled evaluation's top-p (the recipe's; 1.0: none)."""
    min_p: float = 0.0
    """Sampled evaluation's min-p (the recipe's; 0.0: none)."""
    max_batch: int = 0
    """Episodes played (and generated) together at most; 0: all at once. Bounds the memory of a
    large evaluation (each episode in a batch holds its KV cache and per-step scores). A sampled
    episode's draws depend on it; a greedy one's outcome does not in fp32, but under bf16 autocast
    (the SmolLM2 demos) a batch's padding and shapes move the rounding, which can flip a near-tied
    greedy choice (ALFWorld seed 1 after SFT: 5 of 20 unseen games won at 32, 4 of 20 at 16).
    Compare checkpoints under the same value."""

    @classmethod
    def from_config(cls, cfg, split: str = "valid", episodes: int = 59,
                    families: list[str] | None = None, seeds: list[int] | None = None) -> HeldOutSettings:
        """The settings of a training config (an ``AgentRLConfig``); held-out split and size apart
        (``seeds``: these tasks instead of seeds 0..episodes-1)."""
        return cls(env_id=cfg.env_id, split=split, episodes=len(seeds) if seeds is not None else episodes,
                   seeds=list(seeds) if seeds is not None else None,
                   families=list(families if families is not None else (cfg.task_families or [])) or None,
                   env_kwargs=dict(cfg.env_kwargs or {}), context_mode=cfg.context_mode,
                   history_length=cfg.history_length, max_turns=cfg.max_turns,
                   max_prompt_tokens=cfg.max_prompt_tokens, max_new_tokens=cfg.max_completion_length,
                   prefill=cfg.prefill, stop_strings=tuple(cfg.stop_strings or ()),
                   temperature=float(1.0 if cfg.temperature is None else cfg.temperature), top_k=int(cfg.top_k or 0),
                   top_p=float(1.0 if cfg.top_p is None else cfg.top_p), min_p=float(cfg.min_p or 0.0))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rollout(model_dir: str, s: HeldOutSettings, seed: int, repeats: int = 1, temperature: float | None = None):
    """Episodes of ``model_dir`` on the settings' tasks, each task ``repeats`` times in a row:
    greedy when ``temperature`` is None, else sampled at that temperature under the settings'
    top-k, top-p and min-p (``agentrl.sampling``)."""
    import torch

    from agentrl.config.build import rollout_settings
    from agentrl.evaluation.checkpoint import load_policy
    from agentrl.memory_meter import release_freed_memory
    from agentrl.rollout import hf_generate_fn, run_episodes
    from agentrl.sampling import SamplingSpec, end_token_ids

    torch.manual_seed(seed)
    model, tok = load_policy(str(model_dir))
    spec = SamplingSpec(temperature=1.0 if temperature is None else temperature, top_k=s.top_k, top_p=s.top_p,
                        min_p=s.min_p, max_new_tokens=s.max_new_tokens,
                        end_token_ids=tuple(sorted(end_token_ids(model, tok))), greedy=temperature is None)
    gen = hf_generate_fn(model, tok, spec=spec)
    options: dict[str, Any] = {"split": s.split}
    if s.families:
        options["families"] = list(s.families)
    seeds = list(s.seeds) if s.seeds is not None else list(range(s.episodes))
    tasks = [{"seed": k, "options": options, "group_id": f"heldout-{k}"} for k in seeds for _ in range(repeats)]
    size = s.max_batch if s.max_batch > 0 else max(len(tasks), 1)
    rs = rollout_settings(s)
    episodes = []
    for i in range(0, len(tasks), size):
        episodes += run_episodes(tasks[i:i + size], gen, tok, rs)
        # a batch's KV caches and scores are freed at its end, but glibc keeps the pages: without
        # this the next batch's allocations land beside them and the evaluation's resident peak
        # grows with the number of batches (ALFWorld design: 6.02 GiB at 16 episodes a batch)
        release_freed_memory()
    return episodes


def evaluate_wins(model_dir: str, s: HeldOutSettings, seed: int = 0) -> dict[str, Any]:
    """Greedy rollouts of ``model_dir`` on the held-out tasks: success (%), its binomial s.e.,
    the invalid-action rate, the mean episode length and the per-task outcomes ``wins``."""
    from agentrl.rollout.metrics import episode_metrics

    eps = _rollout(model_dir, s, seed)
    m = episode_metrics(eps)  # the trainer's and agentrl eval's numbers, from the same function
    return {"success": 100 * m["env/success"], "success_se": 100 * m["env/success_se"], "episodes": len(eps),
            "invalid_rate": m["env/invalid_action_rate"], "mean_length": m["env/episode_len"],
            "wins": [bool(e.won) for e in eps]}


def sampled_success(model_dir: str, s: HeldOutSettings, samples: int, temperature: float | None = None,
                    seed: int = 0) -> list[float]:
    """Per task, the share of ``samples`` episodes sampled at ``temperature`` (default the
    settings', i.e. the recipe's) that win: what the policy can do on the task beyond its greedy
    answer (RL sharpens exactly that)."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    t = s.temperature if temperature is None else temperature
    wins = [bool(e.won) for e in _rollout(model_dir, s, seed, repeats=samples, temperature=t)]
    return [sum(wins[i:i + samples]) / samples for i in range(0, len(wins), samples)]


def paired_difference(before: list[bool] | list[float], after: list[bool] | list[float]) -> tuple[float, float]:
    """Difference in points over the same tasks and its paired standard error.

    With d_i = after_i - before_i in {-1, 0, 1}, the s.e. of mean(d) is std(d) / sqrt(n); what
    the tasks share cancels out of the variance, which an unpaired s.e. ignores. Outcomes may be
    per-task success rates in [0, 1] (``sampled_success``): then the task is the unit.
    """
    n = len(before)
    if n == 0 or n != len(after):
        raise ValueError(f"paired outcomes need two equal non-empty lists, got {n} and {len(after)}")
    d = [float(a) - float(b) for a, b in zip(after, before, strict=True)]
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / max(n - 1, 1)
    return 100 * mean, 100 * math.sqrt(var / n)
