"""The one action parser shared by every env and by the trainer's metrics.

BiPACE App. J contract: the executed command is the body of the first *well-formed*
``<action>...</action>`` pair in the model's response. A response with no such pair is
malformed: the env applies its invalid-action penalty and the episode goes on.
"""

from __future__ import annotations

import re

ACTION_OPEN = "<action>"
ACTION_CLOSE = "</action>"

# Non-greedy body, no nested "<action>" inside the body: "<action>a <action>b</action>" executes "b",
# the innermost well-formed pair that closes first.
_ACTION_RE = re.compile(r"<action>((?:(?!<action>).)*?)</action>", re.DOTALL | re.IGNORECASE)


def parse_action(response: str | None) -> str | None:
    """Return the stripped body of the first well-formed ``<action>`` pair, or None.

    An empty body (``<action> </action>``) counts as malformed and returns None.
    """
    if not response:
        return None
    m = _ACTION_RE.search(response)
    if m is None:
        return None
    body = m.group(1).strip()
    return body or None


def format_action(body: str) -> str:
    """Wrap an action body in the output contract (used by experts and SFT data)."""
    return f"{ACTION_OPEN}{body}{ACTION_CLOSE}"
