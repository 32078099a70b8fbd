"""Behaviour log-probs of a collaboration's roles: each role's turn carries its own policy's
sampler log-probs, equal to that policy's learner log-probs (CPU, fp32, same weights) to 1e-5 at
every model token, whether the roles share the trainer's model or the Thinker has its own
(``RoleModel.generate``). Runtime: ~20 s on 2 shared cores."""

from __future__ import annotations

import pytest
import torch
from test_collab_trainer import build, make_cfg

from agentrl.rollout.contexts import Row
from agentrl.rollout.rows import pack_rows
from agentrl.trainer.logprobs import completion_logps


def _gap(model, tok, st) -> float:
    """Largest |behaviour - learner| over the turn's tokens (none NaN), under ``model``."""
    n = len(st.completion_ids)
    mb = pack_rows([Row(st.prompt_ids, st.completion_ids, [1] * n, [0.0] * n, st.behaviour_logps)], tok.pad_token_id)
    with torch.no_grad():
        learner = completion_logps(model, mb)[0]
    behaviour = mb["behaviour_logps"]
    assert not bool(torch.isnan(behaviour).any())
    return float((behaviour - learner).abs().max())


@pytest.mark.parametrize("separate", [False, True])
def test_role_turns_carry_their_policys_logprobs(tmp_path, collab_model_dir, collab_other_model_dir, separate):
    kw = dict(collab_policies="full", collab_models={"thinker": collab_other_model_dir}) if separate \
        else dict(collab_policies="shared")
    tr = build(make_cfg(tmp_path, collab_model_dir, temperature=0.7, **kw))
    tr.model.train()
    batch = tr.make_iteration_batch([tr.train_dataset[i // 4] for i in range(8)])
    policies = tr.algorithm.policies
    roles = {}
    for ep in tr.last_rollout["episodes"]:
        st = ep.tokens
        if st.completion_ids:
            with policies.use(st.role.name):
                gap = _gap(policies.loss_model(st.role.name), policies.tokenizer(st.role.name), st)
            roles.setdefault(st.role.name, []).append(gap)
            assert ep.steps[0].behaviour_logps == st.behaviour_logps
    assert sorted(roles) == ["solver", "thinker"] and min(len(g) for g in roles.values()) >= 8
    assert max(max(g) for g in roles.values()) < 1e-5, roles
    # the trained role's rows carry them to the update: a value at every loss token, NaN elsewhere
    m = batch["loss_mask"].bool()
    assert not bool(torch.isnan(batch["behaviour_logps"][m]).any()) and bool(torch.isnan(batch["behaviour_logps"][~m]).all())
    assert not tr.correcting
