"""One registrar and one kind of typed setting for every registry of agentrl.

``Registry`` (``agentrl_envs.registry``, shared with the env package's benchmarks): named
components registered at their definition, a taken name refused in one line, an unknown one
answered with a did-you-mean; credit estimators, policy losses, algorithms and contexts each keep
one. ``Param``: one typed kwarg of a component (credit estimators, algorithms), and
``resolve_params``: a component's kwargs from a recipe, checked against its params, defaults
filled in: the one place a component's settings are resolved."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from agentrl_envs.registry import Registry, did_you_mean, unknown_name

__all__ = ["Param", "Registry", "did_you_mean", "resolve_params", "unknown_name"]


@dataclass(frozen=True)
class Param:
    """One kwarg of a plug-in (a credit estimator, an algorithm): default, kind (for validation) and docstring."""

    default: Any
    doc: str
    kind: str  # float | int | bool | choice | eps | callable | str | mapping | any
    choices: tuple[Any, ...] = ()
    lo: float | None = None
    hi: float | None = None

    def check(self, owner: str, key: str, v: Any) -> Any:
        """``v`` as its kind (float, int, ...), or a ValueError naming ``owner`` and ``key``."""
        def bad(msg: str) -> ValueError:
            return ValueError(f"{owner}: kwarg {key}={v!r} {msg}")

        is_num = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
        if self.kind == "choice":
            if v not in self.choices:
                raise bad(f"must be one of {', '.join(map(repr, self.choices))}")
            return v
        if self.kind == "bool":
            if not isinstance(v, (bool, np.bool_)):
                raise bad("must be true or false")
            return bool(v)
        if self.kind == "str":
            if not isinstance(v, str) or not v:
                raise bad("must be a non-empty string")
            return v
        if self.kind == "mapping":
            if v is not None and not isinstance(v, dict):
                raise bad("must be a mapping")
            return v
        if self.kind == "any":
            return v
        if self.kind == "callable":
            if v is not None and not callable(v):
                raise bad("must be a callable (list[str] -> array of shape (n, d)) or None")
            return v
        if self.kind == "eps" and v == "auto":
            return v
        if self.kind == "int":
            if not (isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))):
                raise bad("must be an integer")
            v = int(v)
        else:
            if not is_num:
                raise bad("must be a number" + (" or 'auto'" if self.kind == "eps" else ""))
            v = float(v)
            if not math.isfinite(v):
                raise bad("must be finite")
        if self.lo is not None and v < self.lo or self.hi is not None and v > self.hi:
            if self.hi is None:
                raise bad(f"must be >= {self.lo}")
            raise bad(f"must be <= {self.hi}" if self.lo is None else f"must be in [{self.lo}, {self.hi}]")
        return v


def resolve_params(params: dict[str, Param], given: dict[str, Any] | None, owner: str) -> dict[str, Any]:
    """``given`` checked against ``params`` (an unknown name, with a did-you-mean, or a bad value is
    a one-line ValueError naming ``owner``), defaults filled in."""
    given = dict(given or {})
    unknown = [k for k in given if k not in params]
    if unknown:
        raise ValueError(f"{owner} has no kwarg {unknown[0]!r}{did_you_mean(unknown[0], list(params))} (its kwargs: "
                         f"{', '.join(params) or 'none'})")
    return {k: p.check(owner, k, given[k]) if k in given else p.default for k, p in params.items()}
