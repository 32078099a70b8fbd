"""ALFWorld for agentrl: the real alfworld/TextWorld engine, official or offline-generated games.

* :class:`ALFWorldEnv` (registered as ``agentrl/ALFWorld-v0``, 50 steps) -- :mod:`agentrl.envs.alfworld.env`
* game sets -- :mod:`agentrl.envs.alfworld.games`; offline generation --
  ``python -m agentrl.envs.alfworld.generate --out DIR --per-family N --seed S`` (:mod:`agentrl.envs.alfworld.generate`)

Importing this package does not import alfworld/TextWorld; constructing the env does (the
``alfworld`` extra: ``pip install alfworld==0.4.2 textworld==1.7.0``).
"""

from agentrl.envs.alfworld.env import ALFWorldEnv, normalize_command
from agentrl.envs.alfworld.families import FAMILIES, SPLITS

__all__ = ["ALFWorldEnv", "FAMILIES", "SPLITS", "normalize_command"]
