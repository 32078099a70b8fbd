"""The suite's statistics (Holm, GRPO-equivalent batch), the race, and ``agentrl truth``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from agentrl_envs.mdp import MDPConfig

from agentrl.arena_stats import holm, holm_verdicts, normal_p
from agentrl.cli import main as cli_main
from agentrl.truth.__main__ import main as truth_main
from agentrl.truth.race import Adam, RaceSettings, run, threshold
from agentrl.truth.score import grpo_equivalent, parse_contender


def test_holm_adjusted_p_values():
    # sorted: 0.01, 0.03, 0.04 (m = 3) -> 3 * 0.01 = 0.03; max(0.03, 2 * 0.03) = 0.06;
    # max(0.06, 1 * 0.04) = 0.06. NaN is left out of m.
    adj = holm({"a": 0.04, "b": 0.01, "c": 0.03, "d": float("nan")})
    assert adj["b"] == pytest.approx(0.03) and adj["c"] == pytest.approx(0.06) and adj["a"] == pytest.approx(0.06)
    assert math.isnan(adj["d"])
    assert holm({"a": 0.6, "b": 0.5})["a"] == 1.0  # capped at 1


def test_holm_verdicts_resolved_both_ways():
    # m = 3 ("none" has no s.e.). d/se = +4 and -4: p = erfc(4/sqrt 2) = 6.3e-5 each; the first
    # gets 3p, the second max(3p, 2p) = 3p -> both < 0.05; d/se = 1: p = 0.317, x1 -> 0.317:
    # not resolved
    v = holm_verdicts({"up": (0.4, 0.1), "down": (-0.4, 0.1), "flat": (0.1, 0.1), "none": (0.2, None)})
    assert v["up"][0] == "better" and v["down"][0] == "worse" and v["flat"][0] == "not resolved"
    assert v["none"][0] == "n/a"
    assert v["flat"][1] == pytest.approx(normal_p(0.1, 0.1)) == pytest.approx(0.3173, abs=1e-4)
    assert v["up"][1] == pytest.approx(3 * math.erfc(4 / math.sqrt(2)))
    # three comparisons at z = 2.2 (p = 0.0278 each): alone each is below 0.05, Holm makes the
    # smallest 3 x 0.0278 = 0.083: none resolved
    three = holm_verdicts({k: (2.2, 1.0) for k in "abc"})
    assert {x[0] for x in three.values()} == {"not resolved"}


def test_grpo_equivalent_interpolates_on_log2():
    by_m = {1: 0.4, 2: 0.5, 4: 0.7, 8: 0.8}
    assert grpo_equivalent(0.5, by_m) == pytest.approx(2.0)
    assert grpo_equivalent(0.6, by_m) == pytest.approx(2 ** 1.5)  # halfway between m=2 and m=4 in log2
    assert grpo_equivalent(0.3, by_m) == 0.0  # GRPO's own batch does better
    assert grpo_equivalent(0.4, by_m) == 1.0  # GRPO itself
    assert grpo_equivalent(0.9, by_m) is None  # beyond the largest multiple
    assert grpo_equivalent(0.8, by_m) == pytest.approx(8.0)  # exactly the largest multiple's cosine: reached


def test_adam_first_step_is_lr_times_sign():
    # bias-corrected first moments: m_hat = g, v_hat = g^2 -> step = lr * g / (|g| + eps)
    opt = Adam((3,), lr=0.5)
    np.testing.assert_allclose(opt.step(np.array([2.0, -0.1, 0.0])), [0.5, -0.5, 0.0], atol=1e-6)


def test_race_learns_a_bandit_and_threshold():
    cfg = MDPConfig(depth=1, horizon=1, moves=3, distractors=0, invalid=0, trap=0.0, recurrence=0.0, tasks=1)
    r = run(cfg, 0, parse_contender("rloo"), RaceSettings(steps=25, B=1, G=8, lr=0.3))
    assert r["J_opt"] == 1.0 and r["J"][-1] > 0.9 > r["J"][0]
    assert threshold(0.2, 1.0) == pytest.approx(0.92)


def test_truth_quick_writes_reproducible_results(tmp_path, capsys):
    out1, out2 = tmp_path / "a", tmp_path / "b"
    assert truth_main(["--quick", "--out", str(out1), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "GRPO batch needed" in text and "| gigpo |" in text and "Race on `recurrent`" in text
    assert cli_main(["truth", "--quick", "--out", str(out2), "--workers", "2"]) == 0
    a, b = (json.loads((o / "truth.json").read_text()) for o in (out1, out2))
    for r in (a, b):
        r.pop("time_s")
        r["settings"].pop("workers")
    assert a == b  # bit for bit, whatever the number of processes
    for f in ("truth.md", "cos_vs_G.png", "race.png", "cos_vs_G_loglinear.png", "race_loglinear.png"):
        assert (out1 / f).stat().st_size > 0
    assert set(a["not_runnable"]) == {"shared", "ccpo", "ccpo_bonus", "sepo"}
    for policy in ("tabular", "loglinear"):
        gr = a["scores"][policy]["recurrent"]["by_G"]["8"]["grpo"]
        assert 0 < gr["cos"]["mean"] < 1 and gr["cos"]["se"] > 0
        assert a["scores"][policy]["recurrent"]["grpo_equivalent"]["grpo"] == 1.0
        assert set(a["scores"][policy]["tree"]["cos_diff"]) == {"gigpo", "rtmc"}
    assert a["settings"]["lr"] == {"tabular": 0.3, "loglinear": 0.1} and a["settings"]["truth_gamma"] == 1.0
    assert "## Under the log-linear policy" in text and "Race on `recurrent`" in text
    # a reused folder is refused, in one line
    capsys.readouterr()
    assert truth_main(["--quick", "--out", str(out1)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds results" in err


@pytest.mark.parametrize("argv,msg", [
    (["--families", "forest"], "unknown MDP family 'forest'"),
    (["--estimators", "grpo,nope"], "unknown credit estimator 'nope'"),
    (["--Gs", "1,8"], "group sizes [1, 8] must be >= 2"),
    (["--race-estimators", "gigpo"], "needs the baseline 'grpo'"),
    (["--seeds", "0"], "seeds=0 must be >= 1"),
])
def test_truth_bad_input_is_one_line(tmp_path, capsys, argv, msg):
    assert truth_main(["--quick", "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err
    assert not (tmp_path / "x").exists()
