"""Names the interop doors share with the OpenEnv client: what an agentrl server calls itself, and
the one-line error of a door whose optional library is missing."""

from __future__ import annotations

SERVER_NAME = "agentrl-envs"
"""What the state of an agentrl server says in ``server``: how a client tells one of ours from
another OpenEnv server."""


def missing_extra(what: str, extra: str, e: ImportError) -> ImportError:
    """The one-line error of a door whose library is not installed: which extra installs it."""
    return ImportError(f"{what} needs the '{extra}' extra of agentrl-envs "
                       f"(pip install 'agentrl-envs[{extra}]'; see docs/envs.md): {e}")
