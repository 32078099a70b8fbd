"""What ``agentrl truth`` writes: ``truth.md`` (tables), ``truth.json`` (every number), and the
plots of ``plots.py``: one section of tables per policy, one column per condition."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _f(x: dict[str, Any] | float | None, nd: int = 2) -> str:
    if isinstance(x, dict):
        m, se = x["mean"], x["se"]
        if m is None or (isinstance(m, float) and math.isnan(m)):
            return "-"
        return f"{m:.{nd}f}" + (f" ± {se:.{nd}f}" if se is not None else "")
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{nd}f}"


def _equiv(x: float | None, top: int) -> str:
    if x is None:
        return f"> {top}x"
    if x == 0.0:
        return "< 1x"
    return f"{x:.1f}x"


def _table(title: str, families: list[str], labels: list[str], cell) -> list[str]:
    lines = [f"### {title}", "", "| estimator | " + " | ".join(families) + " |",
             "|---|" + "---|" * len(families)]
    lines += [f"| {lab} | " + " | ".join(cell(f, lab) for f in families) + " |" for lab in labels]
    return lines + [""]


POLICY_TITLES = {"tabular": "tabular softmax policy (logits per state)",
                 "loglinear": "log-linear policy (weights shared across states, over text features)"}


def markdown(res: dict[str, Any]) -> str:
    s = res["settings"]
    lines = ["# Credit against the truth", "", *_preamble(res), ""]
    for policy in res["scores"]:
        lines += [f"## Under the {POLICY_TITLES.get(policy, policy)}", ""]
        lines += _score_tables(res["scores"][policy], s)
        for f, r in res["race"].get(policy, {}).items():
            lines += _race_table(f, r, s["lr"][policy])
    if res["not_runnable"]:
        lines += ["Not run on step records: " + "; ".join(f"`{k}` ({v})" for k, v in res["not_runnable"].items()), ""]
    lines += ["Verdicts: paired (by MDP seed for the cosines, by seed for the race), Holm-adjusted over the "
              "estimators of a condition; cosines: two-sided t p-values (seeds - 1 df), race: normal; `better`/`worse` "
              "when the adjusted p < 0.05, otherwise `not resolved`. GRPO batch: `< 1x` means GRPO's own batch "
              "already does better, `> Nx` that N batches do not reach it."]
    return "\n".join(lines) + "\n"


def _preamble(res: dict[str, Any]) -> list[str]:
    s = res["settings"]
    out = [f"Scores: {s['seeds']} MDP instances per condition x {s['batches']} batches of B={s['B']} tasks x G "
           f"rollouts; mean ± s.e. over MDP instances; headline columns at G={s['G']}. Race: {s['race_seeds']} seeds "
           f"x {s['steps']} Adam updates, J exact after every update. The truth's discount is "
           f"{s['truth_gamma']:g}, and every estimator runs at it unless its label sets `gamma`. Timings: scores "
           f"{res['time_s']['scores']:.0f} s, race {res['time_s']['race']:.0f} s."]
    if s["knobs"] or s["sweep"]:
        if s["common_knobs"]:
            out += ["", f"Knobs every condition shares: `{s['common_knobs']}`; each condition's full MDPConfig is "
                    "in truth.json (`settings.conditions`)."]
    return out


def _score_tables(sc: dict[str, Any], s: dict[str, Any]) -> list[str]:
    fams, labels, G = list(sc), list(s["estimators"]), s["G"]
    top = max(int(m) for m in next(iter(sc.values()))["grpo_cos_by_multiple"]) if sc else 0
    lines = _table(f"GRPO batch needed to match the estimator's gradient cosine (G={G}; x GRPO's batch)",
                   fams, labels, lambda f, lab: _equiv(sc[f]["grpo_equivalent"][lab], top))
    if all("cos_diff" in sc[f] for f in fams):
        lines += _table(f"Gradient cosine minus GRPO's, paired by MDP (G={G}; Holm verdict)", fams,
                        [x for x in labels if x != "grpo"], lambda f, lab: _verdict_cell(sc[f]["cos_diff"][lab]))
    for key, title in (("cos", "Cosine of the batch gradient with the exact dJ/dtheta"),
                       ("bias", "Cosine of the mean gradient (over batches) with dJ/dtheta: 1 = unbiased direction"),
                       ("corr", "Correlation of per-step advantages with A^pi_t(s, a)"),
                       ("sign", "Sign agreement with A^pi_t(s, a) (records with A^pi != 0)")):
        lines += _table(f"{title} (G={G})", fams, labels, lambda f, lab, k=key: _f(_by_g(sc[f], G)[lab][k]))
    gd = {lab: {f: sc[f]["gamma_diff"][lab] for f in fams} for lab in labels if lab in sc[fams[0]]["gamma_diff"]}
    if gd:
        lines += _table(f"Discount mismatch: cosine at the label's gamma minus at the truth's, paired by MDP (G={G})",
                        fams, list(gd), lambda f, lab: _signed(gd[lab][f]) + f" (vs {gd[lab][f]['base']})")
    lines += ["### Gradient cosine by group size G", "", "| estimator | " + " | ".join(
        f"{f} G={g}" for f in fams for g in s["Gs"]) + " |", "|---|" + "---|" * (len(fams) * len(s["Gs"]))]
    for lab in labels:
        lines.append(f"| {lab} | " + " | ".join(_f(_by_g(sc[f], g)[lab]["cos"]) for f in fams for g in s["Gs"]) + " |")
    return lines + [""]


def _race_table(f: str, r: dict[str, Any], lr: float) -> list[str]:
    lines = [f"### Race on `{f}`: gap to J* closed (0 = initial policy, 1 = optimal)", "",
             f"J* = {_f(r['J_opt'])}, initial J = {_f(r['J_init'])}, {r['seeds']} seeds, Adam lr {lr:g}.", "",
             "| estimator | final | AUC | median updates to 90% (never) | AUC diff to grpo | verdict (Holm) "
             "| final diff to grpo | verdict (Holm) |", "|---|---|---|---|---|---|---|---|"]
    for lab, e in r["estimators"].items():
        med = "-" if e["median_steps"] is None else f"{e['median_steps']:.0f}"
        ad, fd = e.get("auc_diff"), e.get("final_diff")
        lines.append(f"| {lab} | {_f(e['final'])} | {_f(e['auc'])} | {med} ({e['never']}) | "
                     f"{_signed(ad)} | {e['auc_verdict']} | {_signed(fd)} | {e['final_verdict']} |")
    return lines + [""]


def _verdict_cell(d: dict[str, Any]) -> str:
    return f"{_signed(d)} {d['verdict']}"


def _by_g(fam: dict[str, Any], g: int) -> dict[str, Any]:
    return fam["by_G"][str(g)]  # JSON keys: the results are written, then read back


def _signed(d: dict[str, Any] | None) -> str:
    if not d or d["mean"] is None:
        return "-"
    return f"{d['mean']:+.3f}" + (f" ± {d['se']:.3f}" if d["se"] is not None else "")


def write(res: dict[str, Any], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(res, indent=1, default=lambda x: None)
    res = json.loads(text)  # one form (string keys) for the tables and the plots
    (out / "truth.json").write_text(text)
    md = markdown(res)
    (out / "truth.md").write_text(md)
    from agentrl.truth.plots import plot

    plot(res, out)
    return md
