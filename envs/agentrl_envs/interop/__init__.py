"""agentrl's environments for other trainers, and other environments for agentrl.

* ``openenv_server``: any registered env behind OpenEnv's own server (``agentrl-envs serve``), so
  OpenEnv's client, and every trainer that uses it, plays our envs (needs the ``openenv`` extra).
* ``openenv_client``: any OpenEnv server as a gymnasium env (``openenv:URL`` or a registered
  name), so agentrl's rollout, credit modules and env workers play it like a built-in env.
* ``trl_tools``: one class per text env for TRL's ``GRPOTrainer(environment_factory=...)``: named
  tool methods, ``reset(**row)``, ``get_reward()``, and a dataset of task rows per env.
* ``verifiers_env``: ``load_environment`` for prime-intellect's verifiers (needs ``verifiers``).

Nothing here imports an optional dependency at module import: each door imports its library
when used, and says which extra installs it when it is missing.
"""

from __future__ import annotations

SERVER_NAME = "agentrl-envs"
"""What the state of an agentrl server says in ``server``: how a client tells one of ours from
another OpenEnv server."""


def missing_extra(what: str, extra: str, e: ImportError) -> ImportError:
    """The one-line error of a door whose library is not installed: which extra installs it."""
    return ImportError(f"{what} needs the '{extra}' extra of agentrl-envs "
                       f"(pip install 'agentrl-envs[{extra}]'; see docs/envs.md): {e}")
