"""Rollout correction (agentrl/losses/correction.py) against hand-worked weights and metrics, for
every registered mode, the bounds, the veto and an unscored (NaN) behaviour log-prob.

Runtime: < 1 s.
"""

from __future__ import annotations

import math

import pytest
import torch

from agentrl import losses
from agentrl.losses import CorrectionSettings, correction_weights

L2, L4 = math.log(2.0), math.log(4.0)
NAN = float("nan")


def _inputs():
    # 2 rows x 3 tokens; learner - behaviour per token:
    #   row 0: ln 2, -ln 2, ln 4             (token ratios 2, 0.5, 4)
    #   row 1: -ln 4, NaN (unscored), masked (token ratios 0.25, 1, 1)
    learner = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    diff = torch.tensor([[L2, -L2, L4], [-L4, 0.0, 5.0]])
    behaviour = learner - diff
    behaviour[1, 1] = NAN
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    return learner, behaviour, mask


def _w(mode, **kw) -> torch.Tensor:
    return correction_weights(*_inputs(), CorrectionSettings(mode=mode, **kw)).weights


def _mean(c, name) -> float:
    s, n = c.means[name]
    return (s / n).item()


def test_the_registered_modes():
    assert losses.rollout_correction_names() == ["geometric_mask", "geometric_truncate", "none", "sequence_mask",
                                                 "sequence_truncate", "token_mask", "token_truncate"]
    with pytest.raises(ValueError, match="rollout correction 'token_mask' is already registered"):
        losses.register_rollout_correction("token_mask")(lambda d, m, s: None)
    with pytest.raises(KeyError, match="unknown rollout correction 'token' .did you mean 'token_mask'..; registered: geometric_mask"):
        losses.get_rollout_correction("token")


@pytest.mark.parametrize("mode, kw, want", [
    # no correction: every weight 1, at the masked position too
    ("none", {}, [[1, 1, 1], [1, 1, 1]]),
    # token ratios 2, 0.5, 4 / 0.25, 1 (NaN -> d 0), 1 (masked -> d 0); C_max 3 clamps the 4
    ("token_truncate", {}, [[2, 0.5, 3], [0.25, 1, 1]]),
    # and C_min 0.3 lifts the 0.25
    ("token_truncate", dict(clip_min=0.3), [[2, 0.5, 3], [0.3, 1, 1]]),
    # no bounds: the raw ratios
    ("token_truncate", dict(clip_max=None), [[2, 0.5, 4], [0.25, 1, 1]]),
    # mask: the 4 (> 3) is set to 0
    ("token_mask", {}, [[2, 0.5, 0], [0.25, 1, 1]]),
    ("token_mask", dict(clip_min=0.3), [[2, 0.5, 0], [0, 1, 1]]),
    # sequence: row 0 exp(ln 2 - ln 2 + ln 4) = 4 -> 3; row 1 exp(-ln 4 + 0) = 0.25
    ("sequence_truncate", {}, [[3, 3, 3], [0.25, 0.25, 0.25]]),
    ("sequence_truncate", dict(clip_max=5.0, clip_min=0.5), [[4, 4, 4], [0.5, 0.5, 0.5]]),
    ("sequence_mask", {}, [[0, 0, 0], [0.25, 0.25, 0.25]]),
    ("sequence_mask", dict(clip_max=5.0, clip_min=0.5), [[4, 4, 4], [0, 0, 0]]),
    # geometric: row 0 exp(ln 4 / 3) = 4^(1/3) = 1.587401; row 1 exp(-ln 4 / 2) = 0.5 (2 loss tokens)
    ("geometric_truncate", {}, [[4 ** (1 / 3)] * 3, [0.5] * 3]),
    ("geometric_truncate", dict(clip_max=1.5, clip_min=0.6), [[1.5] * 3, [0.6] * 3]),
    ("geometric_mask", {}, [[4 ** (1 / 3)] * 3, [0.5] * 3]),
    ("geometric_mask", dict(clip_max=1.5), [[0] * 3, [0.5] * 3]),
    # veto 0.3: row 1 has a token ratio 0.25 < 0.3 -> all its weights 0; row 0's smallest is 0.5
    ("token_truncate", dict(veto=0.3), [[2, 0.5, 3], [0, 0, 0]]),
    ("sequence_truncate", dict(veto=0.3), [[3, 3, 3], [0, 0, 0]]),
    # veto 0.2: nothing below it
    ("token_mask", dict(veto=0.2), [[2, 0.5, 0], [0.25, 1, 1]]),
    # veto with no correction: only the vetoed row changes
    ("none", dict(veto=0.3), [[1, 1, 1], [0, 0, 0]]),
])
def test_weights_by_hand(mode, kw, want):
    w = _w(mode, **kw)
    assert w.dtype == torch.float32 and w.shape == (2, 3) and not w.requires_grad
    assert w.tolist() == [[pytest.approx(x, abs=1e-6) for x in r] for r in want]


def test_metrics_of_token_truncate_by_hand():
    c = correction_weights(*_inputs(), CorrectionSettings(mode="token_truncate"))
    # k3 = r - ln r - 1 over the 4 scored loss tokens (the NaN one left out):
    #   (2 - ln 2 - 1) + (0.5 + ln 2 - 1) + (4 - ln 4 - 1) + (0.25 + ln 4 - 1) = 6.75 - 4 = 2.75; / 4
    assert _mean(c, "correction/mismatch_k3") == pytest.approx(2.75 / 4, abs=1e-6)
    # units: the 5 loss tokens, weights 2, 0.5, 3, 0.25, 1: sum 6.75, sum of squares 14.3125
    # ESS = 6.75^2 / (5 x 14.3125) = 45.5625 / 71.5625
    assert _mean(c, "correction/ess") == pytest.approx(45.5625 / 71.5625, abs=1e-6)
    assert _mean(c, "correction/weight_mean") == pytest.approx(6.75 / 5, abs=1e-6)
    assert _mean(c, "correction/truncated_frac") == pytest.approx(1 / 5)  # the 4
    assert _mean(c, "correction/masked_frac") == 0.0
    assert _mean(c, "correction/vetoed_frac") == 0.0
    kind, v = c.extremes["correction/weight_max"]
    assert kind == "max" and v.tolist() == [pytest.approx(3.0), pytest.approx(1.0)]  # row 1: 0.25, 1
    assert c.per_row is None


def test_mismatch_k3_by_hand():
    # one row, d = ln 2, ln 4: (2 - ln 2 - 1) + (4 - ln 4 - 1) = 4 - 3 ln 2 = 1.920558, over 2 tokens
    learner = torch.tensor([[0.0, 0.0]])
    c = correction_weights(learner, torch.tensor([[-L2, -L4]]), torch.ones(1, 2), CorrectionSettings())
    assert _mean(c, "correction/mismatch_k3") == pytest.approx((4 - 3 * L2) / 2, abs=1e-6)


def test_only_loss_tokens_count_as_truncated():
    # bounds [1.5, 3]: loss-token ratios 2, 0.5, 4, 0.25, 1 -> 0.5, 4, 0.25, 1 truncated (4 of 5);
    # the masked token's ratio 1 is outside too but is no unit
    c = correction_weights(*_inputs(), CorrectionSettings(mode="token_truncate", clip_min=1.5))
    assert _mean(c, "correction/truncated_frac") == pytest.approx(4 / 5)


def test_metrics_of_sequence_mask_by_hand():
    c = correction_weights(*_inputs(), CorrectionSettings(mode="sequence_mask", clip_min=0.5, veto=0.3))
    # rows are the units: row 0 ratio 4 > 3 -> masked; row 1 ratio 0.25 < 0.5 -> masked; row 1
    # also vetoed (token ratio 0.25 < 0.3)
    assert _mean(c, "correction/masked_frac") == 1.0
    assert _mean(c, "correction/truncated_frac") == 0.0
    assert _mean(c, "correction/vetoed_frac") == 0.5
    # every weight 0: sum of squares 0 -> ESS 0 (nothing effective), weight mean 0
    assert _mean(c, "correction/ess") == 0.0
    assert _mean(c, "correction/weight_mean") == 0.0
    assert c.per_row.shape == (2, 1)


def test_ess_of_row_weights_by_hand():
    c = correction_weights(*_inputs(), CorrectionSettings(mode="sequence_truncate"))
    # 2 rows, weights 3 and 0.25: (3.25)^2 / (2 x (9 + 0.0625)) = 10.5625 / 18.125
    assert _mean(c, "correction/ess") == pytest.approx(10.5625 / 18.125, abs=1e-6)
    assert _mean(c, "correction/truncated_frac") == 0.5
    assert c.per_row.flatten().tolist() == [pytest.approx(3.0), pytest.approx(0.25)]
    assert c.extremes["correction/weight_max"][1].tolist() == [pytest.approx(3.0), pytest.approx(0.25)]


def test_equal_sampler_gives_weight_one_everywhere():
    # behaviour = learner: d = 0 at every token, so every mode's weight is exactly 1 and the
    # mismatch 0, the ESS 1
    learner = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    for mode in losses.rollout_correction_names():
        c = correction_weights(learner, learner.clone(), mask, CorrectionSettings(mode=mode, clip_min=0.5, veto=0.1))
        assert bool((c.weights == 1.0).all()), mode
        assert _mean(c, "correction/mismatch_k3") == 0.0 and _mean(c, "correction/ess") == pytest.approx(1.0)


def test_a_row_without_loss_tokens_and_extreme_ratios_stay_finite():
    # row 1 has no loss token: no unit, NaN in the per-row max (skipped by the trainer); row 0's
    # log-ratio 100 is clamped to 20 before the exponential: e^20 > 3, masked, finite
    learner = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    behaviour = torch.tensor([[-100.0, 0.0], [-50.0, NAN]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    c = correction_weights(learner, behaviour, mask, CorrectionSettings(mode="sequence_mask"))
    assert c.weights.tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert _mean(c, "correction/masked_frac") == 1.0  # 1 row with loss tokens, masked
    v = c.extremes["correction/weight_max"][1]
    assert v[0].item() == 0.0 and math.isnan(v[1].item())
    c = correction_weights(learner, behaviour, mask, CorrectionSettings(mode="token_truncate", clip_max=None))
    assert c.weights[0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-6)
    # a row's sum is clamped too: 15 + 15 = 30 -> 20
    c = correction_weights(learner, torch.full((2, 2), -15.0), mask,
                           CorrectionSettings(mode="sequence_truncate", clip_max=None))
    assert c.weights[0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-6)
    assert all(math.isfinite((s / n).item()) for s, n in c.means.values())


def test_the_weights_are_detached():
    learner, behaviour, mask = _inputs()
    learner.requires_grad_()
    c = correction_weights(learner, behaviour, mask, CorrectionSettings(mode="token_truncate"))
    assert not c.weights.requires_grad
