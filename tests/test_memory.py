"""``agentrl.memory``: peak memory per phase, read from the kernel's high-water mark and tracemalloc."""

import pytest

from agentrl.memory import GIB, HeapGauge, PhaseMeter, RssGauge

MIB = 2**20


def _touch(n_bytes: int) -> bytearray:
    """n_bytes of resident memory (every page written)."""
    buf = bytearray(n_bytes)
    for i in range(0, n_bytes, 4096):
        buf[i] = 1
    return buf


def test_a_phase_keeps_its_spike_and_the_next_phase_does_not_inherit_it():
    # 200 MiB touched and freed inside "spike": its growth is >= 200 MiB even though the memory is
    # gone when it ends; "quiet" comes after and allocates nothing, so its growth is near 0 although
    # the process's lifetime peak (VmHWM without the reset) still holds the spike.
    meter = PhaseMeter([RssGauge()])
    with meter.phase("spike"):
        buf = _touch(200 * MIB)
        del buf
    with meter.phase("quiet"):
        pass
    assert meter.stats["spike"].growth["rss"] >= 195 * MIB
    assert meter.stats["quiet"].growth["rss"] < 20 * MIB
    assert meter.stats["quiet"].peak["rss"] < meter.stats["spike"].peak["rss"] - 150 * MIB


def test_an_outer_phase_includes_its_inner_phases_peaks():
    meter = PhaseMeter([RssGauge()])
    with meter.phase("outer"):
        with meter.phase("inner"):
            buf = _touch(100 * MIB)
            del buf
        with meter.phase("after"):
            pass
    s = meter.stats
    assert s["outer"].peak["rss"] >= s["inner"].peak["rss"] >= s["after"].peak["rss"] + 80 * MIB
    assert s["outer"].growth["rss"] >= 95 * MIB
    assert [r["phase"] for r in meter.table(["after", "outer"])] == ["after", "outer", "inner"]


def test_take_step_returns_the_phases_since_its_last_call():
    meter = PhaseMeter([RssGauge()])
    with meter.phase("a"):
        pass
    assert list(meter.take_step()) == ["a"]
    with meter.phase("b"):
        pass
    assert list(meter.take_step()) == ["b"]
    assert sorted(meter.stats) == ["a", "b"] and meter.stats["a"].calls == 1


def test_the_heap_gauge_sees_python_objects():
    meter = PhaseMeter([HeapGauge()])
    with meter.phase("records"):
        rows = [bytes(1000) for _ in range(50_000)]  # ~50 MB of Python objects (plus their headers)
        del rows
    assert meter.stats["records"].growth["heap"] >= 50_000_000
    assert meter.table()[0]["heap_growth_gib"] >= 50_000_000 / GIB - 1e-4


def test_phases_must_end_in_order():
    meter = PhaseMeter([RssGauge()])
    meter.enter("a")
    meter.enter("b")
    with pytest.raises(RuntimeError, match="'a' ended but 'b' is open"):
        meter.exit("a")


def test_wrap_runs_a_method_inside_its_phase():
    class Worker:
        def work(self, n):
            buf = _touch(n)
            return len(buf)

    w, meter = Worker(), PhaseMeter([RssGauge()])
    meter.wrap(w, "work", "work")
    assert w.work(64 * MIB) == 64 * MIB
    assert meter.stats["work"].calls == 1 and meter.stats["work"].growth["rss"] >= 60 * MIB
