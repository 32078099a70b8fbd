"""The ``role`` context: one role's turn of a collaboration, played through ``run_episodes``.

A collaboration step (``agentrl.algorithms.collab_play``) plays each role as its own rollout on
the one-step ``agentrl/MathAnswer-v0`` env, with that role's policy generating. The task dict
carries what the role needs beyond the env's problem::

    {"seed", "options", "group_id", "traj_id",            # as every task
     "role": Role, "outputs": {earlier role: cleaned text}, "part": "joint" | "solo",
     "collab_id": str, "train": bool}

``first_prompt`` renders the role's template (``agentrl.collab.spec.role_messages``) from the
env's ``info["problem"]`` and ``outputs``; the counterfactual solo Solver is the same context
with the counterfactual's role (its ``without`` template) and no thought in ``outputs``.
``rows`` gives the role's one training row when ``train`` is set (the role being trained this
step), else none: counterfactuals and the inactive role carry no loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.rollout.contexts import Context, Row, register_context
from agentrl.rollout.prompts import encode

from .spec import Role, role_messages


@dataclass
class RoleTokens:
    """Per-episode state of ``role``: the role, what it reads, and its one turn."""

    role: Role
    """The role played (template, policy name)."""
    outputs: dict[str, str]
    """Earlier roles' cleaned outputs this role's template reads."""
    part: str = "joint"
    """'joint' (the collaboration) or 'solo' (a counterfactual rollout)."""
    collab_id: str = ""
    """Id of the collaboration this turn belongs to (shared by its roles and its solo twin)."""
    train: bool = False
    """Whether this turn becomes a training row."""
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    behaviour_logps: list[float] = field(default_factory=list)
    """The role's sampler's log-probs of ``completion_ids``."""


@register_context("role")
class RoleContext(Context):
    """One role's turn: its template from the task, one row when trained (module docstring)."""

    def new_state(self, task: dict[str, Any]) -> RoleTokens:
        if not isinstance(task.get("role"), Role):
            raise ValueError("context 'role' needs tasks with a 'role' (agentrl.collab.Role)")
        return RoleTokens(role=task["role"], outputs=dict(task.get("outputs") or {}),
                          part=str(task.get("part", "joint")), collab_id=str(task.get("collab_id", "")),
                          train=bool(task.get("train", False)))

    def first_prompt(self, envs, slot) -> list[int] | None:
        st: RoleTokens = slot.ep.tokens
        msgs = role_messages(st.role, slot.info.get("problem", slot.obs), st.outputs)
        text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        ids = encode(self.tokenizer, text + self.settings.prefill)
        return ids if len(ids) <= self.settings.max_prompt_tokens else None

    def next_prompt(self, envs, slot) -> list[int] | None:
        return None  # one turn per role

    def append_turn(self, slot, prompt: list[int], completion: list[int], logprobs: list[float]) -> None:
        slot.ep.tokens.prompt_ids = list(prompt)
        slot.ep.tokens.completion_ids = list(completion)
        slot.ep.tokens.behaviour_logps = list(logprobs)

    def rows(self, episode, advantages) -> list[Row]:
        st: RoleTokens = episode.tokens
        if not st.train or not st.completion_ids:
            return []
        (a,) = advantages
        c = st.completion_ids
        return [Row(prompt=st.prompt_ids, completion=c, loss_mask=[1] * len(c), adv=[float(a)] * len(c),
                    behaviour_logps=list(st.behaviour_logps))]
