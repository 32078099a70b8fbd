"""One game's PDDL problem and ``traj_data.json``, built from a sampled task and its scene.

The objects of the scene are scattered over compatible receptacles (never the target inside a
receptacle of the parent's type: the game would start won); the goal is the ALFWorld goal
library's text for the task type. ``build_problem`` is a pure function of the spec.
"""

from __future__ import annotations

import random
from typing import Any

from agentrl_envs.alfworld.families import FAMILIES, GENERATOR_VERSION
from agentrl_envs.alfworld.scenes import (
    LAMP_HOSTS,
    LAMPS,
    GameSpec,
    Scene,
    _constants,
    _coord,
    can_hold,
    pickupable_types,
)

# ALFRED's constants: MAX_NUM_OF_OBJ_INSTANCES (other objects), PICKUP_REPEAT_MAX (the target).
MAX_INSTANCES = 3
MAX_TARGET_INSTANCES = 4
# P(1, 2, 3 instances) of a non-target object type: most THOR objects appear once. Fewer
# objects also keep resets and steps fast (TextWorld grounds take/put per object x receptacle).
DISTRACTOR_WEIGHTS = (0.6, 0.3, 0.1)


def _mangle(name: str) -> str:
    """ALFRED's PDDL escaping of THOR ids (PlannedGameState.fix_pddl_str_chars, no '#')."""
    table = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
    return "".join(table.get(c, c) for c in name)



def build_problem(spec: GameSpec, scene: Scene) -> tuple[str, dict[str, Any]]:
    """Return (initial_state.pddl text, traj_data dict) for one game."""
    import alfworld.gen.goal_library as glib

    rng = random.Random(spec.game_seed)
    p = spec.params
    target, parent, lamp = p["object_target"], p["parent_target"], p["toggle_target"]
    objects, placement = _place_objects(spec, scene, rng)
    # Agent starts in the middle of the room: a location no receptacle stands at.
    locs = set(scene.recep_loc.values())
    while True:
        start = f"loc|{rng.randint(-20, 20)}|{rng.randint(-20, 20)}|{rng.randint(0, 3)}|30"
        if start not in locs:
            break
    goal = glib.gdict[FAMILIES[spec.family]]["pddl"].format(
        obj=target, recep=parent, toggle=lamp, mrecep="").replace("#", "-")
    nl = "\n        "
    problem = (f"(define (problem plan_trial_{spec.game_seed})\n"
               f"    (:domain alfred)\n"
               f"    (:objects\n        {nl.join(_pddl_objects(scene, objects, locs | {start}))}\n    )\n"
               f"    (:init\n        {nl.join(_pddl_init(scene, objects, placement, start))}\n    )\n"
               f"{goal}\n")   # the goal library's text also closes (define ...)
    return problem, _traj_data(spec, scene)


def _place_objects(spec: GameSpec, scene: Scene, rng: random.Random) -> tuple[dict[str, str], dict[str, str]]:
    """({object id: type}, {object id: receptacle id}). Every pickupable type of the scene gets
    1..3 instances (DISTRACTOR_WEIGHTS), the target 1..4 (2..4 for pick2); each instance lands in
    a random receptacle that can hold it, target instances never in one of the parent's type."""
    target, parent, lamp = (spec.params[k] for k in ("object_target", "parent_target", "toggle_target"))
    receps = sorted(scene.receptacles)
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
    return objects, placement


def _pddl_objects(scene: Scene, objects: dict[str, str], locs: set[str]) -> list[str]:
    """The problem's ``(:objects ...)`` lines: the agent, every type, objects, receptacles, locations."""
    C = _constants()
    static_types = sorted(set(C.RECEPTACLES) - set(C.MOVABLE_RECEPTACLES))
    otypes = sorted(set(C.OBJECTS) - set(static_types))
    m = _mangle
    lines = ["agent1 - agent"]
    lines += [f"{t}Type - otype" for t in otypes]
    lines += [f"{t}Type - rtype" for t in static_types]
    lines += [f"{m(o)} - object" for o in sorted(objects)]
    lines += [f"{m(r)} - receptacle" for r in sorted(scene.receptacles)]
    lines += [f"{m(loc)} - location" for loc in sorted(locs)]
    return lines


def _pddl_init(scene: Scene, objects: dict[str, str], placement: dict[str, str], start: str) -> list[str]:
    """The problem's ``(:init ...)`` facts: where everything is and what it affords."""
    C = _constants()
    m = _mangle
    init = [f"(atLocation agent1 {m(start)})"]
    for r in sorted(scene.receptacles):
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
    return init


def _traj_data(spec: GameSpec, scene: Scene) -> dict[str, Any]:
    """The game's ``traj_data.json`` (task type and ``pddl_params``, read by ALFWorld's experts)."""
    p = spec.params
    return {
        "task_type": FAMILIES[spec.family],
        "task_id": f"trial_{spec.game_seed:010d}",
        "pddl_params": {"object_target": p["object_target"], "parent_target": p["parent_target"],
                        "toggle_target": p["toggle_target"], "mrecep_target": "", "object_sliced": False},
        "scene": {"floor_plan": f"FloorPlan{spec.floor_plan}", "scene_num": spec.floor_plan,
                  "random_seed": spec.game_seed},
        "turk_annotations": {"anns": []},
        "agentrl": {"generator_version": GENERATOR_VERSION, "split": spec.split,
                    "family": spec.family, "slot": spec.slot, "attempt": spec.attempt,
                    "synthetic_receptacles": sorted(scene.synthetic)},
    }
