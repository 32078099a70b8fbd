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

# generation imports torch: loaded on first use, so that env worker processes (which import
# agentrl.rollout.env_pool) stay torch-free and single-threaded
_GENERATION = ("FingerprintCapture", "decoder_layers", "hf_generate_fn", "truncated_forward_fingerprints")


def __getattr__(name: str):
    if name in _GENERATION:
        from agentrl.rollout import generation

        return getattr(generation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
