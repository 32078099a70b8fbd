"""The truth suite: every estimator scored against exact advantages and gradients on each MDP
family, then raced with exact J over many seeds. Jobs are (family, seed) pairs run in a process
pool; each is seeded on its own, so the numbers do not depend on the number of workers."""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agentrl.arena_stats import auc, holm_verdicts, mean_se, median_steps, steps_to
from agentrl.truth.conditions import Condition, Knobs, build, common_knobs, describe
from agentrl.truth.loglinear import POLICY_KINDS
from agentrl.truth.race import RaceSettings, run
from agentrl.truth.score import (
    TRUTH_GAMMA,
    Contender,
    SeedScores,
    default_contenders,
    grpo_equivalent,
    not_runnable,
    parse_contender,
    score_seed,
)

RACE_DEFAULT = ("grpo", "rloo", "gigpo", "hgpo", "bigpo:embedder=hash_ngram", "bipace_q", "rtmc", "salt",
                "gigpo:norm=mean", "rtmc:signature=history")
"""The LLM arena's eight contenders (``make arena``), and the two variants the scores single out."""
RACE_FAMILIES = ("tree", "recurrent", "aliased", "long")
"""Raced by default when the named families are scored (with ``--knobs``/``--sweep``: every condition)."""
LR = {"tabular": 0.3, "loglinear": 0.1}
"""Adam's learning rate in the race per policy (``--lr`` sets one for both): on 8 seeds of
``recurrent``, 0.1 on the shared weights closes GRPO's gap as 0.3 on the tabular logits does
(0.92 in 30 updates), and 0.3 there overshoots (0.90)."""
BASELINE = "grpo"
GAP = 0.9
"""Steps to threshold: the first update whose J closes this share of the gap to J*."""


@dataclass
class SuiteSettings:
    """What ``agentrl truth`` runs (defaults: the full suite, <= 10 minutes on 2 cores)."""

    families: tuple[str, ...] | None = None
    """MDP families scored (``agentrl_envs.mdp.FAMILIES``); None: all of them, or only the
    default ``MDPConfig`` when ``knobs`` or ``sweep`` are given."""
    knobs: tuple[Knobs, ...] = ()
    """One condition per entry: knob settings over each family (``conditions.parse_knobs``)."""
    sweep: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    """One or two (knob, values): every condition crossed with their factorial."""
    policies: tuple[str, ...] = POLICY_KINDS
    """Policies scored and raced: a second set of tables per policy."""
    estimators: tuple[str, ...] = field(default_factory=lambda: tuple(default_contenders()))
    """Scored estimators, ``name[:key=value...]``."""
    seeds: int = 10
    """MDP instances per condition for the scores (the replicates of each mean +- s.e.)."""
    batches: int = 20
    """Batches per seed and group size (seeds x batches batches per condition and G)."""
    B: int = 4
    """Tasks per batch."""
    Gs: tuple[int, ...] = (4, 8, 16)
    """Group sizes scored."""
    G: int = 8
    """The group size of the headline columns and of the race."""
    race_families: tuple[str, ...] | None = None
    """Scored conditions raced (labels); None: :data:`RACE_FAMILIES` for the named families,
    every condition for knobs and sweeps."""
    race_estimators: tuple[str, ...] = RACE_DEFAULT
    """Raced estimators (must include the baseline, grpo)."""
    race_seeds: int = 100
    """Seeds per (estimator, condition, policy) in the race."""
    steps: int = 30
    """Updates per race run."""
    lr: float | None = None
    """Adam learning rate of the race; None: :data:`LR` per policy."""
    init_scale: float = 1.0
    """Std of the initial logits (tabular) or weights (log-linear: each row of features has unit norm)."""
    workers: int = 2
    """Processes."""

    def conditions(self) -> list[Condition]:
        return build(self.families, self.knobs, self.sweep)

    def raced(self) -> list[Condition]:
        conds = self.conditions()
        if self.race_families is None:
            default = RACE_FAMILIES if not (self.knobs or self.sweep) else [c.label for c in conds]
            return [c for c in conds if c.label in default]
        by_label = {c.label: c for c in conds}
        for lab in self.race_families:
            if lab not in by_label:
                raise ValueError(f"truth: raced condition {lab!r} is not scored; scored: {', '.join(by_label)}")
        return [by_label[lab] for lab in self.race_families]

    def lr_for(self, policy: str) -> float:
        return LR[policy] if self.lr is None else self.lr

    def check(self) -> SuiteSettings:
        self.raced()  # builds and checks every condition too
        for p in self.policies:
            if p not in POLICY_KINDS:
                raise ValueError(f"truth: unknown policy {p!r}; valid: {', '.join(POLICY_KINDS)}")
        if not self.policies:
            raise ValueError("truth: no policy to score (--policies)")
        for k in ("seeds", "batches", "B", "G", "race_seeds", "steps", "workers"):
            if getattr(self, k) < 1:
                raise ValueError(f"truth: {k}={getattr(self, k)} must be >= 1")
        if not self.Gs or min(self.Gs) < 2:
            raise ValueError(f"truth: group sizes {list(self.Gs)} must be >= 2 (a group of one has no baseline)")
        if self.G not in self.Gs:
            raise ValueError(f"truth: the headline group size G={self.G} must be one of the scored Gs {list(self.Gs)}")
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"truth: lr={self.lr} must be > 0")
        if self.raced() and BASELINE not in self.race_estimators:
            raise ValueError(f"truth: the race needs the baseline {BASELINE!r} among its estimators")
        for lab in (*self.estimators, *self.race_estimators):
            parse_contender(lab)
        return self


# ============================================================================ jobs
def _score_job(args: tuple) -> tuple[str, str, SeedScores]:
    policy, cond, seed, labels, s = args
    cs = [parse_contender(x) for x in labels]
    return policy, cond.label, score_seed(cond.config, seed, cs, s.batches, s.B, s.Gs, s.G, s.init_scale,
                                          policy=policy)


def _race_job(args: tuple) -> tuple[str, str, int, dict[str, Any]]:
    policy, cond, seed, labels, s = args
    rs = RaceSettings(steps=s.steps, B=s.B, G=s.G, lr=s.lr_for(policy), init_scale=s.init_scale, policy=policy)
    runs = {lab: run(cond.config, seed, parse_contender(lab), rs) for lab in labels}
    return policy, cond.label, seed, runs


def _map(fn, jobs: list, workers: int) -> list:
    if workers == 1 or len(jobs) <= 1:  # none: no race asked for
        return [fn(j) for j in jobs]
    with mp.get_context("fork").Pool(min(workers, len(jobs))) as pool:
        return list(pool.imap(fn, jobs, chunksize=1))


# ============================================================================ aggregation
def _ms(xs: list[float]) -> dict[str, float | None]:
    m, se = mean_se([x for x in xs if not np.isnan(x)])
    return {"mean": m, "se": se}


def aggregate_scores(per_seed: list[SeedScores], labels: list[str], Gs: tuple[int, ...], G: int) -> dict[str, Any]:
    """Per label and G: corr, sign, cos, bias as mean +- s.e. over seeds; GRPO's cosine by batch
    multiple (mean over seeds) and each label's GRPO-equivalent batch at ``G``."""
    out: dict[str, Any] = {"by_G": {}, "grpo_cos_by_multiple": {}}
    for g in Gs:
        out["by_G"][g] = {lab: {k: _ms([getattr(s, k)[(g, lab)] for s in per_seed])
                                for k in ("corr", "sign", "cos", "bias")} for lab in labels}
    ms = sorted(per_seed[0].grpo_cos_by_m)
    by_m = {m: float(np.mean([s.grpo_cos_by_m[m] for s in per_seed])) for m in ms}
    if BASELINE in labels:  # anchor m = 1 on the scored batches, so that GRPO itself reads 1.0x
        by_m[1] = out["by_G"][G][BASELINE]["cos"]["mean"]
    out["grpo_cos_by_multiple"] = by_m
    out["grpo_equivalent"] = {lab: grpo_equivalent(out["by_G"][G][lab]["cos"]["mean"], by_m) for lab in labels}
    if BASELINE in labels:
        out["cos_diff"] = paired_cos_diffs(per_seed, labels, G)
    out["gamma_diff"] = gamma_mismatch(per_seed, labels, G)
    return out


def _paired(per_seed: list[SeedScores], a: str, b: str, G: int) -> tuple[float | None, float | None]:
    """Mean +- s.e. over MDP seeds of cos(a) - cos(b), both on the same batches of each seed. A
    difference below 1e-12 is rounding (SALT's gradient is GRPO's, summed in another order) and
    counts as 0, so that it cannot be a resolved one."""
    return mean_se([d if abs(d) > 1e-12 else 0.0 for s in per_seed for d in [s.cos[(G, a)] - s.cos[(G, b)]]])


def paired_cos_diffs(per_seed: list[SeedScores], labels: list[str], G: int) -> dict[str, dict[str, Any]]:
    """Per label: the gradient cosine's paired difference to the baseline at ``G``, with its Holm
    verdict over the labels (``arena_stats.holm_verdicts``: two-sided t p-values with seeds - 1
    degrees of freedom, as few MDP seeds are replicates here; adjusted p < 0.05)."""
    diffs = {lab: _paired(per_seed, lab, BASELINE, G) for lab in labels if lab != BASELINE}
    dfs = dict.fromkeys(diffs, len(per_seed) - 1)
    return {lab: {"mean": diffs[lab][0], "se": diffs[lab][1], "verdict": v, "p_holm": p}
            for lab, (v, p) in holm_verdicts(diffs, dfs=dfs).items()}


def _without_gamma(label: str) -> tuple[str, tuple] | None:
    c = parse_contender(label)
    kw = dict(c.kwargs)
    return (c.name, tuple(sorted((k, v) for k, v in kw.items() if k != "gamma"))) if "gamma" in kw else None


def gamma_mismatch(per_seed: list[SeedScores], labels: list[str], G: int) -> dict[str, dict[str, Any]]:
    """For each label that sets its own ``gamma`` (so that it differs from the truth's) and whose
    label without it is scored too: the paired cosine difference to that label at ``G``."""
    plain = {(c.name, c.kwargs): lab for lab in labels for c in [parse_contender(lab)]}
    out = {}
    for lab in labels:
        key = _without_gamma(lab)
        if key and key in plain:
            m, se = _paired(per_seed, lab, plain[key], G)
            out[lab] = {"base": plain[key], "gamma": dict(parse_contender(lab).kwargs)["gamma"], "mean": m, "se": se}
    return out


def aggregate_race(runs: list[tuple[int, dict[str, Any]]], labels: list[str], steps: int) -> dict[str, Any]:
    """Per label: gap closed (normalised J: 0 at the initial policy, 1 at J*) final and AUC,
    steps to ``GAP``, raw final J; paired AUC and final differences to the baseline with Holm's
    correction over the labels."""
    rows: dict[str, Any] = {}
    norm: dict[str, dict[int, list[float]]] = {lab: {} for lab in labels}
    for seed, by_lab in runs:
        for lab in labels:
            r = by_lab[lab]
            J0, Jo = r["J"][0], r["J_opt"]
            gap = Jo - J0
            norm[lab][seed] = [(j - J0) / gap if gap > 1e-12 else 1.0 for j in r["J"]]
    seeds = sorted(norm[labels[0]])
    for lab in labels:
        curves = [norm[lab][s] for s in seeds]
        pts = [list(enumerate(c)) for c in curves]
        reach = [steps_to(p, GAP) for p in pts]
        rows[lab] = {
            "final": _ms([c[-1] for c in curves]), "auc": _ms([auc(p, steps) for p in pts]),
            "final_J": _ms([runs_by(runs, s)[lab]["J"][-1] for s in seeds]),
            "steps_to_gap": reach, "median_steps": median_steps(reach),
            "never": sum(r is None for r in reach),
            "curve_mean": np.mean(curves, axis=0).tolist(),
            "curve_se": (np.std(curves, axis=0, ddof=1) / np.sqrt(len(curves))).tolist() if len(curves) > 1
            else [0.0] * len(curves[0]),
        }
    for metric in ("auc", "final"):
        diffs = {}
        for lab in labels:
            if lab == BASELINE:
                continue
            d = [(auc(list(enumerate(norm[lab][s])), steps) - auc(list(enumerate(norm[BASELINE][s])), steps))
                 if metric == "auc" else norm[lab][s][-1] - norm[BASELINE][s][-1] for s in seeds]
            m, se = mean_se(d)
            diffs[lab] = (m, se)
            rows[lab][f"{metric}_diff"] = {"mean": m, "se": se}
        for lab, (v, p) in holm_verdicts(diffs).items():
            rows[lab][f"{metric}_verdict"], rows[lab][f"{metric}_p_holm"] = v, p
    rows[BASELINE]["auc_verdict"] = rows[BASELINE]["final_verdict"] = "baseline"
    return {"estimators": rows, "seeds": len(seeds),
            "J_opt": _ms([runs_by(runs, s)[BASELINE]["J_opt"] for s in seeds]),
            "J_init": _ms([runs_by(runs, s)[BASELINE]["J"][0] for s in seeds])}


def runs_by(runs: list[tuple[int, dict[str, Any]]], seed: int) -> dict[str, Any]:
    return next(r for s, r in runs if s == seed)


# ============================================================================ the suite
def run_suite(s: SuiteSettings, log=print) -> dict[str, Any]:
    """Every number of the suite as one JSON-able dict: scores and race per policy and condition."""
    s.check()
    labels, conds, raced = list(s.estimators), s.conditions(), s.raced()
    t0 = time.time()
    jobs = [(p, c, seed, labels, s) for p in s.policies for c in conds for seed in range(s.seeds)]
    log(f"truth: scoring {len(labels)} estimators under {len(s.policies)} policies on {len(conds)} conditions x "
        f"{s.seeds} MDPs x {s.batches} batches x G in {list(s.Gs)} ({s.workers} workers)")
    scored = _map(_score_job, jobs, s.workers)
    scores = {p: {c.label: aggregate_scores([sc for pp, lab, sc in scored if pp == p and lab == c.label], labels,
                                            s.Gs, s.G) for c in conds} for p in s.policies}
    t_score = time.time() - t0
    log(f"truth: scores done in {t_score:.0f} s; racing {len(s.race_estimators)} estimators under "
        f"{len(s.policies)} policies on {len(raced)} conditions x {s.race_seeds} seeds x {s.steps} updates")
    rjobs = [(p, c, seed, list(s.race_estimators), s) for p in s.policies for c in raced for seed in range(s.race_seeds)]
    out = _map(_race_job, rjobs, s.workers)
    race = {p: {c.label: aggregate_race([(seed, r) for pp, lab, seed, r in out if pp == p and lab == c.label],
                                        list(s.race_estimators), s.steps) for c in raced} for p in s.policies}
    settings = {**asdict(s), "lr": {p: s.lr_for(p) for p in s.policies}, "truth_gamma": TRUTH_GAMMA,
                "conditions": describe(conds), "common_knobs": common_knobs(conds)}
    return {"settings": settings, "not_runnable": not_runnable(), "scores": scores, "race": race,
            "time_s": {"scores": t_score, "race": time.time() - t0 - t_score}}


__all__ = ["Contender", "SuiteSettings", "run_suite"]
