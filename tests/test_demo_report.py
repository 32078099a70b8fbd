"""The demo's seeds side by side (``agentrl.demo_report``): the aggregates against hand-computed
values, the verdict's two conditions, and bad folders refused in one line."""

from __future__ import annotations

import json
import math

import pytest

from agentrl.demo_report import main, meets, pooled, report, seed_row


def _measure(before: list[bool], after: list[bool]) -> dict:
    n = len(before)
    d = [float(a) - float(b) for a, b in zip(after, before, strict=True)]
    mean = sum(d) / n
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n)
    return {"before": {"success": 100 * sum(before) / n, "wins": before},
            "after": {"success": 100 * sum(after) / n, "wins": after}, "gain": 100 * mean, "gain_paired_se": 100 * se}


def _summary(seed: int, before: list[bool], after: list[bool], rates_before: list[float], rates_after: list[float]) -> dict:
    n = len(rates_before)
    return {"seed": seed, "design": "alfworld", "practised": _measure(before, after),
            "heldout": _measure([False, True, False, False], [False, True, True, False]),
            "practised_sampled": {"before": rates_before, "after": rates_after, "samples": 4,
                                  "gain": 100 * (sum(rates_after) - sum(rates_before)) / n, "gain_paired_se": 5.0},
            "timings": {"total_s": 2700.0},
            "memory": {"gauge": "rss", "phases": [
                {"phase": "sft", "cpu_seconds": 600.0, "rss_peak_gib": 4.9},
                {"phase": "eval", "cpu_seconds": 300.0, "rss_peak_gib": 5.8},
                {"phase": "rl", "cpu_seconds": 2100.0, "rss_peak_gib": 5.5}]}}


SEED0 = _summary(0, [True, False, False, False], [True, True, True, False], [0.5, 0.0, 0.25, 0.25], [1.0, 0.25, 0.25, 0.5])
SEED1 = _summary(1, [False, False, True, False], [False, False, True, False], [0.0, 0.25, 0.75, 0.0], [0.25, 0.25, 0.5, 0.0])


def test_pooled_pairs_every_game_of_every_seed():
    # greedy differences over the 8 games: 0,1,1,0 and 0,0,0,0: mean 0.25, sample variance 3/14
    g, se, n = pooled([SEED0, SEED1], "greedy")
    assert n == 8 and g == pytest.approx(25.0) and se == pytest.approx(100 * math.sqrt(3 / 14 / 8))
    # sampled: 0.5, 0.25, 0, 0.25 and 0.25, 0, -0.25, 0: mean 0.125, squared deviations 0.375 (7 d.o.f.)
    g, se, n = pooled([SEED0, SEED1], "sampled")
    assert g == pytest.approx(12.5) and se == pytest.approx(100 * math.sqrt(0.375 / 7 / 8))
    with pytest.raises(ValueError, match="unknown measure"):
        pooled([SEED0], "mean")


def test_meets_needs_both_the_points_and_the_ratio():
    assert meets(16.0, 5.0, 15.0, 3.0)
    assert not meets(16.0, 6.0, 15.0, 3.0)  # 2.7 s.e.
    assert not meets(14.0, 1.0, 15.0, 3.0)  # 14 s.e., under 15 points
    assert meets(25.0, 0.0, 15.0, 3.0)  # every game moved alike: no spread


def test_seed_row_and_report_read_the_summary():
    row = seed_row(SEED0)
    assert row["practised"][:3] == (25.0, 75.0, 50.0)
    assert row["practised"][3] == pytest.approx(100 * math.sqrt(1 / 3 / 4))
    assert row["sampled"][:3] == (25.0, 50.0, 25.0)
    assert row["wall_min"] == 45.0 and row["cpu_min"] == 50.0
    assert (row["peak_gib"], row["peak_phase"]) == (5.8, "eval")
    text = report([SEED1, SEED0])
    lines = text.splitlines()
    assert lines[2].startswith("| 0 | 25.0 -> 75.0 (+50.0, s.e. 28.9)") and lines[3].startswith("| 1 |")
    assert "over 2 seeds, greedy: +25.0 (s.e. across seeds 25.0)" in text
    assert "over 2 seeds, sampled: +12.5 (s.e. across seeds 12.5)" in text
    assert "pooled, greedy: +25.0 (paired s.e. 16.4, 8 games of 2 seeds; 1.5 s.e.)" in text
    assert "seed 0: greedy +50.0 = 1.7 s.e. (misses >= 15 points and > 3 s.e.); sampled +25.0 = 5.0 s.e. (meets" in text
    assert "seed 1: greedy +0.0 (no game moved; misses" in text


def test_cli_refuses_unfinished_and_repeated_seeds(tmp_path, capsys):
    for seed, s in ((0, SEED0), (1, SEED1)):
        (tmp_path / f"s{seed}").mkdir()
        (tmp_path / f"s{seed}" / "demo_summary.json").write_text(json.dumps(s))
    assert main([str(tmp_path / "s0"), str(tmp_path / "s1")]) == 0
    assert "pooled, sampled: +12.5" in capsys.readouterr().out
    (tmp_path / "running").mkdir()
    assert main([str(tmp_path / "s0"), str(tmp_path / "running")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "running: no demo_summary.json" in err[0]
    assert main([str(tmp_path / "s0"), str(tmp_path / "s0")]) == 2
    assert "a seed given twice" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "demo_summary.json").write_text("{not json")
    assert main([str(tmp_path / "bad")]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main([]) == 2
    assert "no seed folders given" in capsys.readouterr().err
    assert main([str(tmp_path / "s1")]) == 0  # one seed: no s.e. across seeds
    assert "over 1 seeds, greedy: +0.0 (s.e. across seeds -: one seed)" in capsys.readouterr().out
