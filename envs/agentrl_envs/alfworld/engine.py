"""The alfworld/TextWorld engine as ALFWorld assembles it, plus what every env of a process shares.

* :func:`make_tw_env`: TextWorld ``PddlEnv`` -> ``AlfredDemangler`` -> ``AlfredInfos``
  [-> ``AlfredExpert(expert_type="handcoded")``], as ``AlfredTWEnv``/``alfworld-generate`` do.
* :class:`GameCache`: read-only game data parsed once per process and shared by every env: the
  grammar's ``GameLogic``, Fast Downward's translated task and the grammar's parsed rules,
  memoized by content (most of a load, ~85% of a reset, ~25% of a step). Sharing is safe because
  TextWorld only reads them; tests compare a reused env with a fresh one observation by
  observation. Measurements and reasoning: docs/environments.md, "ALFWorld".
* :func:`game_data`: a game file's JSON (walkthrough), read once per process.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable

_SAS_CACHE: OrderedDict = OrderedDict()
SAS_CACHE_SIZE = 32
"""Translations kept (LRU): 2 per game, ~4 MB each for a kitchen game."""
_LOGIC_CACHE: OrderedDict = OrderedDict()
LOGIC_CACHE_SIZE = 32
"""Parsed game logics kept (LRU): one per game (its grammar holds the task)."""
_RULE_CACHE: OrderedDict = OrderedDict()
RULE_CACHE_SIZE = 4096
"""Parsed grammar conditions kept (LRU): a few hundred distinct texts in ALFWorld's grammar."""
_DATA_CACHE: OrderedDict = OrderedDict()
DATA_CACHE_SIZE = 256
"""Game files' JSON kept (LRU), ~50 KB each."""

INSTALL_HINT = ("the alfworld extra is missing: pip install alfworld==0.4.2 textworld==1.7.0 "
                "(or pip install -e '.[alfworld]')")


def _memo(cache: OrderedDict, size: int, key, make: Callable[[], object]):
    """``cache[key]``, made by ``make()`` on a miss; least recently used entries beyond ``size``
    are dropped."""
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = make()
        while len(cache) > size:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return hit


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _cached_pddl2sas(original):
    def pddl2sas(domain, problem, verbose=False, optimize=False):
        return _memo(_SAS_CACHE, SAS_CACHE_SIZE, (_sha(domain), _sha(problem), bool(optimize)),
                     lambda: original(domain, problem, verbose=verbose, optimize=optimize))

    return pddl2sas


def _cached_game_logic(original):
    def game_logic(domain, grammar):
        return _memo(_LOGIC_CACHE, LOGIC_CACHE_SIZE, (_sha(domain), _sha(grammar)),
                     lambda: original(domain=domain, grammar=grammar))

    return game_logic


def _cached_query(original):
    def parse_conjunctive_query(cls, expr):
        return _memo(_RULE_CACHE, RULE_CACHE_SIZE, expr, lambda: original(cls, expr))

    return classmethod(parse_conjunctive_query)


class GameCache:
    """``with GameCache(): env.load(...); env.reset()`` (or ``env.step(...)``) -- memoized game
    logic, PDDL translation and grammar conditions.

    It swaps library functions for the duration of the block: one env per thread at a time
    (env workers are processes; each has its own caches)."""

    def __enter__(self):
        import fast_downward
        from textworld.envs.pddl import logic
        from textworld.logic import Rule

        self._saved = [(fast_downward, "pddl2sas", fast_downward.pddl2sas),
                       (logic, "GameLogic", logic.GameLogic),
                       (Rule, "parse_conjunctive_query", Rule.__dict__["parse_conjunctive_query"])]
        fast_downward.pddl2sas = _cached_pddl2sas(fast_downward.pddl2sas)
        logic.GameLogic = _cached_game_logic(logic.GameLogic)
        Rule.parse_conjunctive_query = _cached_query(Rule.parse_conjunctive_query.__func__)
        return self

    def __exit__(self, *exc):
        for module, name, original in self._saved:
            setattr(module, name, original)
        return False


def game_data(game_file: str) -> dict:
    """The JSON of a ``game.tw-pddl`` file, read once per process (callers must not modify it)."""
    def read():
        with open(game_file) as f:
            return json.load(f)

    return _memo(_DATA_CACHE, DATA_CACHE_SIZE, game_file, read)


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


class TextWorldEngine:
    """The reference engine behind the same small interface as
    :class:`agentrl_envs.alfworld.native.NativeEngine`: ``load``, ``reset``, ``step``; then
    ``feedback``, ``admissible``, ``won``, :meth:`dynamic_facts`, :meth:`plan`.

    ``expert_type="handcoded"`` adds ALFWorld's ``AlfredExpert`` (:attr:`expert_plan`)."""

    def __init__(self, expert_type: str | None = None):
        self.tw = make_tw_env(expert_type)
        self.state = None

    def load(self, game_file: str) -> None:
        with GameCache():
            self.tw.load(game_file)

    def reset(self) -> None:
        with GameCache():
            self.state = self.tw.reset()

    def step(self, command: str) -> None:
        with GameCache():
            self.state, _, _ = self.tw.step(command)

    @property
    def feedback(self) -> str:
        return self.state.feedback

    @property
    def admissible(self) -> list[str]:
        return list(self.state["admissible_commands"])

    @property
    def won(self) -> bool:
        return bool(self.state["won"])

    @property
    def expert_plan(self) -> list[str]:
        return self.state.get("extra.expert_plan") or []

    def dynamic_facts(self) -> list[str]:
        return dynamic_facts(self.state["_facts"])

    def plan(self, planner) -> list[str]:
        """The planner's plan from the current state (:class:`~agentrl_envs.alfworld.planner.SubproblemPlanner`)."""
        return planner.plan(pddl_env(self.tw))

    def close(self) -> None:
        self.tw.close()
