"""What the bench scores on: *conditions*, each an MDP configuration with a label. Either the
named families (``--families``) or knob settings from the command line: each ``--knobs
k=v,...`` is one condition (over a family where ``--families`` names one), and each ``--sweep
KEY=v1,v2,...`` (one or two) crosses every condition with its values, a full factorial.

Labels name what differs between the conditions (``recurrence=0.8 step_reward=0``); the knobs
every condition shares are listed once (:func:`common_knobs`). Bad names or values are one-line
ValueErrors (``MDPConfig.check`` words them)."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from agentrl_envs.mdp import FAMILIES, MDPConfig, family_config

MAX_SWEEPS = 2
"""Swept knobs at most: a factorial of two is still a table a reader can take in."""
Knobs = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Condition:
    """One scored MDP configuration: ``family`` (or None: the default ``MDPConfig``) with ``knobs`` over it."""

    label: str
    family: str | None = None
    knobs: Knobs = ()

    @property
    def config(self) -> MDPConfig:
        return family_config(self.family, **dict(self.knobs))


def _value(key: str, text: str) -> Any:
    """A knob value as YAML reads a scalar ("0.8" -> 0.8, "4" -> 4); MDPConfig checks its type."""
    import yaml

    try:
        v = yaml.safe_load(text)
    except yaml.YAMLError:
        v = text
    if isinstance(v, (list, dict)) or v is None:
        raise ValueError(f"knob {key}={text!r}: expected a number")
    return v


def _pair(item: str, flag: str) -> tuple[str, str]:
    key, eq, value = item.partition("=")
    if not eq or not key.strip() or not value.strip():
        raise ValueError(f"{flag} takes key=value, got {item!r}")
    return key.strip(), value.strip()


def parse_knobs(text: str) -> Knobs:
    """``"recurrence=0.8,penalty=0"`` -> ``(("recurrence", 0.8), ("penalty", 0))``; names are
    checked against ``MDPConfig`` (one-line ValueError)."""
    items = [_pair(x, "--knobs") for x in text.split(",") if x.strip()]
    if not items:
        raise ValueError("--knobs takes key=value[,key=value...], got nothing")
    keys = [k for k, _ in items]
    if len(set(keys)) < len(keys):
        raise ValueError(f"--knobs {text!r} sets a knob twice")
    knobs = tuple((k, _value(k, v)) for k, v in items)
    MDPConfig.from_kwargs(dict(knobs))  # names and values, one line
    return knobs


def parse_sweep(text: str) -> tuple[str, tuple[Any, ...]]:
    """``"recurrence=0,0.5,0.8"`` -> ``("recurrence", (0, 0.5, 0.8))``; checked as :func:`parse_knobs`."""
    key, values = _pair(text, "--sweep")
    vals = tuple(_value(key, v.strip()) for v in values.split(",") if v.strip())
    if len(set(map(str, vals))) < len(vals):
        raise ValueError(f"--sweep {text!r} repeats a value")
    for v in vals:
        MDPConfig.from_kwargs({key: v})
    return key, vals


def _fmt(knobs: Knobs) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs)


def build(families: tuple[str, ...] | None, knobs: tuple[Knobs, ...] = (),
          sweep: tuple[tuple[str, tuple[Any, ...]], ...] = ()) -> list[Condition]:
    """The scored conditions: each family (default: all, or only the default config when knobs
    or sweeps are given) x each ``--knobs`` x the sweep's factorial; one-line ValueError for a
    bad combination."""
    if len(sweep) > MAX_SWEEPS:
        raise ValueError(f"at most {MAX_SWEEPS} --sweep knobs (a full factorial), got {len(sweep)}")
    swept = [k for k, _ in sweep]
    if len(set(swept)) < len(swept):
        raise ValueError(f"--sweep names a knob twice: {swept}")
    fixed = {k for kn in knobs for k, _ in kn}
    if fixed & set(swept):
        raise ValueError(f"knob(s) {sorted(fixed & set(swept))} both set (--knobs) and swept (--sweep)")
    if not knobs and not sweep:
        out = [Condition(f, f) for f in (families or tuple(FAMILIES))]
    else:
        points = [tuple(zip(swept, vals, strict=True)) for vals in itertools.product(*(v for _, v in sweep))]
        raw = [(f, kn + pt) for f in (families or (None,)) for kn in (knobs or ((),)) for pt in points]
        out = [Condition(_label(f, kn, raw), f, kn) for f, kn in raw]
    for c in out:
        c.config.check()  # the combination too: horizon >= depth and the like
    labels = [c.label for c in out]
    if len(set(labels)) < len(labels):
        raise ValueError(f"two conditions are the same: {sorted({x for x in labels if labels.count(x) > 1})}")
    return out


def _label(family: str | None, kn: Knobs, raw: list[tuple[str | None, Knobs]]) -> str:
    """The family (if any) and the knob settings that are not the same in every condition (all
    of them when there is one condition)."""
    shared = set.intersection(*(set(k) for _, k in raw)) if len(raw) > 1 else set()
    parts = ([family] if family else []) + [f"{k}={v}" for k, v in kn if (k, v) not in shared]
    return " ".join(parts) or "default"


def common_knobs(conds: list[Condition]) -> str:
    """The knob settings every condition shares, as ``k=v k=v`` ('' when none or one condition)."""
    if len(conds) < 2:
        return ""
    shared = set.intersection(*(set(c.knobs) for c in conds))
    return _fmt(tuple(kv for kv in conds[0].knobs if kv in shared))


def describe(conds: list[Condition]) -> dict[str, dict[str, Any]]:
    """Label -> every knob of the condition's MDPConfig (for the JSON: what each column was)."""
    return {c.label: asdict(c.config) for c in conds}
