"""The truth suite: every estimator scored against exact advantages and gradients on each MDP
family, then raced with exact J over many seeds. Jobs are (family, seed) pairs run in a process
pool; each is seeded on its own, so the numbers do not depend on the number of workers."""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from agentrl_envs.mdp import FAMILIES, family_config

from agentrl.arena_stats import auc, holm_verdicts, mean_se, median_steps, steps_to
from agentrl.truth.race import RaceSettings, run
from agentrl.truth.score import (
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
BASELINE = "grpo"
GAP = 0.9
"""Steps to threshold: the first update whose J closes this share of the gap to J*."""


@dataclass
class SuiteSettings:
    """What ``agentrl truth`` runs (defaults: the full suite, <= 10 minutes on 2 cores)."""

    families: tuple[str, ...] = tuple(FAMILIES)
    """MDP families scored (``agentrl_envs.mdp.FAMILIES``)."""
    estimators: tuple[str, ...] = field(default_factory=lambda: tuple(default_contenders()))
    """Scored estimators, ``name[:key=value...]``."""
    seeds: int = 10
    """MDP instances per family for the scores (the replicates of each mean +- s.e.)."""
    batches: int = 20
    """Batches per seed and group size (seeds x batches batches per family and G)."""
    B: int = 4
    """Tasks per batch."""
    Gs: tuple[int, ...] = (4, 8, 16)
    """Group sizes scored."""
    G: int = 8
    """The group size of the headline columns and of the race."""
    race_families: tuple[str, ...] = ("tree", "recurrent", "aliased", "long")
    """MDP families raced."""
    race_estimators: tuple[str, ...] = RACE_DEFAULT
    """Raced estimators (must include the baseline, grpo)."""
    race_seeds: int = 100
    """Seeds per (estimator, family) in the race."""
    steps: int = 30
    """Updates per race run."""
    lr: float = 0.3
    """Adam learning rate of the race."""
    init_scale: float = 1.0
    """Std of the initial logits."""
    workers: int = 2
    """Processes."""

    def check(self) -> SuiteSettings:
        for f in (*self.families, *self.race_families):
            family_config(f)
        for k in ("seeds", "batches", "B", "G", "race_seeds", "steps", "workers"):
            if getattr(self, k) < 1:
                raise ValueError(f"truth: {k}={getattr(self, k)} must be >= 1")
        if not self.Gs or min(self.Gs) < 2:
            raise ValueError(f"truth: group sizes {list(self.Gs)} must be >= 2 (a group of one has no baseline)")
        if self.G not in self.Gs:
            raise ValueError(f"truth: the headline group size G={self.G} must be one of the scored Gs {list(self.Gs)}")
        if not self.lr > 0:
            raise ValueError(f"truth: lr={self.lr} must be > 0")
        if self.race_families and BASELINE not in self.race_estimators:
            raise ValueError(f"truth: the race needs the baseline {BASELINE!r} among its estimators")
        for lab in (*self.estimators, *self.race_estimators):
            parse_contender(lab)
        return self


# ============================================================================ jobs
def _score_job(args: tuple) -> tuple[str, SeedScores]:
    fam, seed, labels, s = args
    cs = [parse_contender(x) for x in labels]
    return fam, score_seed(family_config(fam), seed, cs, s.batches, s.B, s.Gs, s.G, s.init_scale)


def _race_job(args: tuple) -> tuple[str, int, dict[str, Any]]:
    fam, seed, labels, s = args
    rs = RaceSettings(steps=s.steps, B=s.B, G=s.G, lr=s.lr, init_scale=s.init_scale)
    runs = {lab: run(family_config(fam), seed, parse_contender(lab), rs) for lab in labels}
    return fam, seed, runs


def _map(fn, jobs: list, workers: int) -> list:
    if workers == 1 or len(jobs) == 1:
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
    """Every number of the suite as one JSON-able dict."""
    s.check()
    labels = list(s.estimators)
    t0 = time.time()
    jobs = [(f, seed, labels, s) for f in s.families for seed in range(s.seeds)]
    log(f"truth: scoring {len(labels)} estimators on {len(s.families)} families x {s.seeds} MDPs x "
        f"{s.batches} batches x G in {list(s.Gs)} ({s.workers} workers)")
    scored = _map(_score_job, jobs, s.workers)
    scores = {f: aggregate_scores([sc for fam, sc in scored if fam == f], labels, s.Gs, s.G) for f in s.families}
    t_score = time.time() - t0
    log(f"truth: scores done in {t_score:.0f} s; racing {len(s.race_estimators)} estimators on "
        f"{len(s.race_families)} families x {s.race_seeds} seeds x {s.steps} updates")
    rjobs = [(f, seed, list(s.race_estimators), s) for f in s.race_families for seed in range(s.race_seeds)]
    raced = _map(_race_job, rjobs, s.workers)
    race = {f: aggregate_race([(seed, r) for fam, seed, r in raced if fam == f], list(s.race_estimators), s.steps)
            for f in s.race_families}
    settings = asdict(s)
    return {"settings": settings, "not_runnable": not_runnable(), "scores": scores, "race": race,
            "time_s": {"scores": t_score, "race": time.time() - t0 - t_score}}


__all__ = ["Contender", "SuiteSettings", "run_suite"]
