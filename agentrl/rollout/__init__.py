"""Multi-turn rollouts (framework-free): ``run_episodes`` + its parts.

* ``settings``: ``RolloutSettings``, what ``run_episodes`` plays and how;
* ``env_batch``: ``EnvFailure``, ``InProcessEnvs`` (the env-batch interface a worker pool shares);
* ``contexts``: ``window`` / ``trajectory`` and the registry new contexts join;
* ``episodes``: ``Episode`` and the turn loop ``run_episodes``;
* ``prompts``: chat-template and env prompt helpers; ``generation``: generate callables.

The data flow through them is described in ``docs/design.md``.
"""

from agentrl.rollout.contexts import (
    Context,
    Row,
    TrajectoryContext,
    TrajectoryTokens,
    WindowContext,
    WindowTokens,
    context_names,
    make_context,
    register_context,
)
from agentrl.rollout.env_batch import EnvBatch, EnvFailure, InProcessEnvs
from agentrl.rollout.episodes import Episode, GenerateOutput, Slot, episodes_to_records, run_episodes
from agentrl.rollout.prompts import chat_text, decode_response, encode, turn_message, user_prompt
from agentrl.rollout.settings import RolloutSettings

# generation imports torch: loaded on first use, so that env worker processes (which import
# agentrl.rollout.env_pool) stay torch-free and single-threaded
_GENERATION = ("FingerprintCapture", "decoder_layers", "hf_generate_fn", "truncated_forward_fingerprints")


def __getattr__(name: str):
    if name in _GENERATION:
        from agentrl.rollout import generation

        return getattr(generation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Context",
    "Row",
    "TrajectoryContext",
    "TrajectoryTokens",
    "WindowContext",
    "WindowTokens",
    "context_names",
    "make_context",
    "register_context",
    "EnvBatch",
    "EnvFailure",
    "InProcessEnvs",
    "Episode",
    "GenerateOutput",
    "Slot",
    "episodes_to_records",
    "run_episodes",
    "FingerprintCapture",
    "decoder_layers",
    "hf_generate_fn",
    "truncated_forward_fingerprints",
    "chat_text",
    "decode_response",
    "encode",
    "turn_message",
    "user_prompt",
    "RolloutSettings",
]
