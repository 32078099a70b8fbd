"""The recipe's config: every key declared once (``agentrl.recipe_keys``: type, default, doc, help
group, range), the config class (``schema``: ``AgentRLConfig``), parsed (``parse``:
``load_recipe``), checked against the other modules (``validate``: env, credit, algorithm, loss,
model) and turned into what the other stages need (``build``: the credit kwargs, the rollout
settings)."""

from agentrl.recipe_file import RecipeError
from agentrl.recipe_keys import key_groups, recipe_keys_help, value_checks

from .build import credit_kwargs, rollout_settings
from .parse import join_negative_values, load_recipe
from .schema import AgentRLConfig, check_values, config_keys
from .validate import validate_config

__all__ = ["AgentRLConfig", "RecipeError", "check_values", "config_keys", "credit_kwargs", "join_negative_values",
           "key_groups", "load_recipe", "recipe_keys_help", "rollout_settings", "validate_config", "value_checks"]
