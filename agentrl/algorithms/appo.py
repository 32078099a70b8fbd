"""APPO as an algorithm plug-in (arXiv:2606.12384): branch at decision points, credit tokens from both groups.

``algorithm: appo`` selects it and ``algorithm_kwargs`` sets it (``PARAMS``; older recipes that
named only ``credit: appo`` and put these settings in ``credit_kwargs`` are read as such, with a
notice: ``agentrl.config.upgrade``). Its hooks on ``AgentGRPOTrainer``'s steps:

1. ``roll_out``: after the initial rollouts (trajectory mode), one no-grad forward gives
   every completion token its entropy H_t (Eq. 3, full vocabulary at the sampling temperature,
   the update's own forward, ``Player.score``) and its log-prob under the policy and under
   the Omega baseline; Omega (Eq. 4) is taken over model tokens only. Branch points are chosen per
   prompt group (``appo_branch_points.choose_branch_points``, Eq. 5) among the *eligible* tokens:
   model tokens that are not special (EOS) and not whitespace only. One continuation per point is
   played by the ``branch`` context (``agentrl.rollout.branching``) through ``Player.play``.
2. ``advantages``: each branch first inherits its parent's (shaped) rewards of the steps before
   the branch step (``inherit_prefix_rewards``); the ``appo`` estimator gives the records their
   group-relative outcomes and ``token_advantages`` maps them onto each initial rollout's tokens
   (Eq. 6) over the gathered records of all ranks. Branches have no rows (their context gives none).
3. ``loss``: the registered surrogate ``appo``: Eq. 7's future-aware weight A~ = A (1 + b f) on
   each micro-batch, from the loss's own detached log-probs, then the clipped surrogate on A~,
   composed with the reduction of the recipe's ``loss_type`` (``appo+token_mean`` for dapo; with
   b = 0 the ``loss_type`` loss itself).

Omega's rollout-time baseline (``omega_baseline``): Eq. 4's pi_theta / pi_old is 1 for rollouts
just sampled. Default ``"ref"``: log rho = log pi_theta - log pi_ref (the reference log-probs the
KL term needs anyway): Omega is large where training made the continuation more likely; at the
first iteration it is flat and selection falls back to entropy. ``"behaviour"`` reproduces the
authors' code under HF generation: log rho = 0, selection by entropy.

Diagnostics (``appo/*``, this rank's rollouts): branch points per rollout, entropy and Omega at
the chosen points vs all eligible tokens, the share of branches whose outcome differs from their
parent's, branch errors, tool calls per rollout and the format-error rate. ``env/*`` metrics are
over the initial rollouts only. A prompt's group may straddle ranks: the per-prompt pool
(``scope="prompt"``) is then per (prompt, rank); Eq. 6's groups use the gathered records.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from agentrl.algorithms import appo_branch_points as S
from agentrl.algorithms.base import Advantages, Algorithm, register_algorithm
from agentrl.credit import appo as appo_credit
from agentrl.losses import (
    LossBatch,
    LossOutput,
    LossSettings,
    compose,
    get_surrogate,
    policy_loss,
    register_surrogate,
)
from agentrl.recipe_file import RecipeError
from agentrl.registry import Param, resolve_params
from agentrl.rollout.branching import BranchContext, branch_task
from agentrl.rollout.contexts import TrajectoryTokens
from agentrl.rollout.episodes import Episode

SCOPES, SCORES, OMEGA_BASELINES = appo_credit.SCOPES, appo_credit.SCORES, appo_credit.OMEGA_BASELINES
FLAT_OMEGA, COMBINES = appo_credit.FLAT_OMEGA, appo_credit.COMBINES

PARAMS = {
    "budget": Param(1, "B, branch points per rollout (scope='rollout', the paper's Table 3) or per prompt "
                       "(scope='prompt', the authors' code: 8); 0 = no branching", "int", lo=0, hi=4096),
    "scope": Param("rollout", "'rollout': top-B tokens of each rollout (paper); 'prompt': one pool of B over the "
                              "prompt's rollouts (code)", "choice", SCOPES),
    "strict": Param(False, "rank tokens with Z(H) > 0 and Z(Omega) > 0 first (the code's strict pool)", "bool"),
    "score": Param("bs", "'bs': Z(clip Omega) * Z(H) (Eq. 5); 'entropy': Z(H) alone (Table 4 ablation)",
                   "choice", SCORES),
    "omega_baseline": Param("ref", "what the rollout-time log-ratio of Omega compares the policy with: 'ref' "
                                   "(the reference model; needs beta > 0 or use_peft) or 'behaviour' (the "
                                   "generating policy: identically 0 under HF generation, so selection is by "
                                   "entropy, as the authors' code is under HF)", "choice", OMEGA_BASELINES),
    "omega_decay": Param(64.0, "Omega's gamma = 2^(-1/omega_decay); 0 = gamma 1 (the authors' rollout value)",
                         "float", lo=0.0),
    "clip_eps": Param(0.2, "eps' of clip(Omega) (Eq. 5) and of the future weight (Eq. 7): [1 - eps', 1 + eps']",
                      "float", lo=0.0, hi=1.0),
    "flat_omega": Param("entropy", "a rollout whose clipped Omega is constant: rank by 'entropy' or 'keep' "
                                   "the all-zero scores", "choice", FLAT_OMEGA),
    "combine": Param("average", "token advantage from A_init and its branches' A_branch: 'average' (Eq. 6) or "
                                "'sum' (the authors' code)", "choice", COMBINES),
    "grouping": appo_credit.GROUPING,
    "decay": Param(64.0, "FutureKL's gamma = 2^(-1/decay) in the loss (Eq. 7; 64 in the authors' scripts)",
                   "float", lo=1e-6),
    "b": Param(1.0, "weight of the future-aware term: A (1 + b f) (Eq. 7); 0 turns it off (Table 4)",
               "float", lo=0.0),
    "high_only": Param(True, "f = clip(exp(FutureKL), 1, 1 + eps') (the code) instead of [1 - eps', 1 + eps']",
                       "bool"),
    "safety_ratio": Param(6.0, "where A < 0 and the token's ratio exceeds this, f is clamped to [0.8, 1] (the "
                               "code); 0 turns the clamp off", "float", lo=0.0),
}
"""APPO's settings (recipe key ``algorithm_kwargs``): branching (Eqs. 3-5), the token map (Eq. 6)
and the loss (Eq. 7). ``grouping`` is the ``appo`` estimator's kwarg too: the algorithm passes its own."""


def appo_kwargs(cfg) -> dict[str, Any]:
    """APPO's resolved ``algorithm_kwargs`` (defaults filled) of a config."""
    return resolve_params(PARAMS, getattr(cfg, "algorithm_kwargs", None), "algorithm 'appo'")


# ----------------------------------------------------------------------------------- pure parts
def branch_points(group_ids: list[str | None], stats: dict[str, np.ndarray],
                  kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, positions) of the branch points and Omega (N, T) of N rollouts, chosen per prompt
    group (``group_ids[n]``; None = a rollout with no steps, never branched).

    ``stats`` is ``Appo.token_stats``'s output. Omega and the z-scores of Eq. 5 are taken over the
    model tokens (``model_mask``); the points are chosen among the ``eligible`` ones.
    """
    gamma = 1.0 if kw["omega_decay"] == 0 else appo_credit.gamma_from_decay(kw["omega_decay"])
    omega = S.future_value(stats["log_ratio"], stats["model_mask"], gamma)
    rows, pos = [], []
    groups: dict[str, list[int]] = {}
    for i, g in enumerate(group_ids):
        if g is not None:
            groups.setdefault(g, []).append(i)
    for idx in groups.values():
        r, t = S.choose_branch_points(stats["entropy"][idx], omega[idx], stats["model_mask"][idx], kw["budget"],
                                      kw["scope"], kw["strict"], kw["score"], kw["clip_eps"], kw["flat_omega"],
                                      eligible=stats["eligible"][idx])
        rows += [idx[j] for j in r]
        pos += list(t)
    return np.asarray(rows, dtype=int), np.asarray(pos, dtype=int), omega


def inherit_prefix_rewards(episodes: list[Episode]) -> None:
    """Write into each branch record's info (``PREFIX_KEY``) the summed rewards of its parent's
    steps before the branch step k (the branch's records start at t = k), after shaping, so that
    a branch's return counts the bonuses its parent earned on the shared prefix (see
    ``agentrl.credit.appo.PREFIX_KEY``). The parent must be among ``episodes`` (same rank)."""
    by_id = {ep.traj_id: ep for ep in episodes}
    for ep in episodes:
        if not ep.steps or "branch_parent" not in ep.steps[0].info:
            continue
        k = ep.steps[0].t
        parent = by_id[ep.steps[0].info["branch_parent"]]
        prefix = float(sum(r.reward for r in parent.steps if r.t < k))
        for r in ep.steps:
            r.info[appo_credit.PREFIX_KEY] = prefix


def token_advantages(records: list, episodes: list[Episode], kw: dict[str, Any]) -> dict[str, np.ndarray]:
    """traj_id -> per-token advantages (over ``completion_ids``) of the initial rollouts among
    ``episodes``: ``dual_group_advantages`` (Eq. 6) on ``records`` (all ranks' initial rollouts
    and branches). A branch's return includes its inherited prefix (``PREFIX_KEY``)."""
    first: dict[str, Any] = {}
    ret: dict[str, float] = {}
    for r in records:
        first.setdefault(r.traj_id, r)
        ret[r.traj_id] = ret.get(r.traj_id, 0.0) + r.reward
    init = [k for k, r in first.items() if "branch_parent" not in r.info]
    index = {k: i for i, k in enumerate(init)}
    br = [r for r in first.values() if "branch_parent" in r.info and r.info["branch_parent"] in index]
    local = [ep for ep in episodes if ep.steps and ep.traj_id in index]
    pos = np.array([int(r.info["branch_pos"]) for r in br], dtype=int)
    length = max([int(pos.max()) + 2 if len(pos) else 1] + [len(ep.tokens.completion_ids) for ep in local])
    adv = appo_credit.dual_group_advantages(
        [ret[k] for k in init], [str(first[k].group_id) for k in init],
        [ret[r.traj_id] + float(r.info.get(appo_credit.PREFIX_KEY, 0.0)) for r in br],
        [str(r.group_id).removesuffix(appo_credit.BRANCH_SUFFIX) for r in br],
        [index[r.info["branch_parent"]] for r in br], pos, length, kw["combine"], kw["grouping"])
    return {ep.traj_id: adv[index[ep.traj_id], :len(ep.tokens.completion_ids)] for ep in local}


def future_aware(adv: np.ndarray, logps: np.ndarray, old: np.ndarray, mask: np.ndarray,
                 kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(A~, f) of one micro-batch (Eq. 7): f after the negative-advantage safety clamp, the f the
    loss uses. All arrays (B, T); ``old`` = ``logps`` when TRL passes no old log-probs."""
    fkl = appo_credit.future_kl(logps, old, mask, appo_credit.gamma_from_decay(kw["decay"]))
    ratio = np.exp(np.clip(logps - old, -appo_credit.LOG_CLAMP, appo_credit.LOG_CLAMP))
    f = appo_credit.safe_future_weight(adv, appo_credit.future_weight(fkl, kw["clip_eps"], kw["high_only"]), ratio,
                                       kw["safety_ratio"] or None)
    return appo_credit.future_aware_advantages(adv, f, None, kw["b"]), f


def is_branch(ep: Episode) -> bool:
    return isinstance(ep.context, BranchContext)


def _padded(rows: list[list[float]], fill: float, width: int) -> np.ndarray:
    out = np.full((len(rows), width), fill, dtype=np.float64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def rollout_diagnostics(episodes: list[Episode]) -> dict[str, float]:
    """Tool calls per rollout (accepted turns that did not end the episode) and the share of
    rollouts with a turn the env rejected (ToolReason: a bad format)."""
    n = max(len(episodes), 1)
    return {"appo/tool_calls_per_rollout": sum(sum(r.valid and not r.done for r in ep.steps)
                                               for ep in episodes) / n,
            "appo/format_error_rate": sum(any(not r.valid for r in ep.steps) for ep in episodes) / n}


# ----------------------------------------------------------------------------------- the plug-in
@register_algorithm("appo")
class Appo(Algorithm):
    """APPO's hooks (module docstring). ``kwargs`` are its resolved ``algorithm_kwargs`` (``PARAMS``).

    For tests and tools: ``last_branching`` (the latest iteration's token statistics, Omega,
    branch points, branch tasks, branches and token advantages); the latest loss micro-batch's
    Eq. 7 inputs and outputs (numpy) are the trainer's ``last_loss.debug``.
    """

    plays_async = ("cannot play in a producer process: its branch points need the learner's forward of the "
                   "current policy and its reference (use rollout_mode: sync)")
    params = PARAMS
    own_losses = ("appo",)

    def __init__(self, config=None):
        super().__init__(config)
        self.last_branching: dict[str, Any] | None = None
        self._metrics: dict[str, float] = {}
        self._special: set[int] = set()
        self._blank: dict[int, bool] = {}
        self._tokenizer = None

    def check(self, cfg) -> None:
        kw = appo_kwargs(cfg)
        if cfg.credit == "appo" and "grouping" in (cfg.credit_kwargs or {}):
            raise RecipeError("grouping is set in credit_kwargs: under algorithm appo it is APPO's setting, set once "
                              "in algorithm_kwargs (the algorithm passes it to the appo estimator)")
        if cfg.context_mode != "trajectory":
            raise RecipeError(f"algorithm appo needs context_mode: trajectory (branch points are token positions "
                              f"in one sequence per rollout), got {cfg.context_mode!r}")
        if kw["omega_baseline"] == "ref" and kw["budget"] > 0 and cfg.beta == 0 and not cfg.use_peft:
            raise RecipeError("algorithm appo with omega_baseline 'ref' needs a reference model: set beta > 0 "
                              "(the authors use 0.001) or use_peft: true, or omega_baseline: behaviour")
        if kw["b"] and cfg.loss_type in self.own_losses:
            raise RecipeError("under algorithm appo, loss_type is the reduction Eq. 7 is applied with (dapo, bnpo, "
                              "grpo, dr_grpo, ...), not 'appo' itself")
        if kw["b"] and getattr(cfg, "use_liger_kernel", False):
            raise RecipeError("algorithm appo's future-aware term (b > 0) needs TRL's own loss: "
                              "set use_liger_kernel: false")
        if kw["b"]:
            self._check_loss_type(cfg.loss_type)

    @staticmethod
    def _check_loss_type(loss_type: str) -> None:
        """Eq. 7 reweights the clipped surrogate: the ``loss_type`` must be one (its reduction is kept)."""
        try:
            surrogate = policy_loss(loss_type).surrogate
        except KeyError:
            return  # validate_loss names the unknown loss_type
        if surrogate != "clip":
            raise RecipeError(f"credit appo's future-aware term (b > 0) reweights the clipped surrogate; loss_type "
                              f"{loss_type!r} has surrogate {surrogate!r}: use dapo, bnpo, grpo, dr_grpo or luspo")

    def bind(self, player, learner) -> None:
        self._tokenizer = player.tokenizer
        self._special = set(self._tokenizer.all_special_ids)

    # ------------------------------------------------------------------ branching
    def _eligible(self, ids: list[int], env_mask: list[int]) -> list[bool]:
        """Branch-point candidates: model tokens, not special (EOS), not whitespace only."""
        out = []
        for t, m in zip(ids, env_mask, strict=True):
            if t not in self._blank:
                self._blank[t] = t in self._special or not self._tokenizer.decode([t]).strip()
            out.append(bool(m) and not self._blank[t])
        return out

    def token_stats(self, player, episodes: list[Episode]) -> dict[str, np.ndarray]:
        """Entropy, log-ratio vs the Omega baseline, model-token and eligible masks, (N, T) over
        ``episodes`` (one no-grad forward each of the policy and, for 'ref', the reference)."""
        toks = [ep.tokens if isinstance(ep.tokens, TrajectoryTokens) else TrajectoryTokens() for ep in episodes]
        pad_id = player.tokenizer.pad_token_id
        comps = [t.completion_ids or [pad_id] for t in toks]
        masks = [t.env_mask if t.completion_ids else [0] for t in toks]
        prompts = [t.prompt_ids or [pad_id] for t in toks]
        logp, ent, base = player.score(prompts, comps, entropy=True, reference=self.kwargs["omega_baseline"] == "ref")
        width = logp.shape[1]
        model_mask = _padded([list(m) for m in masks], 0, width).astype(bool)
        eligible = _padded([self._eligible(cc, m) for cc, m in zip(comps, masks, strict=True)], 0, width).astype(bool)
        return {"entropy": ent, "log_ratio": logp - (logp if base is None else base),
                "model_mask": model_mask, "eligible": eligible}

    def roll_out(self, player, tasks: list[dict]) -> list[Episode]:
        """The initial rollouts, then their branches (``branches``)."""
        episodes = player.play(tasks)
        return episodes + self.branches(player, episodes)

    def branches(self, player, episodes: list[Episode]) -> list[Episode]:
        """The branches of this rank's initial rollouts (collective: every rank rolls out while
        any has branches)."""
        t0 = time.perf_counter()
        self._metrics, self.last_branching = rollout_diagnostics(episodes), None
        if not episodes or self.kwargs["budget"] == 0:  # no branching: token advantages = A_init
            return []
        stats = self.token_stats(player, episodes)
        rows, pos, omega = branch_points([ep.group_id if ep.steps else None for ep in episodes], stats, self.kwargs)
        t1 = time.perf_counter()
        tasks = [branch_task(episodes[r], int(t), j) for j, (r, t) in enumerate(zip(rows, pos, strict=True))]
        branches: list[Episode] = []
        if player.any_rank(bool(tasks)):
            branches = player.play(tasks, context_mode="branch")
        for ep, task in zip(branches, tasks, strict=True):
            for r in ep.steps:
                r.info["branch_parent"], r.info["branch_pos"] = task["branch"].parent, task["branch"].pos
        t2 = time.perf_counter()
        self._diagnose(episodes, stats, omega, rows, pos, branches)
        self._metrics.update({"time/branch_stats_s": t1 - t0, "time/branch_rollout_s": t2 - t1})
        self.last_branching = {"stats": stats, "omega": omega, "rows": rows, "pos": pos, "tasks": tasks,
                               "branches": branches}
        return branches

    def _diagnose(self, episodes, stats, omega, rows, pos, branches) -> None:
        parent_r = np.array([ep.return_ for ep in episodes])
        d = S.branch_diagnostics(stats["entropy"], omega, stats["eligible"], rows, pos, parent_r,
                                 np.array([b.return_ for b in branches]) if branches else None)
        d["branch_errors"] = float(sum(b.error is not None for b in branches))
        d["branches"] = float(len(branches))
        self._metrics.update({f"appo/{k}": float(v) for k, v in d.items()})

    # ------------------------------------------------------------------ credit
    def shape_rewards(self, episodes: list[Episode]) -> None:
        inherit_prefix_rewards(episodes)

    def advantages(self, episodes, records, state):
        """The ``appo`` estimator per record, then Eq. 6 per token of the initial rollouts (the
        branch records carry their inherited prefix: ``shape_rewards`` ran before the gather)."""
        extra = {"grouping": self.kwargs["grouping"]} if self.config.credit == "appo" else {}
        adv, diag = self._credit(records, **extra)
        tok = token_advantages(records, episodes, self.kwargs)
        if self.last_branching is not None:
            self.last_branching["token_advantages"] = tok
        return Advantages(adv, diag, tok), state

    # ------------------------------------------------------------------ loss
    def loss(self, config) -> tuple[str, dict[str, Any]]:
        """Eq. 7's surrogate with the reduction of the recipe's ``loss_type`` (``appo+token_mean``
        for dapo), or with b = 0 the ``loss_type`` loss itself."""
        if not self.kwargs.get("b"):
            return super().loss(config)
        return compose("appo", policy_loss(config.loss_type).reduction), {"appo": self.kwargs}

    # ------------------------------------------------------------------ metrics
    def metric_episodes(self, episodes: list[Episode]) -> list[Episode]:
        return [ep for ep in episodes if not is_branch(ep)]

    def metrics(self, step: int) -> dict[str, float]:
        return {k: v for k, v in self._metrics.items() if np.isfinite(v)}


@register_surrogate("appo")
def future_aware_surrogate(b: LossBatch, s: LossSettings, ratio: torch.Tensor) -> tuple[torch.Tensor, LossOutput]:
    """APPO's surrogate (Eq. 7): the advantages reweighted by the future-aware term from the
    detached log-probs, then the clipped surrogate on them (``settings.options["appo"]``: the
    resolved APPO kwargs). Composed with any reduction (``Appo.loss``)."""
    lp = b.logps.detach().cpu().numpy()
    old = lp if b.old_logps is None else b.old_logps.detach().cpu().numpy()
    adv = b.advantages.detach().cpu().numpy()
    mask = b.mask.detach().cpu().numpy().astype(bool)
    new, f = future_aware(adv, lp, old, mask, s.options["appo"])
    weighted = replace(b, advantages=torch.as_tensor(new, dtype=b.advantages.dtype, device=b.advantages.device))
    per_token, out = get_surrogate("clip").fn(weighted, s, ratio)
    weight = torch.as_tensor(f, dtype=torch.float32, device=b.mask.device)
    out.means.update({"appo/future_weight_mean": (weight[b.mask.bool()].sum(), b.mask.sum())})
    m = b.mask.bool()
    row_max = torch.where(m, weight, float("-inf")).amax(-1)
    out.extremes["appo/future_weight_max"] = ("max", torch.where(m.any(-1), row_max, float("nan")))
    out.debug = {"advantages": adv, "weight": f, "logps": lp, "old_logps": old, "mask": mask, "weighted": new}
    return per_token, out
