"""agentrl.demo_summary: a demo run's summary pieces, against values worked by hand."""

import pytest

from agentrl.demo_summary import memory_line, sampled_summary


def test_sampled_summary_by_hand():
    # two games, shares won before/after: differences +25 and +50 points -> mean +37.5,
    # s.d. 17.68, s.e. 17.68 / sqrt(2) = 12.5; success 37.5 -> 75.0
    sp = sampled_summary({"before": [0.5, 0.25], "after": [0.75, 0.75]}, samples=4, temperature=1.0, n_goals=2)
    assert sp["gain"] == pytest.approx(37.5) and sp["gain_paired_se"] == pytest.approx(12.5)
    assert (sp["success_before"], sp["success_after"]) == (37.5, 75.0)
    assert (sp["samples"], sp["temperature"], sp["before"]) == (4, 1.0, [0.5, 0.25])


def test_memory_line_names_each_phases_peak():
    mem = {"gauge": "rss", "phases": [{"phase": "sft", "rss_peak_gib": 5.404}, {"phase": "rl", "rss_peak_gib": 5.48}]}
    assert memory_line(mem) == "peak memory (GiB, rss): sft 5.40, rl 5.48"
    assert memory_line({}) is None  # no meter (no Linux /proc): no line
