"""ALFWorld's six task families and splits (no heavy imports: shared by env, games, generator)."""

FAMILIES = {
    # short name used by agentrl -> ALFWorld task type (TASK_TYPES 1..6 of alfworld-generate)
    "pick": "pick_and_place_simple",
    "look": "look_at_obj_in_light",
    "clean": "pick_clean_then_place_in_recep",
    "heat": "pick_heat_then_place_in_recep",
    "cool": "pick_cool_then_place_in_recep",
    "pick2": "pick_two_obj_and_place",
}
TASK_TYPE_TO_FAMILY = {v: k for k, v in FAMILIES.items()}
SPLITS = ("train", "valid_seen", "valid_unseen")
GENERATOR_VERSION = 1
"""Version of agentrl_envs.alfworld.generate's sampler: part of the default cache path."""
