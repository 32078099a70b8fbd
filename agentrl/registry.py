"""Named plug-in classes registered at their definition (contexts, algorithms): one decorator
factory, so every registry refuses a taken name the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T", bound=type)


def class_registrar(table: dict[str, type], kind: str) -> Callable[[str], Callable[[T], T]]:
    """``register(name)`` decorators for ``table``: each sets ``cls.name`` and adds the class; a
    name already in the table is a ValueError naming the class that holds it."""

    def register(name: str) -> Callable[[T], T]:
        def deco(cls: T) -> T:
            if name in table:
                raise ValueError(f"{kind} {name!r} is already registered ({table[name].__qualname__})")
            cls.name = name
            table[name] = cls
            return cls

        return deco

    return register
