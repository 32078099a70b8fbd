"""Text and token helpers shared by the contexts, the env batches, SFT and eval.

Nothing here holds state: the chat template rendered as text, tokenized once (``chat_text`` +
``encode``); the env's own prompt builders (``user_prompt``, ``turn_message``; they live in
``agentrl_envs.prompts``, where the OpenEnv server calls them too); a completion decoded the way
the env must see it (``decode_response``); and the chat template cut into pieces so that an env
turn can be appended to a growing token sequence (``TurnTemplate``).
"""

from __future__ import annotations

from agentrl_envs.prompts import turn_message, user_prompt

__all__ = ["TurnTemplate", "chat_text", "cut_at_stop", "decode_response", "encode", "turn_message",
           "user_prompt"]

# Markers used to cut the chat template into reusable pieces (TurnTemplate).
_U_MARK = "\x00AGENTRL_USER\x00"
_A_MARK = "\x00AGENTRL_ASSISTANT\x00"


def chat_text(tokenizer, user_text: str) -> str:
    """One user turn + the assistant header, rendered by the tokenizer's chat template."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
    )


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` with no special tokens added (the template already has them)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def decode_response(tokenizer, ids: list[int]) -> str:
    """Completion text as the env sees it. Special tokens are kept (a tokenizer may make
    ``</action>`` special, as the tiny models do) except EOS/pad and the chat-turn markers."""
    drop = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    text = tokenizer.decode([t for t in ids if t not in drop], skip_special_tokens=False)
    for tok_text in ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>"):
        text = text.replace(tok_text, "")
    return text


class TurnTemplate:
    """The chat template cut into pieces so that an env turn can be appended as tokens.

    For ChatML: after the assistant's action comes ``<|im_end|>\\n`` (``close``), then
    ``<|im_start|>user\\n`` + obs + ``<|im_end|>\\n<|im_start|>assistant\\n`` (``open_user`` /
    ``close_user``). Works for any template whose rendering of a longer conversation extends the
    rendering of a shorter one (true of ChatML, Qwen2.5, SmolLM2, Llama-3).
    """

    def __init__(self, tokenizer):
        msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _A_MARK}]
        base = tokenizer.apply_chat_template(msgs, tokenize=False)
        full = tokenizer.apply_chat_template(
            msgs + [{"role": "user", "content": _U_MARK}], tokenize=False, add_generation_prompt=True
        )
        if not full.startswith(base) or _U_MARK not in full or _A_MARK not in base:
            raise ValueError("trajectory mode needs a chat template whose renderings extend each other")
        self.close = base.split(_A_MARK, 1)[1]
        self.open_user, self.close_user = full[len(base):].split(_U_MARK, 1)
        eos = tokenizer.eos_token or ""
        # If the model's completion already ends with EOS, the close text must not repeat it.
        self.close_after_eos = self.close[len(eos):] if eos and self.close.startswith(eos) else self.close

    def env_text(self, obs_msg: str, completion_ended_with_eos: bool, prefill: str) -> str:
        """What follows a model turn: end of the assistant turn, the user message, the next
        assistant header and the prefill."""
        close = self.close_after_eos if completion_ended_with_eos else self.close
        return close + self.open_user + obs_msg + self.close_user + prefill


def cut_at_stop(ids: list[int], tokenizer, stops: tuple[str, ...] | list[str]) -> list[int]:
    """``ids`` up to and including the token whose text (``decode_response``) completes the first stop string
    (unchanged when none occurs). transformers' ``generate`` cannot stop on strings without the
    tokenizer, which TRL does not pass it, so the turn is cut after generation; vLLM stops itself
    and its completions come back unchanged. Binary search over prefixes: once a prefix's text
    holds a stop string, every longer prefix's does."""
    if not stops or not ids:
        return ids

    def holds(k: int) -> bool:
        text = decode_response(tokenizer, ids[:k])
        return any(s in text for s in stops)

    if not holds(len(ids)):
        return ids
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return ids[:lo]
