"""Multi-turn rollouts: many text envs stepped in lock-step, one batched generate call per turn.

This module is framework-free (no TRL): the trainer, eval and the demo all drive it through a
``generate`` callable. ``run_episodes`` is the API agreed in ``.agent_notes/ROLLOUT_API.md``.

Context modes (DESIGN.md):

* ``window``: every step is its own prompt: the env's user message built by
  ``env.unwrapped.prompt(obs, info, history[-h:], step)`` (task + last h steps + current obs),
  rendered with the tokenizer's chat template, then the ``prefill`` text (``<action>``) right
  after the assistant header. The completion is the model's action tokens.
* ``trajectory``: one growing token sequence per episode. The model's tokens are kept exactly as
  generated; env turns (end of the assistant turn, a user message with the new observation, the
  next assistant header and the prefill) are tokenized once and appended with mask 0. History is
  never re-tokenized.

Robustness rules: a malformed response goes to the env (it applies its penalty, the episode goes
on); an over-long window prompt first drops history pairs, and if even h=0 does not fit (or a
trajectory outgrows the budget) the episode ends ``truncated``; an env that raises ends that
episode failed + truncated with ``error`` set. Nothing here raises on model output.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.actions import parse_action
from agentrl.recipe_file import first_line
from agentrl.records import StepRecord

CONTEXT_MODES = ("window", "trajectory")

# Markers used to cut the chat template into reusable pieces (trajectory mode).
_U_MARK = "\x00AGENTRL_USER\x00"
_A_MARK = "\x00AGENTRL_ASSISTANT\x00"


@dataclass
class GenerateOutput:
    """What a ``generate`` callable may return instead of a bare list of completions.

    ``fingerprints[i]`` is the hidden state of prompt i's last token (see ``fingerprint_layer``
    in ``AgentRLConfig``), or None when the generator does not capture it.
    """

    completion_ids: list[list[int]]
    fingerprints: list[list[float]] | None = None


GenerateFn = Callable[[list[list[int]]], "list[list[int]] | GenerateOutput"]


@dataclass
class Episode:
    """One rollout. ``steps`` are the StepRecords credit modules consume."""

    group_id: str
    traj_id: str
    steps: list[StepRecord] = field(default_factory=list)
    won: bool = False
    return_: float = 0.0
    length: int = 0
    truncated: bool = False
    task_family: str | None = None
    n_invalid: int = 0
    error: str | None = None
    """Message of the exception an env raised (the episode then ended failed + truncated)."""
    seed: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    # window mode: one (prompt, completion) token pair per step
    prompt_ids: list[list[int]] = field(default_factory=list)
    completion_ids: list[list[int]] = field(default_factory=list)
    # trajectory mode: initial prompt, then model/env tokens interleaved
    traj_prompt_ids: list[int] = field(default_factory=list)
    traj_completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    """1 = model token (trained), 0 = env token (masked out of the loss); aligned with
    ``traj_completion_ids``."""
    step_spans: list[tuple[int, int]] = field(default_factory=list)
    """[start, end) of each step's model tokens inside ``traj_completion_ids``."""


def chat_text(tokenizer, user_text: str) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
    )


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


class _TurnTemplate:
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
        close = self.close_after_eos if completion_ended_with_eos else self.close
        return close + self.open_user + obs_msg + self.close_user + prefill


def turn_message(env, obs: str, info: dict[str, Any], step: int) -> str:
    """Trajectory mode's user message for a later turn: the new observation (+ admissible
    actions where the env lists them). An env may define ``turn_prompt(obs, info, step)``."""
    fn = getattr(env, "turn_prompt", None)
    if callable(fn):
        return fn(obs, info, step)
    lines = [f"Observation: {obs}"]
    adm = info.get("admissible_actions")
    if adm:
        lines.append("Admissible actions: " + ", ".join(adm))
    return "\n".join(lines)


def probe_task(env_id: str, env_kwargs: dict[str, Any] | None, seed: int | None,
               options: dict[str, Any]) -> None:
    """Make the env and reset it once: bad env kwargs or reset options (split, families) raise a
    one-line ValueError here, instead of turning every episode of a run into an env error."""
    import gymnasium as gym

    try:
        env = gym.make(env_id, **(env_kwargs or {}))
    except Exception as e:
        raise ValueError(f"cannot make {env_id} with env_kwargs {env_kwargs}: {first_line(e)}") from None
    try:
        env.reset(seed=seed, options=options)
    except Exception as e:
        raise ValueError(f"cannot reset {env_id} with task options {options}: {first_line(e)}") from None
    finally:
        env.close()


@functools.cache
def _takes_history_length(env_cls: type) -> bool:
    """Whether ``env_cls.prompt`` accepts ``history_length`` (once per class: it is asked on
    every turn of every episode)."""
    try:
        params = inspect.signature(env_cls.prompt).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "history_length" or p.kind is p.VAR_KEYWORD for p in params)


def user_prompt(env, obs, info, history, step, h) -> str:
    recent = history[-h:] if h > 0 else []
    if _takes_history_length(type(env)):
        return env.prompt(obs, info, recent, step, history_length=h)
    return env.prompt(obs, info, recent, step)  # an env with only the contract's four arguments


@dataclass
class _Slot:
    ep: Episode
    env: Any
    obs: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    history: list[tuple[str, str]] = field(default_factory=list)
    t: int = 0
    active: bool = True
    pending_prompt: list[int] | None = None


def _end(slot: _Slot, truncated: bool, error: str | None = None) -> None:
    slot.active = False
    ep = slot.ep
    ep.truncated = ep.truncated or truncated
    if error is not None:
        ep.error = error
        ep.won = False
        ep.truncated = True
    if ep.steps:
        last = ep.steps[-1]
        last.done = True
        last.truncated = ep.truncated
        if ep.error:
            last.info["error"] = ep.error
    for r in ep.steps:
        r.won = ep.won
    try:
        slot.env.close()
    except Exception:
        pass


def run_episodes(
    env_id: str,
    tasks: Sequence[dict[str, Any]],
    generate: GenerateFn,
    tokenizer,
    env_kwargs: dict[str, Any] | None = None,
    context_mode: str = "window",
    history_length: int = 2,
    max_turns: int | None = None,
    max_prompt_tokens: int = 2048,
    prefill: str = "<action>",
    progress: bool = False,
    sync: Callable[[bool], bool] | None = None,
    dummy_prompt: list[int] | None = None,
    pad_batch: bool = False,
) -> list[Episode]:
    """Play one episode per task; return them in task order.

    Args:
        env_id: a registered gymnasium id (``agentrl/TextCraft-v0``; ``import envs`` registers).
        tasks: each ``{"seed": int, "options": dict, "group_id": str}`` (``traj_id`` optional).
        generate: batch of prompt token ids -> completion token ids (or a ``GenerateOutput``).
            Called exactly once per turn with the prompts of all active envs.
        tokenizer: HF tokenizer with a chat template.
        env_kwargs: passed to ``gymnasium.make``.
        context_mode: "window" or "trajectory" (module docstring).
        history_length: (obs, action) pairs in a window prompt (shrinks when over-long).
        max_turns: step cap per episode; default the env's ``max_episode_steps``.
        max_prompt_tokens: prompt budget; window: shrink history, then truncate; trajectory:
            the whole sequence so far must fit, else the episode ends truncated.
        prefill: text put after the assistant header; it is part of the env's response text.
        progress: tqdm bar over turns.
        sync: lock-step hook for distributed training: called once per turn with "this rank
            still has active episodes"; returns whether ANY rank has. While it returns True a
            rank with nothing left still calls ``generate`` (with ``dummy_prompt``), so every
            rank makes the same number of generate calls (ZeRO-3 gather / vLLM are collectives).
        dummy_prompt: prompt ids used for the filler row (default: the first task's first prompt).
        pad_batch: always call ``generate`` with ``len(tasks)`` prompts (finished slots filled
            with ``dummy_prompt``): needed where ranks must pass equal list lengths (vLLM server).
    """
    import gymnasium as gym

    import agentrl.envs  # noqa: F401  (registers agentrl/* ids)

    if context_mode not in CONTEXT_MODES:
        raise ValueError(f"context_mode must be one of {CONTEXT_MODES}, got {context_mode!r}")
    env_kwargs = dict(env_kwargs or {})
    tmpl = _TurnTemplate(tokenizer) if context_mode == "trajectory" else None
    eos_id = tokenizer.eos_token_id

    slots: list[_Slot] = []
    for i, task in enumerate(tasks):
        gid = str(task.get("group_id", f"g{i}"))
        ep = Episode(group_id=gid, traj_id=str(task.get("traj_id", f"{gid}/{i}")),
                     seed=task.get("seed"), options=dict(task.get("options") or {}))
        try:
            env = gym.make(env_id, **env_kwargs)
        except Exception as e:  # a bad env id / kwargs is a config error: surface it
            raise ValueError(f"cannot make env {env_id!r} with {env_kwargs}: {e}") from e
        slot = _Slot(ep=ep, env=env)
        slots.append(slot)
        try:
            slot.obs, slot.info = env.reset(seed=task.get("seed"), options=ep.options)
            ep.task_family = slot.info.get("task_family")
        except Exception as e:
            _end(slot, truncated=True, error=f"reset: {type(e).__name__}: {e}")
    if max_turns is None:
        spec_steps = [s.env.spec.max_episode_steps for s in slots if s.env.spec is not None]
        max_turns = max([m for m in spec_steps if m] or [30])

    def build_prompt(slot: _Slot) -> list[int] | None:
        u = slot.env.unwrapped
        if context_mode == "window":
            for h in range(max(history_length, 0), -1, -1):
                text = chat_text(tokenizer, user_prompt(u, slot.obs, slot.info, slot.history, slot.t, h)) + prefill
                ids = encode(tokenizer, text)
                if len(ids) <= max_prompt_tokens:
                    return ids
                if slot.t == 0 or not slot.history:
                    break  # no history to drop
            return None
        ep = slot.ep
        if slot.t == 0:
            text = chat_text(tokenizer, user_prompt(u, slot.obs, slot.info, [], 0, 0)) + prefill
            ep.traj_prompt_ids = encode(tokenizer, text)
        ids = ep.traj_prompt_ids + ep.traj_completion_ids
        return ids if len(ids) <= max_prompt_tokens else None

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_turns, desc="rollout turns", leave=False)
    turn = 0
    while True:
        active = []
        for s in slots:
            if not s.active:
                continue
            if s.t >= max_turns:
                _end(s, truncated=True)
                continue
            try:
                p = build_prompt(s)
            except Exception as e:  # the env's prompt builder failed: this episode ends, training goes on
                _end(s, truncated=True, error=f"prompt: {type(e).__name__}: {e}")
                continue
            if p is None:
                _end(s, truncated=True)
                continue
            s.pending_prompt = p
            active.append(s)
        go_on = sync(bool(active)) if sync is not None else bool(active)
        if not go_on:
            break
        prompts = [s.pending_prompt for s in active]
        if dummy_prompt is None:
            dummy_prompt = prompts[0] if prompts else encode(tokenizer, chat_text(tokenizer, "") + prefill)
        n_real = len(prompts)
        if pad_batch:
            prompts = prompts + [dummy_prompt] * (len(tasks) - n_real)
        elif not prompts:
            prompts = [dummy_prompt]
        out = generate(prompts)
        if isinstance(out, GenerateOutput):
            completions, fps = out.completion_ids, out.fingerprints
        else:
            completions, fps = out, None
        for j, s in enumerate(active):
            _apply_turn(s, list(completions[j]), fps[j] if fps is not None else None, tokenizer,
                        prefill, context_mode, tmpl, eos_id)
        turn += 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix(active=n_real)
    if bar is not None:
        bar.close()
    for s in slots:
        if s.active:
            _end(s, truncated=True)
    return [s.ep for s in slots]


def _apply_turn(s: _Slot, comp: list[int], fp, tokenizer, prefill, context_mode, tmpl, eos_id) -> None:
    ep = s.ep
    response = prefill + decode_response(tokenizer, comp)
    prev_info = s.info
    try:
        obs, reward, terminated, truncated, info = s.env.step(response)
    except Exception as e:
        # The step that raised is not recorded (there is no reward for it); the episode ends.
        _end(s, truncated=True, error=f"step: {type(e).__name__}: {e}")
        return
    action = info.get("action") or parse_action(response) or response
    valid = bool(info.get("action_valid", parse_action(response) is not None))
    rec = StepRecord(
        group_id=ep.group_id, traj_id=ep.traj_id, t=s.t, obs=s.obs, action=action,
        reward=float(reward), done=False, action_token_ids=list(comp),
        fingerprint=[float(x) for x in fp] if fp is not None else None,
        state_sig=prev_info.get("state_sig"), action_sig=info.get("action_sig"),
        task_family=ep.task_family, valid=valid, info={"prompt_tokens": len(s.pending_prompt or []), "response": response},
    )
    ep.steps.append(rec)
    ep.return_ += float(reward)
    ep.length += 1
    ep.n_invalid += int(not valid)
    ep.won = bool(info.get("won", ep.won))
    if context_mode == "window":
        ep.prompt_ids.append(list(s.pending_prompt))
        ep.completion_ids.append(list(comp))
    else:
        start = len(ep.traj_completion_ids)
        ep.traj_completion_ids.extend(comp)
        ep.env_mask.extend([1] * len(comp))
        ep.step_spans.append((start, start + len(comp)))
    s.history.append((s.obs, action))
    s.obs, s.info = obs, info
    s.t += 1
    if terminated or truncated:
        _end(s, truncated=bool(truncated and not terminated))
        return
    if context_mode == "trajectory":
        ended_eos = bool(comp) and comp[-1] == eos_id
        try:
            message = turn_message(s.env.unwrapped, obs, info, s.t)
        except Exception as e:  # as above: the episode ends with what it has
            _end(s, truncated=True, error=f"turn prompt: {type(e).__name__}: {e}")
            return
        text = tmpl.env_text(message, ended_eos, prefill)
        env_ids = encode(tokenizer, text)
        ep.traj_completion_ids.extend(env_ids)
        ep.env_mask.extend([0] * len(env_ids))


def decode_response(tokenizer, ids: list[int]) -> str:
    """Completion text as the env sees it. Special tokens are kept (a tokenizer may make
    ``</action>`` special, as the tiny models do) except EOS/pad and the chat-turn markers."""
    drop = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    text = tokenizer.decode([t for t in ids if t not in drop], skip_special_tokens=False)
    for tok_text in ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>"):
        text = text.replace(tok_text, "")
    return text


def episodes_to_records(episodes: Sequence[Episode]) -> list[StepRecord]:
    """All step records of ``episodes`` in order (episode by episode, t ascending)."""
    return [r for ep in episodes for r in ep.steps]
