"""ALFWorld for agentrl: official or offline-generated games, played by agentrl's native engine
or by the real alfworld/TextWorld engine (the reference it is checked against).

* :class:`ALFWorldEnv` (registered as ``agentrl/ALFWorld-v0``, 50 steps) -- :mod:`agentrl_envs.alfworld.env`
* engines -- :mod:`agentrl_envs.alfworld.native` (+ :mod:`~agentrl_envs.alfworld.compiled`),
  :mod:`agentrl_envs.alfworld.engine` (TextWorld)
* game sets -- :mod:`agentrl_envs.alfworld.games`; offline generation --
  ``python -m agentrl_envs.alfworld.generate --out DIR --per-family N --seed S`` (:mod:`agentrl_envs.alfworld.generate`)

Importing this package does not import alfworld/TextWorld. The native engine plays existing games
without them; generating games, the TextWorld engine, the handcoded expert and the planner
expert's replans need them (the ``alfworld`` extra: ``pip install alfworld==0.4.2 textworld==1.7.0``).
"""

from agentrl_envs.alfworld.env import ALFWorldEnv, normalize_command
from agentrl_envs.alfworld.families import FAMILIES, SPLITS

__all__ = ["ALFWorldEnv", "FAMILIES", "SPLITS", "normalize_command"]
