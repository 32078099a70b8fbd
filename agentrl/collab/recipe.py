"""A collaboration from a recipe: the ``collab*`` and ``role_*`` keys, checked before anything loads.

Recipe keys (``AgentRLConfig``)::

    collab: think_solve          # or a mapping {name, roles: [...]} (agentrl.collab.spec.from_dict)
    collab_policies: lora        # shared | lora | full (agentrl.policies)
    role_schedule: blocks        # blocks: one role trains for role_block_steps steps, in role
    role_block_steps: 10         #   order (Thinker first); both: every role every rollout (with
                                 #   separate policies in role-ordered optimizer steps)
    credit: ccpo                 # shared | ccpo | ccpo_bonus | sepo
    collab_models: {thinker: P}  # optional: roles on their own base model (agentrl.policies.separate)
    env_id: agentrl/MathAnswer-v0

``collab_policies: shared`` gives every role one policy (the one-model baseline); ``lora`` and
``full`` keep the spec's policy names (``think_solve``: ``thinker`` and ``solver``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

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


def _check_role_models(cfg, c: Collaboration) -> None:
    """``collab_models``: roles on their own base model (``agentrl.policies.separate``)."""
    models = cfg.collab_models
    if cfg.collab_policies == "shared":
        raise CollabError("collab_models gives roles their own policies: set collab_policies: full (every weight) "
                          "or lora (an adapter per model)")
    for name, path in models.items():
        if name not in c.role_names:
            raise CollabError(f"collab_models names role {name!r}; the roles are {', '.join(c.role_names)}")
        if not isinstance(path, str) or not path:
            raise CollabError(f"collab_models: role {name!r} needs a model path or hub id, got {path!r}")
    main = [r for r in c.roles if r.name not in models]
    if not main:
        raise CollabError("collab_models gives every role its own model: leave one role on model_name_or_path")
    shared = {r.policy for r in main} & {c.role(n).policy for n in models}
    if shared:
        raise CollabError(f"collab_models: policy {sorted(shared)[0]!r} is played by a role on its own model and by "
                          "a role on model_name_or_path: give the roles separate policies")
    if cfg.role_schedule != "blocks":
        raise CollabError("collab_models trains one role per rollout: set role_schedule: blocks")
    if cfg.beta != 0:
        raise CollabError(f"collab_models has no reference model per role model: set beta: 0 (got {cfg.beta:g})")


def check_config(cfg) -> Collaboration | None:
    """The collaboration of ``cfg`` (None when ``collab`` is unset); CollabError (one line) when
    the collab keys, the credit module, the env and the policies do not fit together."""
    if not cfg.collab:
        if cfg.credit in COLLAB_CREDITS:
            raise CollabError(f"credit {cfg.credit!r} credits the roles of a collaboration: set collab "
                              f"(e.g. collab: think_solve) and env_id: {ENV_ID}")
        return None
    c = collaboration(cfg.collab, cfg.collab_policies)
    if cfg.credit not in COLLAB_CREDITS:
        raise CollabError(f"collab is set: credit must be one of {', '.join(COLLAB_CREDITS)}, got {cfg.credit!r}")
    if not _answers_once(cfg.env_id):
        raise CollabError(f"collab is set: env_id must be {ENV_ID} (one graded answer) or an env built on it, "
                          f"got {cfg.env_id!r}")
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
        from agentrl.credit.collab import PARAMS, check_bonus_threshold

        try:
            check_bonus_threshold((cfg.credit_kwargs or {}).get("threshold", PARAMS["ccpo_bonus"]["threshold"].default),
                                  scale)
        except ValueError as e:
            raise CollabError(str(e)) from None
    if cfg.collab_policies == "lora" and not cfg.use_peft:
        raise CollabError("collab_policies: lora trains one LoRA adapter per policy: set use_peft: true")
    if cfg.collab_policies == "full" and cfg.use_peft:
        raise CollabError("collab_policies: full trains every weight of each policy: set use_peft: false "
                          "(or collab_policies: lora)")
    if cfg.use_vllm and len(c.policies) > 1:
        raise CollabError("use_vllm holds one set of weights per step; separate policies generate with "
                          "transformers (use_vllm: false) or share one policy (collab_policies: shared)")
    if cfg.valid_action_reward:
        raise CollabError("collab is set: valid_action_reward must be 0 (it would shift R_joint and R_solo)")
    if cfg.role_schedule == "both" and len(c.policies) > 1:
        _check_role_ordered_steps(cfg, len(c.roles))
    if cfg.collab_models:
        _check_role_models(cfg, c)
    generate_every = cfg.steps_per_generation * cfg.num_iterations
    if cfg.role_schedule == "blocks" and (generate_every % cfg.gradient_accumulation_steps
                                          or cfg.role_block_steps % (generate_every // cfg.gradient_accumulation_steps)):
        raise CollabError(f"role_block_steps ({cfg.role_block_steps}) must be a multiple of the optimizer steps per "
                          f"rollout (steps_per_generation {cfg.steps_per_generation} x num_iterations "
                          f"{cfg.num_iterations} / gradient_accumulation_steps {cfg.gradient_accumulation_steps}): "
                          "a rollout's rows must all train one role")
    return c
