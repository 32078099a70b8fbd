"""A collaboration from a recipe: the collab algorithm's kwargs, checked before anything loads.

Recipe keys (``AgentRLConfig``)::

    algorithm: collab
    algorithm_kwargs:
      collab: think_solve        # or a mapping {name, roles: [...]} (agentrl.collab.spec.from_dict)
      policies: lora             # shared | lora | full (agentrl.policies)
      role_schedule: blocks      # blocks: one role trains for role_block_steps steps, in role
      role_block_steps: 10       #   order (Thinker first); both: every role every rollout (with
                                 #   separate policies in role-ordered optimizer steps)
      models: {thinker: P}       # optional: roles on their own base model (agentrl.policies.separate)
    credit: ccpo                 # shared | ccpo | ccpo_bonus | sepo
    env_id: agentrl/MathAnswer-v0

``policies: shared`` gives every role one policy (the one-model baseline); ``lora`` and ``full``
keep the spec's policy names (``think_solve``: ``thinker`` and ``solver``). The top-level keys of
older recipes (``collab``, ``collab_policies``, ``role_schedule``, ``role_block_steps``,
``collab_models``, ``collab_rating_template``: ``OLD_KEYS``) are read as these kwargs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agentrl.registry import Param, resolve_params

from .spec import CollabError, Collaboration, from_dict, validate
from .think_solve import think_solve

BUILTIN = {"think_solve": think_solve}
"""Collaborations a recipe can name."""
SCHEDULES = ("blocks", "both")
COLLAB_CREDITS = ("shared", "ccpo", "ccpo_bonus", "sepo")
"""Credit modules that read collaboration records (``agentrl.credit.collab_records``)."""
SOLO_CREDITS = ("ccpo", "ccpo_bonus")
"""Credit modules that need the counterfactual solo rollouts."""
ENV_ID = "agentrl/MathAnswer-v0"
SHARED_POLICY = "shared"

PARAMS = {
    "collab": Param(None, "the collaboration: 'think_solve' or a mapping {name, roles: [{name, policy, template, "
                    "...}]} (agentrl.collab.spec)", "any"),
    "policies": Param("shared", "how the roles' policies are realised: 'shared' (one model plays every role), "
                      "'lora' (one LoRA adapter per policy on the shared base; use_peft), 'full' (a full copy of the "
                      "weights per policy)", "choice", ("shared", "lora", "full")),
    "role_schedule": Param("blocks", "'blocks': one role trains for role_block_steps optimizer steps, in role order "
                           "(Thinker first; arXiv 2603.21563 Thm. 4.1); 'both': every role on every rollout (one "
                           "shared policy: in the same steps; separate policies: in role-ordered steps, "
                           "steps_per_generation a multiple of gradient_accumulation_steps x roles)", "choice",
                           SCHEDULES),
    "role_block_steps": Param(10, "optimizer steps per role block (paper: 10)", "int", lo=1),
    "models": Param(None, "roles played by their own base model, {role: model path or hub id} (arXiv 2603.21563 "
                    "Table 3); the other roles use model_name_or_path; role_schedule blocks", "mapping"),
    "rating_template": Param(None, "SEPO's rating prompt with fields {me} {outcome} {problem} {thinker} {solver} "
                             "{share} {levels} (default: agentrl.credit.collab.RATING_TEMPLATE)", "any"),
}
"""The collab algorithm's kwargs (recipe key ``algorithm_kwargs``)."""
OLD_KEYS = {"collab": "collab", "collab_policies": "policies", "role_schedule": "role_schedule",
            "role_block_steps": "role_block_steps", "collab_models": "models",
            "collab_rating_template": "rating_template"}
"""Top-level keys of older recipes -> the kwarg each now is."""


@dataclass(frozen=True)
class CollabSettings:
    """The collab kwargs of a recipe, defaults filled in (``settings``)."""

    collab: Any
    policies: str
    role_schedule: str
    role_block_steps: int
    models: dict | None
    rating_template: str | None


def is_collab(cfg) -> bool:
    """Whether ``cfg`` runs the collab algorithm (its ``algorithm`` key)."""
    return getattr(cfg, "algorithm", None) == "collab"


def settings(cfg) -> CollabSettings:
    """The collab kwargs of ``cfg`` (CollabError on an unknown kwarg or a bad value)."""
    try:
        kw = resolve_params(PARAMS, getattr(cfg, "algorithm_kwargs", None), "algorithm 'collab'")
    except ValueError as e:
        raise CollabError(str(e)) from None
    if isinstance(kw["collab"], str) and kw["collab"].strip().startswith("{"):
        import json

        try:
            kw["collab"] = json.loads(kw["collab"])
        except json.JSONDecodeError as e:
            raise CollabError(f"algorithm_kwargs.collab must be a name or a mapping ({e.msg})") from None
    return CollabSettings(**kw)


def collaboration(spec: Any, policies: str = "shared") -> Collaboration:
    """The recipe's collaboration (a built-in name or a mapping) with its policy names."""
    if isinstance(spec, str):
        if spec not in BUILTIN:
            raise CollabError(f"collab {spec!r} is not a built-in collaboration; built-in: {', '.join(BUILTIN)} "
                              "(or give a mapping {name, roles})")
        c = BUILTIN[spec]()
    else:
        c = from_dict(spec)
    if policies == "shared":
        c = replace(c, roles=tuple(replace(r, policy=SHARED_POLICY) for r in c.roles))
    return validate(c)


def _answers_once(env_id: str) -> bool:
    """Whether ``env_id`` is registered with a ``MathAnswerEnv`` (or a subclass) as its entry point."""
    from agentrl_envs.math_answer import MathAnswerEnv
    from gymnasium.envs.registration import load_env_creator, registry

    spec = registry.get(env_id)
    if spec is None:
        return False
    try:
        entry = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(entry, type) and issubclass(entry, MathAnswerEnv)


def _check_role_ordered_steps(cfg, n_roles: int) -> None:
    """``role_schedule: both`` with separate policies trains the roles in turn, one role's rows per
    optimizer step (``agentrl.algorithms.role_steps``): a rollout must hold a whole number of optimizer
    steps per role, and a checkpoint must fall between rollouts (a resume mid-rollout would
    generate a new rollout where the uninterrupted run trains the buffered one's next role)."""
    spg, ga = cfg.steps_per_generation, cfg.gradient_accumulation_steps
    if spg % (ga * n_roles):
        raise CollabError(f"role_schedule: both with separate policies trains the {n_roles} roles in turn, one "
                          f"optimizer step each: steps_per_generation ({spg}) must be a multiple of "
                          f"gradient_accumulation_steps ({ga}) x {n_roles}, e.g. steps_per_generation: {ga * n_roles}")
    per_rollout = spg * cfg.num_iterations // ga
    if cfg.save_strategy == "steps" and cfg.save_steps % per_rollout:
        raise CollabError(f"role_schedule: both with separate policies: save_steps ({cfg.save_steps:g}) must be a "
                          f"multiple of the optimizer steps per rollout ({per_rollout}) so checkpoints fall between "
                          "rollouts")


def _check_role_models(cfg, s: CollabSettings, c: Collaboration) -> None:
    """``models``: roles on their own base model (``agentrl.policies.separate``)."""
    models = s.models
    if s.policies == "shared":
        raise CollabError("collab models give roles their own policies: set policies: full (every weight) "
                          "or lora (an adapter per model)")
    for name, path in models.items():
        if name not in c.role_names:
            raise CollabError(f"collab models name role {name!r}; the roles are {', '.join(c.role_names)}")
        if not isinstance(path, str) or not path:
            raise CollabError(f"collab models: role {name!r} needs a model path or hub id, got {path!r}")
    main = [r for r in c.roles if r.name not in models]
    if not main:
        raise CollabError("collab models give every role its own model: leave one role on model_name_or_path")
    shared = {r.policy for r in main} & {c.role(n).policy for n in models}
    if shared:
        raise CollabError(f"collab models: policy {sorted(shared)[0]!r} is played by a role on its own model and by "
                          "a role on model_name_or_path: give the roles separate policies")
    if s.role_schedule != "blocks":
        raise CollabError("collab models train one role per rollout: set role_schedule: blocks")
    if cfg.beta != 0:
        raise CollabError(f"collab models have no reference model per role model: set beta: 0 (got {cfg.beta:g})")


def check_config(cfg) -> Collaboration | None:
    """The collaboration of ``cfg`` (None when it runs another algorithm); CollabError (one line)
    when the collab kwargs, the credit module, the env and the policies do not fit together."""
    if not is_collab(cfg):
        return None
    s = settings(cfg)
    if not s.collab:
        if cfg.credit in COLLAB_CREDITS:
            raise CollabError(f"credit {cfg.credit!r} credits the roles of a collaboration: set algorithm: collab, "
                              f"algorithm_kwargs: {{collab: think_solve}} and env_id: {ENV_ID}")
        raise CollabError("algorithm collab needs a collaboration: algorithm_kwargs: {collab: think_solve} "
                          "(or a mapping {name, roles})")
    c = collaboration(s.collab, s.policies)
    if cfg.credit not in COLLAB_CREDITS:
        raise CollabError(f"algorithm collab: credit must be one of {', '.join(COLLAB_CREDITS)}, got {cfg.credit!r}")
    if not _answers_once(cfg.env_id):
        raise CollabError(f"algorithm collab: env_id must be {ENV_ID} (one graded answer) or an env built on it, "
                          f"got {cfg.env_id!r}")
    _check_credit(cfg, c)
    _check_policies(cfg, s, c)
    if cfg.valid_action_reward:
        raise CollabError("algorithm collab: valid_action_reward must be 0 (it would shift R_joint and R_solo)")
    if s.role_schedule == "both" and len(c.policies) > 1:
        _check_role_ordered_steps(cfg, len(c.roles))
    if s.models:
        _check_role_models(cfg, s, c)
    _check_blocks(cfg, s)
    return c


def _check_credit(cfg, c: Collaboration) -> None:
    if cfg.credit != "shared" and len(c.roles) != 2:
        raise CollabError(f"credit {cfg.credit!r} credits two roles; collaboration {c.name!r} has {len(c.roles)} "
                          "(use credit: shared)")
    if cfg.credit in SOLO_CREDITS:
        from .spec import counterfactual

        counterfactual(c, c.roles[0].name)  # the final role needs its without-template
    scale = (cfg.env_kwargs or {}).get("scale", "01")
    if cfg.credit == "sepo" and scale != "pm1":
        raise CollabError("credit 'sepo' anchors on a +-1 verifier: set env_kwargs: {scale: pm1}")
    if cfg.credit == "ccpo_bonus" and scale in ("01", "pm1"):
        from agentrl.credit.collab import PARAMS as CREDIT_PARAMS
        from agentrl.credit.collab import check_bonus_threshold

        try:
            check_bonus_threshold((cfg.credit_kwargs or {}).get("threshold",
                                                                CREDIT_PARAMS["ccpo_bonus"]["threshold"].default), scale)
        except ValueError as e:
            raise CollabError(str(e)) from None


def _check_policies(cfg, s: CollabSettings, c: Collaboration) -> None:
    if s.policies == "lora" and not cfg.use_peft:
        raise CollabError("policies: lora trains one LoRA adapter per policy: set use_peft: true")
    if s.policies == "full" and cfg.use_peft:
        raise CollabError("policies: full trains every weight of each policy: set use_peft: false (or policies: lora)")
    if cfg.use_vllm and len(c.policies) > 1:
        raise CollabError("use_vllm holds one set of weights per step; separate policies generate with "
                          "transformers (use_vllm: false) or share one policy (policies: shared)")


def _check_blocks(cfg, s: CollabSettings) -> None:
    generate_every = cfg.steps_per_generation * cfg.num_iterations
    if s.role_schedule == "blocks" and (generate_every % cfg.gradient_accumulation_steps
                                        or s.role_block_steps % (generate_every // cfg.gradient_accumulation_steps)):
        raise CollabError(f"role_block_steps ({s.role_block_steps}) must be a multiple of the optimizer steps per "
                          f"rollout (steps_per_generation {cfg.steps_per_generation} x num_iterations "
                          f"{cfg.num_iterations} / gradient_accumulation_steps {cfg.gradient_accumulation_steps}): "
                          "a rollout's rows must all train one role")
