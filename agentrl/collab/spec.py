"""A collaboration: an ordered list of roles, each with a prompt template and a policy name.

Sequential collaboration (arXiv 2603.21563 Sec. 2): role k sees the problem and the outputs of
roles 1..k-1 and writes its own; the last role's output is the team's answer. Which roles exist,
what each is told and which policy (set of weights) plays it is data, so a third role or a
different hand-off is a change of this spec, not of code. Two roles played by the same policy
name share weights (the one-model baseline).

Templates
    Plain text with placeholders ``{problem}`` and ``{<earlier role name>}``. A placeholder is a
    brace pair around an identifier that does NOT directly follow a letter, a backslash, ``}``,
    ``^`` or ``_``, so LaTeX such as ``\\boxed{}``, ``\\frac{a}{b}`` or ``x^{n}`` in a template is left alone, and
    ``{problem}`` after a space, newline or colon is filled in. Nothing else is substituted.

Counterfactuals
    ``counterfactual(c, "thinker")`` is the collaboration with that role removed (CCPO's
    tau^{neg i}, arXiv 2603.21563 App. C.1): every later role that reads the removed role's
    output switches to its ``without[removed]`` template, which must not read it. The final
    role cannot be removed (there would be no answer).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from agentrl_envs.tasks.math import remove_boxed

PLACEHOLDER = re.compile(r"(?<![A-Za-z\\}^_])\{([A-Za-z_]\w*)\}")
"""``{name}`` not glued to a preceding letter, backslash, ``}``, ``^`` or ``_`` (so ``\\boxed{x}``,
``\\frac{a}{b}`` and ``x^{n}`` hold none)."""

CLEANERS: dict[str, Callable[[str], str]] = {
    "none": lambda s: s,
    "strip": str.strip,
    "remove_boxed": lambda s: remove_boxed(s).strip(),
}
"""How a role's raw output is cleaned before later roles see it. ``remove_boxed`` deletes any
``\\boxed{...}`` (the Thinker must not hand over a final answer)."""


class CollabError(ValueError):
    """A collaboration spec that cannot run; the message is one line."""


@dataclass(frozen=True)
class Role:
    """One participant of a sequential collaboration."""

    name: str
    """Identifier; also the placeholder later roles use to read this role's output."""
    policy: str
    """Name of the policy (weights) that plays this role; equal names share weights."""
    template: str
    """User-message template (see the module doc for placeholders)."""
    system: str | None = None
    """Optional system message."""
    clean: str = "strip"
    """Key of ``CLEANERS`` applied to this role's output before later roles read it."""
    without: Mapping[str, str] = field(default_factory=dict)
    """Removed earlier role -> the template to use instead when that role is removed."""


@dataclass(frozen=True)
class Collaboration:
    """Roles in the order they act; the last one answers."""

    name: str
    """Name used in logs and recipes."""
    roles: tuple[Role, ...]
    """The roles, first to act first."""

    @property
    def policies(self) -> tuple[str, ...]:
        """Distinct policy names, in order of first appearance."""
        return tuple(dict.fromkeys(r.policy for r in self.roles))

    @property
    def final(self) -> Role:
        return self.roles[-1]

    def role(self, name: str) -> Role:
        for r in self.roles:
            if r.name == name:
                return r
        raise CollabError(
            f"collaboration {self.name!r}: no role {name!r}; roles: {', '.join(self.role_names)}"
        )

    @property
    def role_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.roles)


def placeholders(template: str) -> list[str]:
    """Placeholder names of a template, in order of appearance."""
    return PLACEHOLDER.findall(template)


def validate(c: Collaboration) -> Collaboration:
    """Check a spec; raise ``CollabError`` (one line) on the first problem, else return it."""
    where = f"collaboration {c.name!r}"
    if not c.roles:
        raise CollabError(f"{where}: needs at least one role")
    seen: list[str] = []
    for r in c.roles:
        w = f"{where}, role {r.name!r}"
        if not re.fullmatch(r"[A-Za-z_]\w*", r.name or ""):
            raise CollabError(f"{where}: role name {r.name!r} must be an identifier (letters, digits, _)")
        if r.name == "problem" or r.name in seen:
            raise CollabError(f"{w}: name is {'reserved' if r.name == 'problem' else 'used twice'}")
        if not r.policy:
            raise CollabError(f"{w}: policy name is empty")
        if r.clean not in CLEANERS:
            raise CollabError(f"{w}: clean={r.clean!r} must be one of {', '.join(CLEANERS)}")
        _check_template(w, r.template, ("problem", *seen))
        for removed, t in r.without.items():
            if removed not in seen:
                raise CollabError(
                    f"{w}: without[{removed!r}] names no earlier role; earlier: {', '.join(seen) or 'none'}"
                )
            _check_template(f"{w} without {removed!r}", t, ("problem", *(s for s in seen if s != removed)))
        seen.append(r.name)
    return c


def _check_template(where: str, template: str, allowed: tuple[str, ...]) -> None:
    if not isinstance(template, str) or not template.strip():
        raise CollabError(f"{where}: template is empty")
    for p in placeholders(template):
        if p not in allowed:
            raise CollabError(
                f"{where}: template reads {{{p}}}; it may read {', '.join('{' + a + '}' for a in allowed)}"
            )


def counterfactual(c: Collaboration, removed: str) -> Collaboration:
    """The collaboration without role ``removed``: later readers of it switch to ``without``."""
    validate(c)
    c.role(removed)
    if removed == c.final.name:
        raise CollabError(
            f"collaboration {c.name!r}: the final role {removed!r} cannot be removed (no answer)"
        )
    roles = []
    for r in c.roles:
        if r.name == removed:
            continue
        if removed in placeholders(r.template):
            if removed not in r.without:
                raise CollabError(
                    f"collaboration {c.name!r}, role {r.name!r}: reads {{{removed}}} but has no without[{removed!r}] template"
                )
            r = replace(r, template=r.without[removed])
        # a without-template that still reads the removed role cannot serve a second removal
        keep = {k: v for k, v in r.without.items() if k != removed and removed not in placeholders(v)}
        roles.append(replace(r, without=keep))
    return validate(Collaboration(f"{c.name}-without-{removed}", tuple(roles)))


# ============================================================================ prompts
def render(template: str, problem: str, outputs: Mapping[str, str]) -> str:
    """Fill a template's placeholders from the problem and earlier roles' (cleaned) outputs."""
    values = {"problem": problem, **outputs}

    def sub(m: re.Match) -> str:
        if m.group(1) not in values:
            raise CollabError(f"template reads {{{m.group(1)}}} but no such output was produced yet")
        return values[m.group(1)]

    return PLACEHOLDER.sub(sub, template)


def role_messages(role: Role, problem: str, outputs: Mapping[str, str]) -> list[dict[str, str]]:
    """Chat messages for ``role``: optional system message, then the rendered user message."""
    msgs = [{"role": "system", "content": role.system}] if role.system else []
    return msgs + [{"role": "user", "content": render(role.template, problem, outputs)}]


def clean_output(role: Role, text: str) -> str:
    """A role's raw output as later roles see it."""
    return CLEANERS[role.clean](text)


def run(
    c: Collaboration, problem: str, generate: Callable[[Role, list[dict[str, str]]], str]
) -> dict[str, dict[str, Any]]:
    """Play the roles in order with ``generate(role, messages) -> text`` (the caller samples
    from ``role.policy``). Returns ``{role: {"messages", "raw", "output"}}``; ``output`` is
    the cleaned text later roles saw, and the final role's ``raw`` is the team answer."""
    outputs: dict[str, str] = {}
    record: dict[str, dict[str, Any]] = {}
    for r in c.roles:
        msgs = role_messages(r, problem, outputs)
        raw = generate(r, msgs)
        outputs[r.name] = clean_output(r, raw)
        record[r.name] = {"messages": msgs, "raw": raw, "output": outputs[r.name]}
    return record


# ============================================================================ from a recipe
_ROLE_KEYS = tuple(f.name for f in fields(Role))


def from_dict(d: Mapping[str, Any]) -> Collaboration:
    """Build and validate a collaboration from a recipe mapping:
    ``{"name": ..., "roles": [{"name", "policy", "template", "system"?, "clean"?, "without"?}, ...]}``."""
    if not isinstance(d, Mapping):
        raise CollabError(f"collaboration spec must be a mapping, got {type(d).__name__}")
    extra = set(d) - {"name", "roles"}
    if extra:
        raise CollabError(f"collaboration spec: unknown key {sorted(extra)[0]!r}; keys: name, roles")
    name = str(d.get("name", "collaboration"))
    roles = []
    for i, rd in enumerate(d.get("roles") or []):
        if not isinstance(rd, Mapping):
            raise CollabError(f"collaboration {name!r}: role {i} must be a mapping")
        bad = set(rd) - set(_ROLE_KEYS)
        if bad:
            raise CollabError(
                f"collaboration {name!r}, role {i}: unknown key {sorted(bad)[0]!r}; keys: {', '.join(_ROLE_KEYS)}"
            )
        missing = [k for k in ("name", "policy", "template") if k not in rd]
        if missing:
            raise CollabError(f"collaboration {name!r}, role {i}: missing key {missing[0]!r}")
        roles.append(Role(**{**rd, "without": dict(rd.get("without") or {})}))
    return validate(Collaboration(name, tuple(roles)))


def to_dict(c: Collaboration) -> dict[str, Any]:
    """Inverse of ``from_dict`` (for recipes and checkpoints)."""
    return {
        "name": c.name,
        "roles": [
            {f: (dict(getattr(r, f)) if f == "without" else getattr(r, f)) for f in _ROLE_KEYS}
            for r in c.roles
        ],
    }
