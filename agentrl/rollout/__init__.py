"""Multi-turn rollouts (framework-free): ``run_episodes`` + generate callables.

API agreed in ``.agent_notes/ROLLOUT_API.md``.
"""

from agentrl.rollout.episodes import (
    CONTEXT_MODES,
    Episode,
    GenerateOutput,
    chat_text,
    decode_response,
    encode,
    episodes_to_records,
    run_episodes,
    turn_message,
    user_prompt,
)
from agentrl.rollout.generation import (
    FingerprintCapture,
    decoder_layers,
    hf_generate_fn,
    truncated_forward_fingerprints,
)

__all__ = [
    "CONTEXT_MODES",
    "Episode",
    "GenerateOutput",
    "chat_text",
    "decode_response",
    "encode",
    "user_prompt",
    "episodes_to_records",
    "run_episodes",
    "turn_message",
    "FingerprintCapture",
    "decoder_layers",
    "hf_generate_fn",
    "truncated_forward_fingerprints",
]
