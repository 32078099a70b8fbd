"""APPO in the trainer (arXiv:2606.12384): branch at decision points, credit tokens from both groups.

``credit: appo`` makes ``agentrl.train`` build an ``AppoTrainer``: ``AgentGRPOTrainer`` with

1. ``AppoHooks.after_rollout``: after the initial rollouts (trajectory mode), one no-grad forward
   gives every completion token its entropy H_t (Eq. 3, full vocabulary at the sampling
   temperature, TRL's own ``_get_per_token_logps_and_entropies``) and its log-prob under the
   policy and under the Omega baseline; Omega (Eq. 4) is taken over model tokens only (tool
   results and other env tokens are left out). Branch points are chosen per prompt group with
   ``agentrl.credit.appo.choose_branch_points`` (Eq. 5; top-B per rollout or a per-prompt pool)
   among the *eligible* tokens: model tokens that are not special tokens (EOS) and not
   whitespace only; Eq. 5's z-scores are still taken over all model tokens. One continuation per point is played by the ``branch`` context
   (``agentrl.rollout.branching``) through ``trainer.rollout``, the collective-safe path.
2. ``_shape_rewards``: after ``valid_action_reward``, each branch inherits its parent's rewards
   of the steps before the branch step (a branch's records start there; without them a late
   branch would lose the bonuses of the prefix it shares). ``_episode_rows``: each initial
   rollout's row gets per-token advantages from ``dual_group_advantages`` (Eq. 6) over the
   gathered records of all ranks (initial rollouts and branches in their own groups); branches
   have no rows.
3. ``FutureAwareLoss`` (``appo_loss.py``): Eq. 7's weight on those advantages inside TRL's loss.

What Omega compares at rollout time (``omega_baseline``)
--------------------------------------------------------
Eq. 4's ratio pi_theta / pi_old is 1 for rollouts just sampled from pi_theta; the authors' code
takes it between its training and generation engines (a numerical mismatch, identically 1 with HF
generation, where both are the same model). Default ``"ref"``: log rho = log pi_theta - log pi_ref,
the reference model's log-probs that the KL term needs anyway (beta > 0, or the PEFT base): Omega
is large where the continuation after t is one that training has made more likely. At the first
iteration pi_theta = pi_ref, Omega is flat and selection falls back to entropy (the credit
module's ``flat_omega="entropy"``). ``"behaviour"`` reproduces the code's definition under HF
generation: log rho = 0, selection by entropy.

Diagnostics (``appo/*`` metrics, this rank's rollouts): branch points per rollout, mean entropy
and Omega at the chosen points vs all eligible tokens, the share of branches whose outcome differs
from their parent's, branch errors, tool calls per rollout (accepted turns that did not end the
episode: in ToolReason each is a tool call) and the format-error rate (rollouts with a turn the
env rejected). ``env/*`` metrics are over the initial rollouts only.

Multi-process: a prompt's group may straddle ranks; the per-prompt pool (``scope="prompt"``) is
then per (prompt, rank). Advantages use the gathered records, so Eq. 6's groups are global.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from trl.trainer.utils import pad

from agentrl.credit import appo as F
from agentrl.credit.registry import resolve
from agentrl.recipe_file import RecipeError
from agentrl.rollout.branching import BranchContext, branch_task
from agentrl.rollout.contexts import Row, TrajectoryTokens
from agentrl.rollout.episodes import Episode
from agentrl.trainer.agent_trainer import AgentGRPOTrainer, Credited, RolloutHooks
from agentrl.trainer.appo_loss import FutureAwareLoss


def check_config(cfg) -> None:
    """RecipeError (one line) for settings APPO cannot run with; called by ``validate_config``."""
    kw = resolve("appo", {"gamma": cfg.gamma, **(cfg.credit_kwargs or {})})[1]
    if cfg.context_mode != "trajectory":
        raise RecipeError(f"credit appo needs context_mode: trajectory (branch points are token positions "
                          f"in one sequence per rollout), got {cfg.context_mode!r}")
    if kw["omega_baseline"] == "ref" and kw["budget"] > 0 and cfg.beta == 0 and not cfg.use_peft:
        raise RecipeError("credit appo with omega_baseline 'ref' needs a reference model: set beta > 0 "
                          "(the authors use 0.001) or use_peft: true, or omega_baseline: behaviour")
    if kw["b"] and getattr(cfg, "use_liger_kernel", False):
        raise RecipeError("credit appo's future-aware term (b > 0) needs TRL's own loss: set use_liger_kernel: false")


def branch_points(group_ids: list[str | None], stats: dict[str, np.ndarray],
                  kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, positions) of the branch points and Omega (N, T) of N rollouts, chosen per prompt
    group (``group_ids[n]``; None = a rollout with no steps, never branched).

    ``stats`` is ``AppoTrainer.token_stats``'s output. Omega and the z-scores of Eq. 5 are taken
    over the model tokens (``model_mask``); the points are chosen among the ``eligible`` ones
    (model tokens that are not whitespace only or special), as the authors' code does.
    """
    gamma = 1.0 if kw["omega_decay"] == 0 else F.gamma_from_decay(kw["omega_decay"])
    omega = F.future_value(stats["log_ratio"], stats["model_mask"], gamma)
    rows, pos = [], []
    groups: dict[str, list[int]] = {}
    for i, g in enumerate(group_ids):
        if g is not None:
            groups.setdefault(g, []).append(i)
    for idx in groups.values():
        r, t = F.choose_branch_points(stats["entropy"][idx], omega[idx], stats["model_mask"][idx], kw["budget"],
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
            r.info[F.PREFIX_KEY] = prefix


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
    adv = F.dual_group_advantages(
        [ret[k] for k in init], [str(first[k].group_id) for k in init],
        [ret[r.traj_id] + float(r.info.get(F.PREFIX_KEY, 0.0)) for r in br],
        [str(r.group_id).removesuffix(F.BRANCH_SUFFIX) for r in br],
        [index[r.info["branch_parent"]] for r in br], pos, length, kw["combine"], kw["grouping"])
    return {ep.traj_id: adv[index[ep.traj_id], :len(ep.tokens.completion_ids)] for ep in local}


def is_branch(ep: Episode) -> bool:
    return isinstance(ep.context, BranchContext)


def _padded(rows: list[list[float]], fill: float, width: int) -> np.ndarray:
    out = np.full((len(rows), width), fill, dtype=np.float64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


class AppoHooks(RolloutHooks):
    """After the initial rollouts: token statistics, branch points, branches (module docstring).
    Wraps the hooks the trainer was given (theirs run first)."""

    def __init__(self, inner: RolloutHooks | None = None):
        self.inner = inner or RolloutHooks()

    def before_rollout(self, trainer, tasks):
        return self.inner.before_rollout(trainer, tasks)

    def after_rollout(self, trainer, episodes):
        episodes = self.inner.after_rollout(trainer, episodes)
        return episodes + trainer.branch(episodes)


class AppoTrainer(FutureAwareLoss, AgentGRPOTrainer):
    """``AgentGRPOTrainer`` with APPO's rollout branching, token advantages and loss (module docstring)."""

    def __init__(self, model, args, *a, hooks: RolloutHooks | None = None, **kw):
        check_config(args)
        self.appo_kwargs = resolve("appo", {"gamma": args.gamma, **(args.credit_kwargs or {})})[1]
        super().__init__(model, args, *a, hooks=AppoHooks(hooks), **kw)
        self._credited: Credited | None = None
        self._appo_metrics: dict[str, float] = {}
        self._special = set(self.processing_class.all_special_ids)
        self._blank: dict[int, bool] = {}
        self.last_appo: dict[str, Any] | None = None
        """The latest iteration's statistics, branch points and token advantages (tests, tools)."""

    # ------------------------------------------------------------------ token statistics
    def _eligible(self, ids: list[int], env_mask: list[int]) -> list[bool]:
        """Branch-point candidates: model tokens, not special (EOS), not whitespace only."""
        out = []
        for t, m in zip(ids, env_mask, strict=True):
            if t not in self._blank:
                self._blank[t] = t in self._special or not self.processing_class.decode([t]).strip()
            out.append(bool(m) and not self._blank[t])
        return out

    def token_stats(self, episodes: list[Episode]) -> dict[str, np.ndarray]:
        """Entropy, log-ratio vs the Omega baseline, model-token and eligible masks, (N, T) over
        ``episodes`` (one no-grad forward each of the policy and, for 'ref', the reference)."""
        toks = [ep.tokens if isinstance(ep.tokens, TrajectoryTokens) else TrajectoryTokens() for ep in episodes]
        comps = [t.completion_ids or [self._tokenizer.pad_token_id] for t in toks]
        masks = [t.env_mask if t.completion_ids else [0] for t in toks]
        prompts = [t.prompt_ids or [self._tokenizer.pad_token_id] for t in toks]
        dev = self.accelerator.device
        p = [torch.tensor(x, dtype=torch.long) for x in prompts]
        c = [torch.tensor(x, dtype=torch.long) for x in comps]
        pid = self._tokenizer.pad_token_id
        ids = torch.cat([pad(p, padding_value=pid, padding_side="left"),
                         pad(c, padding_value=pid, padding_side="right")], dim=1).to(dev)
        att = torch.cat([pad([torch.ones_like(x) for x in p], padding_value=0, padding_side="left"),
                         pad([torch.ones_like(x) for x in c], padding_value=0, padding_side="right")], dim=1).to(dev)
        keep = max(len(x) for x in comps)
        bs = self.args.per_device_train_batch_size
        with torch.no_grad():
            logp, ent, _ = self._get_per_token_logps_and_entropies(self.model, ids, att, keep, batch_size=bs,
                                                                   compute_entropy=True)
            base = self._ref_per_token_logps(ids, att, keep, bs) if self.appo_kwargs["omega_baseline"] == "ref" else logp
        width = keep
        model_mask = _padded([list(m) for m in masks], 0, width).astype(bool)
        eligible = _padded([self._eligible(cc, m) for cc, m in zip(comps, masks, strict=True)], 0, width).astype(bool)
        return {"entropy": ent.float().cpu().numpy(), "log_ratio": (logp - base).float().cpu().numpy(),
                "model_mask": model_mask, "eligible": eligible}

    # ------------------------------------------------------------------ branching
    def branch_points(self, episodes: list[Episode], stats: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """(rows, positions) of the branch points of ``episodes`` (chosen per prompt group) and
        Omega (N, T): ``branch_points`` on their group ids."""
        return branch_points([ep.group_id if ep.steps else None for ep in episodes], stats, self.appo_kwargs)

    def branch(self, episodes: list[Episode]) -> list[Episode]:
        """The branches of this rank's initial rollouts (``AppoHooks.after_rollout``)."""
        t0 = time.perf_counter()
        self._appo_metrics, self.last_appo = self._rollout_diagnostics(episodes), None
        if not episodes or self.appo_kwargs["budget"] == 0:  # no branching: token advantages = A_init
            return []
        stats = self.token_stats(episodes)
        rows, pos, omega = self.branch_points(episodes, stats)
        t1 = time.perf_counter()
        tasks = [branch_task(episodes[r], int(t), j) for j, (r, t) in enumerate(zip(rows, pos, strict=True))]
        branches: list[Episode] = []
        if self._sync(bool(tasks)):  # a collective: every rank rolls out while any has branches
            branches = self.rollout(tasks, context_mode="branch")
        for ep, task in zip(branches, tasks, strict=True):
            for r in ep.steps:
                r.info["branch_parent"], r.info["branch_pos"] = task["branch"].parent, task["branch"].pos
        t2 = time.perf_counter()
        self._diagnose(episodes, stats, omega, rows, pos, branches)
        self._appo_metrics.update({"time/branch_stats_s": t1 - t0, "time/branch_rollout_s": t2 - t1})
        self.last_appo = {"stats": stats, "omega": omega, "rows": rows, "pos": pos, "tasks": tasks,
                          "branches": branches}
        return branches

    @staticmethod
    def _rollout_diagnostics(episodes: list[Episode]) -> dict[str, float]:
        """Tool calls per rollout (accepted turns that did not end the episode) and the share of
        rollouts with a turn the env rejected (ToolReason: a bad format)."""
        n = max(len(episodes), 1)
        return {"appo/tool_calls_per_rollout": sum(sum(r.valid and not r.done for r in ep.steps)
                                                   for ep in episodes) / n,
                "appo/format_error_rate": sum(any(not r.valid for r in ep.steps) for ep in episodes) / n}

    def _diagnose(self, episodes, stats, omega, rows, pos, branches) -> None:
        parent_r = np.array([ep.return_ for ep in episodes])
        d = F.branch_diagnostics(stats["entropy"], omega, stats["eligible"], rows, pos, parent_r,
                                 np.array([b.return_ for b in branches]) if branches else None)
        d["branch_errors"] = float(sum(b.error is not None for b in branches))
        d["branches"] = float(len(branches))
        self._appo_metrics.update({f"appo/{k}": float(v) for k, v in d.items()})

    # ------------------------------------------------------------------ credit and rows
    def _shape_rewards(self, episodes: list[Episode]) -> None:
        """``valid_action_reward`` as the base trainer, then each branch's inherited prefix."""
        super()._shape_rewards(episodes)
        inherit_prefix_rewards(episodes)

    def _gather_and_credit(self, episodes: list[Episode]) -> Credited:
        self._credited = super()._gather_and_credit(episodes)
        return self._credited

    def token_advantages(self, episodes: list[Episode]) -> dict[str, np.ndarray]:
        """traj_id -> per-token advantages of this rank's initial rollouts (``token_advantages``
        on the gathered records of all ranks)."""
        return token_advantages(self._credited.records, episodes, self.appo_kwargs)

    def _episode_rows(self, episodes: list[Episode], adv_local: np.ndarray) -> list[Row]:
        """Rows of the initial rollouts with their token advantages (branches give none)."""
        tok = self.token_advantages(episodes)
        rows: list[Row] = []
        i = 0
        for ep in episodes:
            n = len(ep.steps)
            if n:
                out = ep.context.rows(ep, adv_local[i: i + n])
                if ep.traj_id in tok:
                    out = [replace(r, adv=[float(x) for x in tok[ep.traj_id]]) for r in out]
                rows += out
            i += n
        if self.last_appo is not None:
            self.last_appo["token_advantages"] = tok
        return rows

    # ------------------------------------------------------------------ metrics
    def _episode_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        return super()._episode_metrics([ep for ep in episodes if not is_branch(ep)])

    def _log_metrics(self, mode, episodes, credited, counts, rollout_s) -> None:
        super()._log_metrics(mode, episodes, credited, counts, rollout_s)
        for k, v in self._appo_metrics.items():
            if np.isfinite(v):
                self._metrics[mode][k].append(v)


__all__ = ["AppoHooks", "AppoTrainer", "branch_points", "check_config", "inherit_prefix_rewards", "is_branch",
           "token_advantages"]
