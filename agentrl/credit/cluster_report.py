"""``agentrl credit clusters ROLLOUTS``: how BiGPO's cosine clustering (BiPACE Eq. 3, App. D)
partitions a run's saved fingerprints, at several radii, raw and centred in their group, against
the state identity (the records' ``state_key``, else the exact observation: GiGPO's key).

Per setting it prints the clusters, their median size and the pair precision / recall inside the
prompt groups: of the pairs a setting puts in one cluster, the share with the same state
(precision), and of the same-state pairs, the share it puts together (recall). One cluster per
group (precision = the chance rate, recall 1) is the degenerate partition whose step term compares
actions taken in different states; exact identity is precision 1. Fingerprints of the same prompt
are equal, so a state whose prompt also carries history (ALFWorld's brief prompt lists the
state-changing commands done) can split where the observation alone does not: recall < 1 there
measures the prompt, not the clustering.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from .batch import Batch
from .cluster import GramFn, dense_gram, greedy_cosine_partition, group_bounds, memo_gram

RADII = (0.4, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001)
"""Default radii (cosine distance): App. F's search range [0.02, 0.40] and the smaller ones a
small model's uncentred fingerprints need."""


def _group_bounds(batch: Batch) -> list[tuple[int, int]]:
    starts, ends = group_bounds(batch)
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def pair_scores(labels: np.ndarray, truth: np.ndarray, bounds: list[tuple[int, int]]) -> tuple[float, float]:
    """(precision, recall) of ``labels`` against ``truth`` over the unordered pairs inside each
    group [s, e); a score with no pair to judge is 1."""
    tp = pos = real = 0
    for s, e in bounds:
        iu = np.triu_indices(e - s, 1)
        same_l = (labels[s:e, None] == labels[None, s:e])[iu]
        same_t = (truth[s:e, None] == truth[None, s:e])[iu]
        tp += int(np.sum(same_l & same_t))
        pos += int(np.sum(same_l))
        real += int(np.sum(same_t))
    return (tp / pos if pos else 1.0), (tp / real if real else 1.0)


def distances(gram: GramFn, bounds: list[tuple[int, int]]) -> np.ndarray:
    """Cosine distances of every pair inside each group (the clustering's own Gram)."""
    out = [1.0 - gram(np.arange(s, e))[np.triu_indices(e - s, 1)] for s, e in bounds]
    return np.concatenate(out) if out else np.zeros(0)


def report(records: list[dict[str, Any]], radii=RADII) -> dict[str, Any]:
    """Per fingerprint form (raw, centred) the distance quantiles and, per radius, the partition's
    clusters, median size, precision and recall against the state identity."""
    batch = Batch.from_records(records)
    fps = batch.field("fingerprint", None)
    if any(f is None for f in fps):
        raise ValueError("records lack fingerprints: train with a credit module that needs them "
                         "(bigpo, bipace_*) and save_rollouts: true")
    F = np.asarray(fps, dtype=np.float32)
    truth, bounds = batch.state_id, _group_bounds(batch)
    classes = np.bincount(np.unique(truth, return_inverse=True)[1])
    out: dict[str, Any] = {"records": batch.n, "groups": len(bounds), "state_classes": len(classes),
                           "state_key": "state_key" if any(r.get("state_key") for r in records) else "observation"}
    for name, center in (("raw", False), ("centred", True)):
        gram = memo_gram(dense_gram(F, center=center))  # each group's Gram once for every radius
        d = distances(gram, bounds)
        rows = []
        for eps in radii:
            lab = greedy_cosine_partition(batch, gram, eps)
            p, r = pair_scores(lab, truth, bounds)
            rows.append({"eps": eps, "clusters": int(lab.max()) + 1 if len(lab) else 0,
                         "median_size": float(np.median(np.bincount(lab))) if len(lab) else 0.0,
                         "precision": p, "recall": r})
        out[name] = {"distance_quantiles": {q: float(np.quantile(d, q)) if len(d) else 0.0
                                            for q in (0.05, 0.25, 0.5, 0.75, 0.95)}, "radii": rows}
    return out


def _print(out: dict[str, Any], path: str) -> None:
    print(f"{path}: {out['records']} records in {out['groups']} groups; {out['state_classes']} states "
          f"(by {out['state_key']})")
    for name in ("raw", "centred"):
        q = out[name]["distance_quantiles"]
        print(f"\n{name}: cosine distance inside groups, quantiles 5/25/50/75/95%: "
              + " ".join(f"{v:.4f}" for v in q.values()))
        print(f"  {'eps':>6} {'clusters':>8} {'median':>7} {'precision':>9} {'recall':>7}")
        for r in out[name]["radii"]:
            print(f"  {r['eps']:>6g} {r['clusters']:>8d} {r['median_size']:>7.1f} {r['precision']:>9.3f} "
                  f"{r['recall']:>7.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="agentrl credit clusters", description=__doc__.split("\n\n")[0])
    ap.add_argument("rollouts", help="saved rollouts: a run folder, its rollouts/ or one iter_XXXXX.jsonl")
    ap.add_argument("--eps", default=None, help="comma-separated radii (default: " + ",".join(map(str, RADII)) + ")")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the tables")
    args = ap.parse_args(argv)
    from .compare import rollouts_command

    try:
        radii = RADII if args.eps is None else tuple(float(x) for x in args.eps.split(","))
    except ValueError:
        radii = ()
    if not radii or not all(0.0 <= e <= 2.0 for e in radii):
        print(f"agentrl credit clusters: error: --eps values must be cosine distances in [0, 2], got {args.eps}",
              file=sys.stderr)
        return 2
    return rollouts_command("agentrl credit clusters", args.rollouts, lambda recs: report(recs, radii), _print,
                            args.json)


if __name__ == "__main__":
    sys.exit(main())
