"""The alfworld/TextWorld engine as ALFWorld assembles it, plus two speed-ups.

* :func:`make_tw_env`: TextWorld ``PddlEnv`` -> ``AlfredDemangler`` -> ``AlfredInfos``
  [-> ``AlfredExpert(expert_type="handcoded")``], as ``AlfredTWEnv``/``alfworld-generate`` do.
* :class:`TranslationCache`: ``PddlEnv.load`` and every ``PddlEnv.reset`` build a new
  ``PddlState``, which runs Fast Downward's Python translator twice on the same problem text
  (~85% of a reset). Inside this context the translation is memoized per problem text.
  ``PddlState`` only reads the translated task and loads the SAS text into its own copy of
  libdownward, so sharing the translation is safe (tests replay games with and without it).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

_SAS_CACHE: OrderedDict = OrderedDict()
SAS_CACHE_SIZE = 16
"""Translations kept (LRU): 2 per game, ~4 MB each for a kitchen game."""

INSTALL_HINT = ("the alfworld extra is missing: pip install alfworld==0.4.2 textworld==1.7.0 "
                "(or pip install -e '.[alfworld]')")


def _cached_pddl2sas(original):
    def pddl2sas(domain, problem, verbose=False, optimize=False):
        key = (hashlib.sha1(domain.encode()).hexdigest(), hashlib.sha1(problem.encode()).hexdigest(),
               bool(optimize))
        hit = _SAS_CACHE.get(key)
        if hit is None:
            hit = original(domain, problem, verbose=verbose, optimize=optimize)
            _SAS_CACHE[key] = hit
            while len(_SAS_CACHE) > SAS_CACHE_SIZE:
                _SAS_CACHE.popitem(last=False)
        else:
            _SAS_CACHE.move_to_end(key)
        return hit

    return pddl2sas


class TranslationCache:
    """``with TranslationCache(): env.load(...); env.reset()`` -- memoized PDDL translation."""

    def __enter__(self):
        import fast_downward

        self._mod = fast_downward
        self._orig = fast_downward.pddl2sas
        fast_downward.pddl2sas = _cached_pddl2sas(self._orig)
        return self

    def __exit__(self, *exc):
        self._mod.pddl2sas = self._orig
        return False


def make_tw_env(expert_type: str | None = None):
    """``PddlEnv -> AlfredDemangler -> AlfredInfos [-> AlfredExpert(handcoded)]``.

    Requests admissible commands, facts and ``won``. ``expert_type="handcoded"`` adds
    ALFWorld's ``AlfredExpert`` (the plan is then in ``state["extra.expert_plan"]``).
    """
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import (
            AlfredDemangler,
            AlfredExpert,
            AlfredInfos,
        )
        from textworld.envs import PddlEnv
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    infos = textworld.EnvInfos(admissible_commands=True, facts=True, won=True,
                               extras=["gamefile"])
    env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
    if expert_type == "handcoded":
        env = AlfredExpert(env, expert_type="handcoded")   # keyword: positional fills `env`
    elif expert_type is not None:
        raise ValueError(f"unknown expert_type {expert_type!r} for make_tw_env; valid: None, handcoded")
    return env


def pddl_env(env):
    """The innermost TextWorld ``PddlEnv`` under ALFWorld's wrappers."""
    while hasattr(env, "_wrapped_env"):
        env = env._wrapped_env
    return env


def dynamic_facts(facts) -> list[str]:
    """Sorted text of the facts an action can change (location, holding, open, positions,
    clean/hot/cool/toggled/sliced), without bookkeeping facts such as ``checked``."""
    return sorted(
        f"{p.name.lower()}({','.join(v.name for v in p.arguments)})"
        for p in facts if p.name.lower() in DYNAMIC_PREDICATES)


DYNAMIC_PREDICATES = frozenset({
    "atlocation", "holds", "holdsany", "opened", "inreceptacle", "objectatlocation", "isclean",
    "ishot", "iscool", "istoggled", "ison", "issliced", "inreceptacleobject"})
