"""Small builders for hand-made step-record batches."""

from __future__ import annotations

import numpy as np


def traj(group, tid, obs, actions, rewards, **extra_per_step):
    """Records of one trajectory; extra_per_step maps a field to a per-step list."""
    out = []
    for t, (o, a, r) in enumerate(zip(obs, actions, rewards, strict=True)):
        rec = {
            "group_id": group,
            "traj_id": tid,
            "t": t,
            "obs": o,
            "action": a,
            "reward": float(r),
            "done": t == len(obs) - 1,
        }
        for k, v in extra_per_step.items():
            rec[k] = v[t] if isinstance(v, list) else v
        out.append(rec)
    return out


def find(records, tid, t):
    """Index of trajectory tid's step t in records."""
    return next(i for i, r in enumerate(records) if r["traj_id"] == tid and r["t"] == t)


def reference_algorithm1(X, eps):
    """BiPACE App. D Algorithm 1, written directly from the pseudocode (float64)."""
    cents, members, labels, margin = [], [], [], np.inf
    for x in X:
        if not cents:
            cents.append(x.copy())
            members.append(1)
            labels.append(0)
            continue
        sims = np.array([x @ c for c in cents])
        k = int(np.argmax(sims))
        margin = min(margin, abs((1 - sims[k]) - eps))
        if len(sims) > 1:
            top2 = np.sort(sims)[-2:]
            margin = min(margin, top2[1] - top2[0])
        if 1 - sims[k] <= eps:
            members[k] += 1
            c = cents[k] + (x - cents[k]) / members[k]
            cents[k] = c / np.linalg.norm(c)
            labels.append(k)
        else:
            cents.append(x.copy())
            members.append(1)
            labels.append(len(cents) - 1)
    return np.array(labels), margin
