"""TRL 1.16's loss types agentrl added (cispo, sapo, luspo, vespo) and a plug-in surrogate with its
own ``loss_kwargs`` train end to end: two optimizer steps of the tiny model on the counting env.

Runtime: ~60 s on 2 cores (five short runs).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from test_trainer import _params, make_cfg, make_trainer


@pytest.mark.parametrize("loss_type, kw, metric", [
    ("cispo", dict(epsilon_high=5.0), "cispo_clip_ratio"),  # ScaleRL's eps_max
    ("sapo", dict(sapo_temperature_neg=1.2), "entropy"),
    ("luspo", dict(importance_sampling_level="sequence"), "clip_ratio/region_mean"),
    ("vespo", {}, "vespo/phi_seq_mean"),
])
def test_a_trl_loss_type_trains(tmp_path, tiny_model_dir, loss_type, kw, metric):
    cfg = make_cfg(tmp_path, tiny_model_dir, loss_type=loss_type, per_device_train_batch_size=4,
                   gradient_accumulation_steps=2, **kw)
    tr = make_trainer(cfg)
    assert tr.loss_name == loss_type
    before = _params(tr.model)
    tr.train()
    logged = [h["loss"] for h in tr.state.log_history if "loss" in h]
    assert len(logged) == 2 and all(math.isfinite(float(x)) for x in logged)
    assert any(not torch.equal(before[n], p.detach().float()) for n, p in tr.model.named_parameters())
    assert metric in {k for h in tr.state.log_history for k in h}


def test_a_plugin_surrogate_with_loss_kwargs_trains(tmp_path, tiny_model_dir, monkeypatch):
    # tests/fixtures/plugins/capped_pg.py registers a surrogate with a param; the recipe composes it
    # with a registered reduction and sets the param, no Algorithm subclass
    from agentrl.rollout.contexts import Row
    from agentrl.rollout.rows import pack_rows
    from agentrl.trainer.logprobs import completion_logps

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "fixtures" / "plugins"))
    cfg = make_cfg(tmp_path, tiny_model_dir, env_modules=["count_env", "capped_pg"], loss_type="capped_pg+token_mean",
                   loss_kwargs={"cap": 0.5}, max_steps=1)
    tr = make_trainer(cfg)
    assert tr.loss_options == {"cap": 0.5} and tr.groups_rows_by_length()  # token_mean is split invariant
    before = _params(tr.model)
    tr.train()
    assert any(not torch.equal(before[n], p.detach().float()) for n, p in tr.model.named_parameters())
    # through the trainer on a hand-built micro-batch: advantages 0.7 and -0.2 capped at 0.5 and
    # -0.2; -(0.5 logp00 + 0.5 logp01 - 0.2 logp10) / 3 loss tokens
    mb = pack_rows([Row([5, 6], [8, 9], [1, 1], [0.7, 0.7]), Row([7], [11, 12], [1, 0], [-0.2, -0.2])],
                   tr.processing_class.pad_token_id)
    mb["num_items_in_batch"] = torch.tensor(3.0)
    tr.model.train()
    with torch.no_grad():
        logp = completion_logps(tr.model, mb)[0]
        got = tr._compute_loss(tr.model, mb)
    want = -(0.5 * logp[0, 0] + 0.5 * logp[0, 1] - 0.2 * logp[1, 0]) / 3
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
