"""ALFRED's floor plans as the offline generator sees them, and the tasks it samples in them.

A :class:`Scene` is a floor plan's receptacles (``gen/layouts/FloorPlan*-openable.json``, plus
the receptacle types listed in ``-objects.json`` but missing from it, with synthetic ids); a
:class:`GameSpec` is one sampled task (family, floor plan, object, parent receptacle or lamp)
and the seed of its game. Every choice is drawn from an RNG derived from (seed, split, family,
slot, attempt), so a game set is a pure function of the master seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field

from agentrl_envs.alfworld.families import FAMILIES, SPLITS

# Receptacle needed to apply the family's state change (PDDL domain: CleanObject needs a
# SinkBasinType receptacle, HeatObject a Microwave, CoolObject a Fridge).
TOOL_RECEPTACLE = {"clean": "SinkBasin", "heat": "Microwave", "cool": "Fridge"}
ACTION_PROPERTY = {"clean": "Cleanable", "heat": "Heatable", "cool": "Coolable"}
LAMPS = ("DeskLamp", "FloorLamp")
# Where a lamp stands: first type present in the scene wins (furniture a lamp is put on).
LAMP_HOSTS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand",
              "Bed", "Sofa", "ArmChair")


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


def _coord(v: float) -> str:
    return f"{v:+06.2f}" if v != 0 else "00.00"



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


