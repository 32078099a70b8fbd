"""Conditions from the command line (``--knobs``, ``--sweep``), the paired cosine differences and
their verdicts, and the discount-mismatch pairs."""

from __future__ import annotations

import json
import math

import pytest

from agentrl.truth.__main__ import main as truth_main
from agentrl.truth.conditions import build, common_knobs, parse_knobs, parse_sweep
from agentrl.truth.score import SeedScores, estimator_kwargs, parse_contender
from agentrl.truth.suite import gamma_mismatch, paired_cos_diffs


def test_knobs_and_sweeps_make_a_factorial_with_short_labels():
    kn = (parse_knobs("invalid=0,trap=0"), parse_knobs("invalid=1,penalty=0.1,trap=0"))
    conds = build(None, kn, (parse_sweep("recurrence=0,0.8"),))
    # 2 knob settings x 2 sweep values; trap=0 is shared, so the labels leave it out
    assert [c.label for c in conds] == ["invalid=0 recurrence=0", "invalid=0 recurrence=0.8",
                                        "invalid=1 penalty=0.1 recurrence=0", "invalid=1 penalty=0.1 recurrence=0.8"]
    assert common_knobs(conds) == "trap=0"
    cfg = conds[3].config
    assert (cfg.invalid, cfg.penalty, cfg.recurrence, cfg.trap, cfg.depth) == (1, 0.1, 0.8, 0, 4)
    # over a family, the family is the base and names the condition
    one = build(("long",), (parse_knobs("penalty=0"),))
    assert [c.label for c in one] == ["long penalty=0"] and one[0].config.depth == 6
    assert [c.label for c in build(None, (parse_knobs("slip=0.2"),))] == ["slip=0.2"]
    assert [c.label for c in build(("tree", "dense"), ())] == ["tree", "dense"]


@pytest.mark.parametrize("argv,msg", [
    (["--knobs", "colour=1"], "unknown MDP knob(s) ['colour']"),
    (["--knobs", "slip=1.5"], "MDP knob slip=1.5 must be a probability in [0, 1]"),
    (["--knobs", "recurrence"], "--knobs takes key=value, got 'recurrence'"),
    (["--knobs", "depth=9"], "horizon=8 must be >= depth=9"),
    (["--knobs", "moves=two"], "MDP knob moves='two' must be an integer >= 1"),
    (["--sweep", "slip=0.1,abc"], "MDP knob slip='abc' must be a probability"),
    (["--sweep", "slip=0,0.1", "--sweep", "trap=0", "--sweep", "alias=0"], "at most 2 --sweep knobs"),
    (["--knobs", "slip=0.1", "--sweep", "slip=0,0.2"], "knob(s) ['slip'] both set (--knobs) and swept"),
    (["--knobs", "slip=0.1", "--knobs", "slip=0.1"], "two conditions are the same"),
    (["--sweep", "slip=0.1", "--race-families", "recurrent"], "raced condition 'recurrent' is not scored"),
    (["--policies", "mlp"], "unknown policy 'mlp'"),
])
def test_bad_knobs_are_one_line_and_exit_2(tmp_path, capsys, argv, msg):
    assert truth_main(["--quick", "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err, err
    assert not (tmp_path / "x").exists()


def test_a_sweep_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "s"
    argv = ["--quick", "--out", str(out), "--workers", "1", "--knobs", "recurrence=0.8,invalid=0,distractors=0",
            "--sweep", "step_reward=0,0.2", "--policies", "tabular", "--race-seeds", "2", "--steps", "2"]
    assert truth_main(argv) == 0
    res = json.loads((out / "truth.json").read_text())
    labels = ["step_reward=0", "step_reward=0.2"]
    assert list(res["scores"]["tabular"]) == labels and list(res["race"]["tabular"]) == labels
    assert res["settings"]["common_knobs"] == "recurrence=0.8 invalid=0 distractors=0"
    conf = res["settings"]["conditions"]["step_reward=0.2"]
    assert (conf["step_reward"], conf["recurrence"], conf["invalid"], conf["trap"]) == (0.2, 0.8, 0, 0.1)
    md = (out / "truth.md").read_text()
    assert "Knobs every condition shares: `recurrence=0.8 invalid=0 distractors=0`" in md
    assert "| gigpo | " in md and "Race on `step_reward=0.2`" in md
    # scores only: no race asked for (two processes, none of them needed)
    assert truth_main([*argv, "--force", "--race-families", "", "--workers", "2"]) == 0
    res = json.loads((out / "truth.json").read_text())
    assert res["race"] == {"tabular": {}} and list(res["scores"]["tabular"]) == labels


def _seeds(cos: dict[str, list[float]]) -> list[SeedScores]:
    n = len(next(iter(cos.values())))
    return [SeedScores(i, cos={(8, lab): v[i] for lab, v in cos.items()}) for i in range(n)]


def test_paired_cosine_differences_by_hand():
    """Three MDP seeds. gigpo - grpo = (0.1, 0.1, 0.2): mean 2/15, sample sd sqrt(1/300), s.e.
    1/30, t = 4 on 2 df: two-sided p = 1 - 4 / sqrt(18) = 0.0572 (t on 2 df: p = 1 - |t| / sqrt(t^2
    + 2)). rtmc - grpo = (0.3, 0.31, 0.29): s.e. 0.01 / sqrt 3, t = 30 sqrt 3 = 51.96, p = 1 -
    51.96 / sqrt(2702) = 3.7e-4. salt = grpo: 0 +- 0, p = 1. Holm over 3: rtmc 3p = 0.0011
    (better), gigpo max(0.0011, 2 x 0.0572) = 0.114 (not resolved, though a normal p would give
    6e-5), salt 1. A copy of grpo up to rounding ("appo" here) reads 0 +- 0 too, not a resolved
    difference.
    (Holm's m is 4 with appo: rtmc 4p, gigpo 3p.)"""
    per = _seeds({"grpo": [0.4, 0.5, 0.6], "gigpo": [0.5, 0.6, 0.8], "rtmc": [0.7, 0.81, 0.89],
                  "salt": [0.4, 0.5, 0.6], "appo": [0.4 + 1e-16, 0.5 + 2e-16, 0.6 - 1e-16]})
    d = paired_cos_diffs(per, ["grpo", "gigpo", "rtmc", "salt", "appo"], 8)
    assert d["gigpo"]["mean"] == pytest.approx(2 / 15) and d["gigpo"]["se"] == pytest.approx(1 / 30)
    p_gigpo, p_rtmc = 1 - 4 / math.sqrt(18), 1 - 30 * math.sqrt(3) / math.sqrt(2702)
    assert d["rtmc"]["p_holm"] == pytest.approx(4 * p_rtmc) and d["rtmc"]["verdict"] == "better"
    assert d["gigpo"]["p_holm"] == pytest.approx(3 * p_gigpo) and d["gigpo"]["verdict"] == "not resolved"
    assert d["salt"] == d["appo"] == {"mean": 0.0, "se": 0.0, "verdict": "not resolved", "p_holm": 1.0}


def test_discount_mismatch_pairs_a_label_with_its_gamma_free_twin():
    # gigpo:gamma=0.95 - gigpo = (-0.1, -0.2): mean -0.15, s.e. 0.05; rtmc:gamma=0.9 has no twin
    per = _seeds({"grpo": [0.4, 0.5], "gigpo": [0.5, 0.7], "gigpo:gamma=0.95": [0.4, 0.5], "rtmc:gamma=0.9": [0.1, 0.2]})
    g = gamma_mismatch(per, ["grpo", "gigpo", "gigpo:gamma=0.95", "rtmc:gamma=0.9"], 8)
    assert list(g) == ["gigpo:gamma=0.95"] and g["gigpo:gamma=0.95"]["base"] == "gigpo"
    assert g["gigpo:gamma=0.95"]["mean"] == pytest.approx(-0.15) and g["gigpo:gamma=0.95"]["se"] == pytest.approx(0.05)


def test_estimators_run_at_the_truths_discount_unless_told():
    # the truth is undiscounted (gamma 1); a label's own gamma stays (that is the mismatch measured)
    assert estimator_kwargs(parse_contender("gigpo")) == {"gamma": 1.0}
    assert estimator_kwargs(parse_contender("rtmc:signature=history")) == {"gamma": 1.0, "signature": "history"}
    assert estimator_kwargs(parse_contender("gigpo:gamma=0.95")) == {"gamma": 0.95}
