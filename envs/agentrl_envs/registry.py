"""Named components registered at their definition: one registrar for every registry of agentrl
(env benchmarks here; credit estimators, policy losses, algorithms and contexts in ``agentrl``,
which imports it from here: this package imports nothing from agentrl).

A ``Registry`` maps names to entries. ``register(name, **attrs)`` is a decorator for a class or a
function: a taken name is refused in one line naming who holds it (two modules claiming one name
is a bug, not an override), and ``lookup(name)`` refuses an unknown one in one line with a
did-you-mean and the registered names. An entry is the decorated object itself, with ``name`` and
its declared attributes set on it (``Registry("policy loss", attrs={"split_invariant": True})``:
``@register("bnpo", split_invariant=False)``), or whatever ``entry(name, obj, attrs)`` builds from
it (the credit registry keeps a ``Spec``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

V = TypeVar("V")
T = TypeVar("T")


def did_you_mean(name: object, names: list[str] | tuple[str, ...]) -> str:
    """``" (did you mean 'gigpo'?)"`` for the registered name closest to ``name``, or ``""``."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    if not close and len(name) >= 3:  # a shortened name ("temp" for "temperature") scores low as a typo
        close = [n for n in names if n.startswith(name)][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name(kind: str, name: object, names: list[str] | tuple[str, ...]) -> str:
    """The one line for an unregistered name: ``unknown credit estimator 'gipgo' (did you mean
    'gigpo'?); registered: grpo, rloo, ...``."""
    return f"unknown {kind} {name!r}{did_you_mean(name, names)}; registered: {', '.join(names) or 'none'}"


def origin(obj: Any) -> str:
    """Where an object was defined (``module.qualname``), for "already registered (by ...)"."""
    qual = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{getattr(obj, '__module__', None) or type(obj).__module__}.{qual}"


class Registry(Mapping[str, V], Generic[V]):
    """name -> entry, in registration order (a read-only mapping; see the module docstring).

    Args:
        kind: what an entry is, for messages ("credit estimator", "algorithm", ...).
        attrs: the attributes ``register`` accepts, with their defaults (set on every entry).
        entry: builds the stored entry from (name, decorated object, attributes); default: the
            object itself, with ``name`` and the attributes set on it.
    """

    def __init__(self, kind: str, attrs: dict[str, Any] | None = None,
                 entry: Callable[[str, Any, dict[str, Any]], V] | None = None):
        self.kind = kind
        self.attrs = dict(attrs or {})
        self._entry = entry
        self._table: dict[str, V] = {}
        self._by: dict[str, str] = {}

    # --- registering ---------------------------------------------------------------------------
    def register(self, name: str, **attrs: Any) -> Callable[[T], T]:
        """Decorator: register the class or function under ``name`` (``attrs``: its declared
        attributes); returns it unchanged apart from those attributes."""
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown and self._entry is None:
            raise ValueError(f"{self.kind} {name!r}: unknown attribute(s) {unknown}; declared: "
                             f"{', '.join(self.attrs) or 'none'}")

        def deco(obj: T) -> T:
            full = {**self.attrs, **attrs}
            if self._entry is not None:
                self.add(name, self._entry(name, obj, full), by=origin(obj))
            else:
                self.add(name, obj, by=origin(obj))  # refused before anything is set on obj
                for k, v in {"name": name, **full}.items():
                    setattr(obj, k, v)
            return obj

        return deco

    def add(self, name: str, entry: V, by: str | None = None) -> V:
        """Register ``entry`` itself under ``name`` (``by``: where it comes from, for messages)."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        if name in self._table:
            raise ValueError(f"{self.kind} {name!r} is already registered (by {self._by[name]}); choose another name")
        self._table[name] = entry
        self._by[name] = by or origin(entry)
        return entry

    # --- reading -------------------------------------------------------------------------------
    def lookup(self, name: object) -> V:
        """The entry of ``name``; a one-line ValueError with a did-you-mean otherwise."""
        if not isinstance(name, str) or name not in self._table:
            raise ValueError(unknown_name(self.kind, name, self.names()))
        return self._table[name]

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._table)

    def registered_by(self, name: str) -> str:
        """Where the entry of ``name`` was defined (``module.qualname``)."""
        return self._by[name]

    def __getitem__(self, name: str) -> V:
        return self._table[name]

    def __setitem__(self, name: str, entry: V) -> None:  # a taken name is refused here too
        self.add(name, entry)

    def __delitem__(self, name: str) -> None:  # for tests that register a throwaway entry
        del self._table[name]
        del self._by[name]

    def pop(self, name: str, *default: Any) -> V:
        """Remove ``name`` and return its entry (``default``, if given, when it is not registered)."""
        if name not in self._table and default:
            return default[0]
        entry = self._table[name]
        del self[name]
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._table)})"
