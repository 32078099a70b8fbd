"""Offline ALFWorld game-set generation from what the ``alfworld`` wheel ships.

The official ALFWorld games (``alfworld-download``) live on GitHub, which CI cannot reach. The
wheel ships everything else ALFWorld's own pipeline needs: the 120 AI2-THOR floor plans
(``gen/layouts/FloorPlan*-{objects,openable}.json``), the PDDL domain (``alfred.pddl``), the
text grammar (``alfred.twl2``), the goal library (``gen/goal_library.py``) and the object
affordances (``gen/constants.py``). This module plays the part of ALFRED's THOR-side sampler:
for each game it samples a task (task type, object, parent receptacle, lamp) that is valid in a
floor plan, scatters the scene's objects over compatible receptacles and writes the same three
files an official game directory holds:

* ``traj_data.json``     task type + ``pddl_params`` (read by ALFWorld's handcoded expert),
* ``initial_state.pddl`` the PDDL problem (objects, init facts, goal from the goal library),
* ``game.tw-pddl``       built exactly as ``alfworld-generate`` builds it (domain + grammar with
                          ``add_task_to_grammar`` + problem, ``solvable`` + ``walkthrough``).

Every game is then checked the way ALFWorld plays it: loaded in TextWorld's ``PddlEnv`` behind
``AlfredDemangler``/``AlfredInfos``, Fast Downward (TextWorld's planner, the one behind
``AlfredExpert(expert_type="planner")``) plans from the initial state, and the plan is
*executed*: every command must be admissible and the game must end ``won``. Only such games
are kept. The planner runs on the task-relevant sub-problem (:mod:`agentrl.envs.alfworld.planner`):
on the whole kitchen problem its search took up to 90+ s per game here.

Pitfalls handled (each found by building games and playing them): ``openable.json`` lacks some receptacles (StoveBurner,
Toaster, CoffeeMachine, GarbageCan, ...): the ones listed in ``objects.json`` are added with
synthetic ids; a task's parent (and tool) receptacle must exist in the scene and no instance
of the target starts inside a receptacle of the parent's type (else the game starts won);
``alfworld-generate``'s ``--end -1`` slice (drops the last file) is avoided by not using it;
``AlfredExpert`` gets ``expert_type=`` by keyword (positional fills ``env``; see engine.py).

Splits follow ALFRED's scene split (``constants.TRAIN_SCENE_NUMBERS`` / ``TEST_SCENE_NUMBERS``):
``train`` and ``valid_seen`` use the training floor plans with disjoint tasks (no
(floor plan, task type, object, receptacle, lamp) tuple of ``valid_seen`` occurs in ``train``),
``valid_unseen`` uses the held-out floor plans. Output layout mirrors ``json_2.1.1``::

    OUT/<split>/<task_type>-<Object>-None-<Parent|Lamp>-<floorplan>/trial_<game seed>/{traj_data.json,
        initial_state.pddl, game.tw-pddl}
    OUT/manifest.json

Everything is a pure function of ``--seed`` (and the counts): each game has its own RNG
derived from (seed, split, family, slot, attempt), so ``--workers`` does not change the result.

Usage::

    python -m agentrl.envs.alfworld.generate --out DIR --per-family 4 --valid-per-family 2 --seed 0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentrl.envs.alfworld.families import FAMILIES, GENERATOR_VERSION, SPLITS, TASK_TYPE_TO_FAMILY

__all__ = ["FAMILIES", "GENERATOR_VERSION", "SPLITS", "TASK_TYPE_TO_FAMILY", "generate_game_set",
           "load_scene", "sample_spec", "build_problem", "write_and_verify", "coverage", "main"]

# Receptacle needed to apply the family's state change (PDDL domain: CleanObject needs a
# SinkBasinType receptacle, HeatObject a Microwave, CoolObject a Fridge).
TOOL_RECEPTACLE = {"clean": "SinkBasin", "heat": "Microwave", "cool": "Fridge"}
ACTION_PROPERTY = {"clean": "Cleanable", "heat": "Heatable", "cool": "Coolable"}
LAMPS = ("DeskLamp", "FloorLamp")
# Where a lamp stands: first type present in the scene wins (furniture a lamp is put on).
LAMP_HOSTS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand",
              "Bed", "Sofa", "ArmChair")
# ALFRED's constants: MAX_NUM_OF_OBJ_INSTANCES (other objects), PICKUP_REPEAT_MAX (the target).
MAX_INSTANCES = 3
MAX_TARGET_INSTANCES = 4
# P(1, 2, 3 instances) of a non-target object type: most THOR objects appear once. Fewer
# objects also keep resets and steps fast (TextWorld grounds take/put per object x receptacle).
DISTRACTOR_WEIGHTS = (0.6, 0.3, 0.1)
MAX_ATTEMPTS = 8  # resample a slot this many times when the planner cannot solve the game


def _constants():
    import alfworld.gen.constants as C  # noqa: N812 (ALFWorld's own module name)

    return C


def layouts_dir() -> str:
    import alfworld

    return os.path.join(os.path.dirname(alfworld.__file__), "gen", "layouts")


def scene_kind(floor_plan: int) -> str:
    for kind, numbers in _constants().SCENE_TYPE.items():
        if floor_plan in numbers:
            return kind
    raise ValueError(f"floor plan {floor_plan} is in no ALFRED scene type")


def split_scenes(split: str) -> list[int]:
    C = _constants()
    if split in ("train", "valid_seen"):
        scenes = C.TRAIN_SCENE_NUMBERS
    elif split == "valid_unseen":
        scenes = C.TEST_SCENE_NUMBERS
    else:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    have = set(os.listdir(layouts_dir()))
    return sorted(n for n in scenes if f"FloorPlan{n}-objects.json" in have
                  and f"FloorPlan{n}-openable.json" in have)


def _mangle(name: str) -> str:
    """ALFRED's PDDL escaping of THOR ids (PlannedGameState.fix_pddl_str_chars, no '#')."""
    table = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
    return "".join(table.get(c, c) for c in name)


def _coord(v: float) -> str:
    return f"{v:+06.2f}" if v != 0 else "00.00"


# --------------------------------------------------------------------------------------------
# Scenes
# --------------------------------------------------------------------------------------------
@dataclass
class Scene:
    floor_plan: int
    kind: str
    object_types: list[str]                       # objects.json (types only)
    receptacles: dict[str, str] = field(default_factory=dict)   # THOR id -> receptacle type
    recep_loc: dict[str, str] = field(default_factory=dict)     # THOR id -> loc|x|z|rot|hor
    synthetic: list[str] = field(default_factory=list)          # ids added for missing types

    def receptacles_of(self, rtype: str) -> list[str]:
        return sorted(r for r, t in self.receptacles.items() if t == rtype)

    @property
    def receptacle_types(self) -> set[str]:
        return set(self.receptacles.values())


def load_scene(floor_plan: int) -> Scene:
    """Receptacles of a floor plan: openable.json plus the receptacle types it lacks."""
    C = _constants()
    base = os.path.join(layouts_dir(), f"FloorPlan{floor_plan}")
    with open(base + "-objects.json") as f:
        object_types = sorted(set(json.load(f)))
    with open(base + "-openable.json") as f:
        openable = json.load(f)
    scene = Scene(floor_plan, scene_kind(floor_plan), object_types)
    static = set(C.VAL_RECEPTACLE_OBJECTS) - set(C.MOVABLE_RECEPTACLES)
    used_locs = set()
    for rid in sorted(openable):
        x, z, rot, hor = openable[rid]
        parts = rid.split("|")
        rtype = parts[4] if len(parts) > 4 else parts[0]   # Sink|x|y|z|SinkBasin -> SinkBasin
        if rtype not in static:
            continue
        loc = f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{int(rot) // 90 % 4}|{int(hor)}"
        scene.receptacles[rid] = rtype
        scene.recep_loc[rid] = loc
        used_locs.add(loc)
    # Receptacle types in objects.json but absent from openable.json (StoveBurner, Toaster,
    # CoffeeMachine, GarbageCan, Toilet, ...): synthetic ids at fresh grid locations. The RNG
    # depends on the floor plan only, so every game of a scene sees the same receptacles.
    rng = random.Random(f"scene-{floor_plan}")
    for otype in object_types:
        rtype = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}.get(otype, otype)
        if rtype not in static or rtype in scene.receptacle_types:
            continue
        count = 4 if rtype == "StoveBurner" else 1
        for _ in range(count):
            x, y, z = (round(rng.uniform(-3, 3), 2), round(rng.uniform(0, 1.5), 2),
                       round(rng.uniform(-3, 3), 2))
            rid = f"{rtype}|{_coord(x)}|{_coord(y)}|{_coord(z)}"
            if rtype in ("SinkBasin", "BathtubBasin"):  # Demangler names "...basin" from the id
                rid = f"{rtype[:-5]}|{_coord(x)}|{_coord(y)}|{_coord(z)}|{rtype}"
            while True:
                loc = f"loc|{rng.randint(-20, 20)}|{rng.randint(-20, 20)}|{rng.randint(0, 3)}|30"
                if loc not in used_locs:
                    break
            used_locs.add(loc)
            scene.receptacles[rid] = rtype
            scene.recep_loc[rid] = loc
            scene.synthetic.append(rid)
    return scene


def pickupable_types(scene: Scene) -> list[str]:
    """Object types of the scene that some receptacle of the scene can hold."""
    C = _constants()
    out = []
    for t in scene.object_types:
        if t in scene.receptacle_types or t in ("Sink", "Bathtub"):
            continue
        if any(t in C.VAL_RECEPTACLE_OBJECTS[r] for r in scene.receptacle_types):
            out.append(t)
    return out


def can_hold(rtype: str, otype: str) -> bool:
    return otype in _constants().VAL_RECEPTACLE_OBJECTS.get(rtype, ())


# --------------------------------------------------------------------------------------------
# Task sampling
# --------------------------------------------------------------------------------------------
def candidate_tasks(scene: Scene, family: str) -> list[dict[str, str]]:
    """All (object, parent, lamp) tasks of ``family`` that are valid in ``scene``."""
    C = _constants()
    task_type = FAMILIES[family]
    if scene.kind not in C.GOALS_VALID[task_type]:
        return []
    objs = pickupable_types(scene)
    rtypes = sorted(scene.receptacle_types)
    out = []
    if family == "look":
        lamps = [lamp for lamp in LAMPS if lamp in scene.object_types]
        if not lamps or not any(h in scene.receptacle_types for h in LAMP_HOSTS):
            return []
        for lamp in lamps:
            for o in objs:
                out.append({"object_target": o, "parent_target": "", "toggle_target": lamp})
        return out
    tool = TOOL_RECEPTACLE.get(family)
    if tool is not None and tool not in scene.receptacle_types:
        return []
    for o in objs:
        if family in ACTION_PROPERTY and o not in C.VAL_ACTION_OBJECTS[ACTION_PROPERTY[family]]:
            continue
        for r in rtypes:
            if r == tool or not can_hold(r, o):
                continue
            # The target must be able to start somewhere other than the parent's type.
            if not any(can_hold(r2, o) for r2 in rtypes if r2 != r):
                continue
            out.append({"object_target": o, "parent_target": r, "toggle_target": ""})
    return out


def task_key(floor_plan: int, family: str, params: dict[str, str]) -> str:
    return "|".join([str(floor_plan), family, params["object_target"], params["parent_target"],
                     params["toggle_target"]])


def game_rng(seed: int, split: str, family: str, slot: int, attempt: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}/{split}/{family}/{slot}/{attempt}".encode()).hexdigest()
    return random.Random(int(digest[:16], 16))


@dataclass
class GameSpec:
    split: str
    family: str
    slot: int
    attempt: int
    floor_plan: int
    params: dict[str, str]
    game_seed: int

    @property
    def key(self) -> str:
        return task_key(self.floor_plan, self.family, self.params)

    @property
    def dirname(self) -> str:
        p = self.params
        second = p["toggle_target"] if self.family == "look" else p["parent_target"]
        return os.path.join(
            self.split,
            f"{FAMILIES[self.family]}-{p['object_target']}-None-{second}-{self.floor_plan}",
            f"trial_{self.game_seed:010d}")


def sample_spec(seed: int, split: str, family: str, slot: int, attempt: int,
                exclude: set[str], scene_cache: dict[int, Scene]) -> GameSpec | None:
    rng = game_rng(seed, split, family, slot, attempt)
    scenes = split_scenes(split)
    rng.shuffle(scenes)
    for fp in scenes:
        if fp not in scene_cache:
            scene_cache[fp] = load_scene(fp)
        tasks = [t for t in candidate_tasks(scene_cache[fp], family)
                 if task_key(fp, family, t) not in exclude]
        if tasks:
            params = rng.choice(tasks)
            return GameSpec(split, family, slot, attempt, fp, params, rng.randrange(10**10))
    return None


# --------------------------------------------------------------------------------------------
# PDDL problem
# --------------------------------------------------------------------------------------------
def build_problem(spec: GameSpec, scene: Scene) -> tuple[str, dict[str, Any]]:
    """Return (initial_state.pddl text, traj_data dict) for one game."""
    C = _constants()
    import alfworld.gen.goal_library as glib

    rng = random.Random(spec.game_seed)
    p = spec.params
    target, parent, lamp = p["object_target"], p["parent_target"], p["toggle_target"]
    receps = sorted(scene.receptacles)

    # Objects: every pickupable type of the scene, 1..3 instances (DISTRACTOR_WEIGHTS); the
    # target 1..4 (2..4 for pick2). Each instance lands in a random receptacle that can hold it; target instances
    # never start in a receptacle of the parent's type.
    objects: dict[str, str] = {}       # THOR-like id -> type
    placement: dict[str, str] = {}     # object id -> receptacle id
    used_ids = set()
    for otype in pickupable_types(scene):
        if otype == target:
            n = rng.randint(2 if spec.family == "pick2" else 1, MAX_TARGET_INSTANCES)
        else:
            n = rng.choices(range(1, MAX_INSTANCES + 1), weights=DISTRACTOR_WEIGHTS)[0]
        hosts = [r for r in receps if can_hold(scene.receptacles[r], otype)]
        if otype == target and parent:
            hosts = [r for r in hosts if scene.receptacles[r] != parent]
        if not hosts:
            continue
        for _ in range(n):
            while True:
                oid = (f"{otype}|{_coord(round(rng.uniform(-4, 4), 2))}|"
                       f"{_coord(round(rng.uniform(0, 2), 2))}|{_coord(round(rng.uniform(-4, 4), 2))}")
                if oid not in used_ids:
                    break
            used_ids.add(oid)
            objects[oid] = otype
            placement[oid] = rng.choice(hosts)
    if lamp:
        hosts = next(scene.receptacles_of(h) for h in LAMP_HOSTS if h in scene.receptacle_types)
        lid = f"{lamp}|{_coord(round(rng.uniform(-4, 4), 2))}|+01.00|{_coord(round(rng.uniform(-4, 4), 2))}"
        objects[lid] = lamp
        placement[lid] = rng.choice(hosts)

    n_target = sum(1 for t in objects.values() if t == target)
    assert n_target >= (2 if spec.family == "pick2" else 1), "target object missing"

    # Agent starts in the middle of the room: a location no receptacle stands at.
    locs = set(scene.recep_loc.values())
    while True:
        start = f"loc|{rng.randint(-20, 20)}|{rng.randint(-20, 20)}|{rng.randint(0, 3)}|30"
        if start not in locs:
            break

    static_types = sorted(set(C.RECEPTACLES) - set(C.MOVABLE_RECEPTACLES))
    otypes = sorted(set(C.OBJECTS) - set(static_types))
    m = _mangle
    lines_obj = ["agent1 - agent"]
    lines_obj += [f"{t}Type - otype" for t in otypes]
    lines_obj += [f"{t}Type - rtype" for t in static_types]
    lines_obj += [f"{m(o)} - object" for o in sorted(objects)]
    lines_obj += [f"{m(r)} - receptacle" for r in receps]
    lines_obj += [f"{m(loc)} - location" for loc in sorted(locs | {start})]

    init = [f"(atLocation agent1 {m(start)})"]
    for r in receps:
        rtype = scene.receptacles[r]
        init.append(f"(receptacleType {m(r)} {rtype}Type)")
        init.append(f"(receptacleAtLocation {m(r)} {m(scene.recep_loc[r])})")
        if rtype in C.OPENABLE_CLASS_SET:
            init.append(f"(openable {m(r)})")
    for o in sorted(objects):
        otype = objects[o]
        r = placement[o]
        init.append(f"(objectType {m(o)} {otype}Type)")
        init.append(f"(inReceptacle {m(o)} {m(r)})")
        init.append(f"(objectAtLocation {m(o)} {m(scene.recep_loc[r])})")
        if otype in LAMPS:
            init.append(f"(toggleable {m(o)})")
            continue
        init.append(f"(pickupable {m(o)})")
        if otype in C.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {m(o)})")
        for prop, pred in (("Cleanable", "cleanable"), ("Heatable", "heatable"),
                           ("Coolable", "coolable"), ("Sliceable", "sliceable")):
            if otype in C.VAL_ACTION_OBJECTS[prop]:
                init.append(f"({pred} {m(o)})")
    present_otypes = sorted(set(objects.values()) - set(LAMPS))
    for rtype in sorted(scene.receptacle_types):
        for otype in present_otypes:
            if can_hold(rtype, otype):
                init.append(f"(canContain {rtype}Type {otype}Type)")

    goal = glib.gdict[FAMILIES[spec.family]]["pddl"].format(
        obj=target, recep=parent, toggle=lamp, mrecep="").replace("#", "-")
    nl = "\n        "
    problem = (f"(define (problem plan_trial_{spec.game_seed})\n"
               f"    (:domain alfred)\n"
               f"    (:objects\n        {nl.join(lines_obj)}\n    )\n"
               f"    (:init\n        {nl.join(init)}\n    )\n"
               f"{goal}\n")   # the goal library's text also closes (define ...)

    traj = {
        "task_type": FAMILIES[spec.family],
        "task_id": f"trial_{spec.game_seed:010d}",
        "pddl_params": {"object_target": target, "parent_target": parent, "toggle_target": lamp,
                        "mrecep_target": "", "object_sliced": False},
        "scene": {"floor_plan": f"FloorPlan{spec.floor_plan}", "scene_num": spec.floor_plan,
                  "random_seed": spec.game_seed},
        "turk_annotations": {"anns": []},
        "agentrl": {"generator_version": GENERATOR_VERSION, "split": spec.split,
                    "family": spec.family, "slot": spec.slot, "attempt": spec.attempt,
                    "synthetic_receptacles": sorted(scene.synthetic)},
    }
    return problem, traj


# --------------------------------------------------------------------------------------------
# Game file + planner check (alfworld-generate's steps, done per game)
# --------------------------------------------------------------------------------------------
def _game_logic() -> dict[str, str]:
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    with open(ALFRED_PDDL_PATH) as f:
        domain = f.read()
    with open(ALFRED_TWL2_PATH) as f:
        grammar = f.read()
    return {"pddl_domain": domain, "grammar": grammar}


_ENGINE = None


def _engine():
    """One TextWorld env + planner per process: each holds a copy of libdownward."""
    global _ENGINE
    if _ENGINE is None:
        from agentrl.envs.alfworld.engine import make_tw_env
        from agentrl.envs.alfworld.planner import SubproblemPlanner

        _ENGINE = (make_tw_env(), SubproblemPlanner())
    return _ENGINE


def write_and_verify(spec: GameSpec, out_root: str, max_plan_steps: int = 60) -> dict[str, Any]:
    """Write one game's files under ``out_root`` and verify it with the planner.

    Returns a manifest row; ``solvable`` is False (files removed) when the planner has no plan
    or executing it does not win the game.
    """
    from alfworld.agents.utils.misc import add_task_to_grammar

    t0, c0 = time.perf_counter(), time.process_time()
    scene = load_scene(spec.floor_plan)
    problem, traj = build_problem(spec, scene)
    game_dir = os.path.join(out_root, spec.dirname)
    os.makedirs(game_dir, exist_ok=True)
    with open(os.path.join(game_dir, "traj_data.json"), "w") as f:
        json.dump(traj, f, indent=1, sort_keys=True)
    with open(os.path.join(game_dir, "initial_state.pddl"), "w") as f:
        f.write(problem)

    logic = _game_logic()
    # add_task_to_grammar picks the goal template with the global `random`: seed it per game
    # (and restore the caller's state) so the task text is a function of the game seed.
    state = random.getstate()
    random.seed(spec.game_seed)
    try:
        grammar = add_task_to_grammar(logic["grammar"], traj, goal_desc_human_anns_prob=0.0,
                                      rng=random.Random(spec.game_seed))
    finally:
        random.setstate(state)
    gamedata = {"pddl_domain": logic["pddl_domain"], "grammar": grammar, "pddl_problem": problem,
                "solvable": None, "walkthrough": None}
    game_file = os.path.join(game_dir, "game.tw-pddl")
    with open(game_file, "w") as f:
        json.dump(gamedata, f)

    walkthrough, error = None, None
    try:
        from agentrl.envs.alfworld.engine import GameCache, pddl_env

        env, planner = _engine()
        with GameCache():          # load() and reset() translate the same problem
            env.load(game_file)
            state = env.reset()
        if state["won"]:
            error = "game starts won"
        else:
            plan = planner.plan(pddl_env(env))
            if not plan:
                error = "planner found no plan"
            elif len(plan) > max_plan_steps:
                error = f"plan too long ({len(plan)} steps)"
            else:
                for cmd in plan:   # execute the plan: every command admissible, game ends won
                    if cmd not in state["admissible_commands"]:
                        error = f"plan command not admissible: {cmd!r}"
                        break
                    state, _, done = env.step(cmd)
                    if done:
                        break
                if error is None and state["won"]:
                    walkthrough = plan
                elif error is None:
                    error = "executing the plan did not win"
    except Exception as e:  # a broken problem must not stop the whole build
        error = f"{type(e).__name__}: {e}"

    row = {"split": spec.split, "family": spec.family, "task_type": FAMILIES[spec.family],
           "slot": spec.slot, "attempt": spec.attempt, "floor_plan": spec.floor_plan,
           "scene_kind": scene.kind, "key": spec.key, "params": spec.params,
           "dir": spec.dirname, "solvable": walkthrough is not None, "error": error,
           "plan_length": len(walkthrough) if walkthrough else None,
           "seconds": round(time.perf_counter() - t0, 3),
           "cpu_seconds": round(time.process_time() - c0, 3)}
    if walkthrough is None:
        shutil.rmtree(game_dir, ignore_errors=True)
        return row
    gamedata["solvable"] = True
    gamedata["walkthrough"] = walkthrough
    with open(game_file, "w") as f:
        json.dump(gamedata, f)
    return row


def _verify_worker(args):
    spec, out_root = args
    return write_and_verify(spec, out_root)


# --------------------------------------------------------------------------------------------
# Game set
# --------------------------------------------------------------------------------------------
def generate_game_set(out: str, per_family: int = 4, valid_per_family: int | None = None,
                      seed: int = 0, families: list[str] | tuple[str, ...] | None = None,
                      splits: list[str] | tuple[str, ...] = SPLITS, workers: int = 1,
                      progress: bool = True) -> dict[str, Any]:
    """Build a game set under ``out`` (atomically: written to a temp dir, then renamed).

    Args:
        out: output directory (must not exist yet, or be empty).
        per_family: games per task family in ``train``.
        valid_per_family: games per task family in ``valid_seen`` and ``valid_unseen``
            (default: ``per_family``).
        seed: master seed; the set is a deterministic function of it and the counts.
        families: subset of the six families (default all: pick, look, clean, heat, cool, pick2).
        splits: subset of ("train", "valid_seen", "valid_unseen").
        workers: processes used for the planner check (the result does not depend on it).
        progress: show a tqdm progress bar.

    Returns the manifest (also written to ``out/manifest.json``).
    """
    from tqdm import tqdm

    families = list(families or FAMILIES)
    for fam in families:
        if fam not in FAMILIES:
            raise ValueError(f"unknown family {fam!r}; valid: {', '.join(FAMILIES)}")
    for split in splits:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if per_family < 0 or (valid_per_family is not None and valid_per_family < 0):
        raise ValueError("per_family and valid_per_family must be >= 0")
    valid_per_family = per_family if valid_per_family is None else valid_per_family
    out = os.path.abspath(out)
    if os.path.exists(out) and os.listdir(out):
        raise FileExistsError(f"{out} exists and is not empty; pick another --out")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".alfworld-build-", dir=parent)

    t0 = time.perf_counter()
    scene_cache: dict[int, Scene] = {}
    # Slots in a fixed order: train first, so valid_seen can exclude train's tasks.
    order = [s for s in SPLITS if s in splits]
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    used: set[str] = set()
    total = sum(per_family if s == "train" else valid_per_family for s in order) * len(families)
    bar = tqdm(total=total, desc="alfworld games", unit="game", disable=not progress,
               dynamic_ncols=True)
    pool = ProcessPoolExecutor(max_workers=workers) if workers > 1 else None
    try:
        if "valid_seen" in order and "train" not in order:
            # valid_seen must still avoid train's tasks: sample (not build) train's first
            # attempts. (Exact only when the splits are built together.)
            for fam in families:
                for slot in range(per_family):
                    spec = sample_spec(seed, "train", fam, slot, 0, used, scene_cache)
                    if spec is not None:
                        used.add(spec.key)
        for split in order:
            n = per_family if split == "train" else valid_per_family
            pending = [(fam, slot) for fam in families for slot in range(n)]
            attempt = 0
            while pending and attempt < MAX_ATTEMPTS:
                specs = []
                for fam, slot in pending:   # sequential sampling: deterministic exclusions
                    spec = sample_spec(seed, split, fam, slot, attempt, used, scene_cache)
                    if spec is None:
                        failures.append({"split": split, "family": fam, "slot": slot,
                                         "error": "no valid task left in this split's scenes"})
                        bar.update(1)
                        continue
                    used.add(spec.key)
                    specs.append(spec)
                jobs = [(s, tmp) for s in specs]
                results = pool.map(_verify_worker, jobs) if pool else map(_verify_worker, jobs)
                pending = []
                for spec, row in zip(specs, results, strict=True):
                    if row["solvable"]:
                        rows.append(row)
                        bar.update(1)
                    else:
                        failures.append(row)
                        pending.append((spec.family, spec.slot))
                    bar.set_postfix_str(f"{split} {spec.family}")
                attempt += 1
            for fam, slot in pending:   # gave up after MAX_ATTEMPTS
                failures.append({"split": split, "family": fam, "slot": slot,
                                 "error": f"no solvable game in {MAX_ATTEMPTS} attempts"})
                bar.update(1)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        bar.close()
        if pool:
            pool.shutdown()

    rows.sort(key=lambda r: (SPLITS.index(r["split"]), list(FAMILIES).index(r["family"]), r["slot"]))
    manifest = {
        "generator": "agentrl.envs.alfworld.generate", "generator_version": GENERATOR_VERSION,
        "seed": seed, "per_family": per_family, "valid_per_family": valid_per_family,
        "families": families, "splits": order,
        "games": [{k: r[k] for k in ("split", "family", "task_type", "floor_plan", "scene_kind",
                                      "params", "dir", "plan_length", "key", "seconds", "cpu_seconds")}
                  for r in rows],
        "rejected": [{k: r.get(k) for k in ("split", "family", "slot", "attempt", "key", "error")}
                     for r in failures],
        "build_seconds": round(time.perf_counter() - t0, 1),
    }
    timed = [r for r in rows + failures if "seconds" in r]
    manifest["verify_seconds_per_game"] = round(sum(r["seconds"] for r in timed) / max(1, len(timed)), 3)
    manifest["verify_cpu_seconds_per_game"] = round(
        sum(r["cpu_seconds"] for r in timed) / max(1, len(timed)), 3)
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    if os.path.isdir(out):
        os.rmdir(out)   # empty (checked above)
    os.rename(tmp, out)
    return manifest


def coverage(manifest: dict[str, Any]) -> dict[str, dict[str, int]]:
    """games per split x family, and per split x scene kind."""
    out: dict[str, dict[str, int]] = {}
    for g in manifest["games"]:
        for key in (g["family"], g["scene_kind"]):
            out.setdefault(g["split"], {}).setdefault(key, 0)
            out[g["split"]][key] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrl.envs.alfworld.generate", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (new or empty)")
    ap.add_argument("--per-family", type=int, default=4, help="train games per task family")
    ap.add_argument("--valid-per-family", type=int, default=None,
                    help="valid_seen and valid_unseen games per task family (default: --per-family)")
    ap.add_argument("--seed", type=int, default=0, help="master seed (the set is a function of it)")
    ap.add_argument("--families", nargs="*", default=None, choices=list(FAMILIES),
                    help="task families (default: all six)")
    ap.add_argument("--splits", nargs="*", default=list(SPLITS), choices=list(SPLITS))
    ap.add_argument("--workers", type=int, default=1, help="processes for the planner check")
    ap.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = ap.parse_args(argv)
    manifest = generate_game_set(args.out, args.per_family, args.valid_per_family, args.seed,
                                 args.families, args.splits, args.workers, not args.no_progress)
    print(json.dumps({"out": os.path.abspath(args.out), "games": len(manifest["games"]),
                      "rejected": len(manifest["rejected"]), "coverage": coverage(manifest),
                      "build_seconds": manifest["build_seconds"],
                      "verify_seconds_per_game": manifest["verify_seconds_per_game"],
                      "verify_cpu_seconds_per_game": manifest["verify_cpu_seconds_per_game"]},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
