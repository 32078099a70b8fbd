"""agentrl's gymnasium text environments, registered on import.

Entry points are strings so that importing ``envs`` never imports an env's heavy engine
(ALFWorld's TextWorld stack is only loaded when ``agentrl/ALFWorld-v0`` is made).
"""

from gymnasium.envs.registration import register, registry

from agentrl.envs.base import TextEnv

ENV_SPECS = {
    # id: (entry point, max_episode_steps)  -- step limits as in the papers (ALFWorld 50, WebShop 15)
    "agentrl/ALFWorld-v0": ("agentrl.envs.alfworld:ALFWorldEnv", 50),
    "agentrl/TextCraft-v0": ("agentrl.envs.textcraft:TextCraftEnv", 30),
    "agentrl/WebShop-v0": ("agentrl.envs.webshop:WebShopEnv", 15),
    "agentrl/SWE-v0": ("agentrl.envs.swe:SWEEnv", 30),
    "agentrl/ToolReason-v0": ("agentrl.envs.toolreason:ToolReasonEnv", 8),  # ends itself at max_turns
}

for _id, (_entry, _steps) in ENV_SPECS.items():
    if _id not in registry:
        register(id=_id, entry_point=_entry, max_episode_steps=_steps)

__all__ = ["TextEnv", "ENV_SPECS"]
