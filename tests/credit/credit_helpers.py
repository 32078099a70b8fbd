"""Small builders for hand-made step-record batches."""

from __future__ import annotations


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
