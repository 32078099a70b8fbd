"""``agentrl.memory_meter``: peak memory per phase, read from the kernel's high-water mark and tracemalloc."""

from pathlib import Path

import pytest

from agentrl.memory_meter import GIB, HeapGauge, PhaseMeter, RssGauge

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


def test_a_meter_inside_another_meters_phase_hides_nothing_from_it():
    # the demo's meter holds "rl" open while the trainer's own meter resets the process's peak at
    # each of its boundaries: the 120 MiB spike inside the inner meter's phase still counts in "rl"
    outer, inner = PhaseMeter([RssGauge()]), PhaseMeter([RssGauge()])
    with outer.phase("rl"):
        with inner.phase("forward"):
            buf = _touch(120 * MIB)
            del buf
        with inner.phase("optimizer"):
            pass
    assert inner.stats["forward"].growth["rss"] >= 115 * MIB
    assert outer.stats["rl"].growth["rss"] >= 115 * MIB
    assert outer.overall["rss"] >= outer.stats["rl"].peak["rss"]


# ------------------------------------------------------------------ the compact head's saving, in one run
RATIO_MAX = 0.92
"""The tiny recipe's training (2 iterations: rollout, credit, update, checkpoint) raised resident
memory by 0.162-0.174 GiB with the compact head and by 0.212 GiB with TRL's fused head scoring every
position (`agentrl bench memory recipes/textcraft_grpo_tiny_cpu.yaml --steps 2 [--compact_lm_head
false]`, 2026-11-27): a ratio of 0.76-0.82. Both are measured here on the same machine, one after
the other, so a machine's own baseline cancels; a compact head that projected every position again
would read about 1."""


def _train_growth(tmp_path, *overrides: str) -> tuple[float, str]:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    out = tmp_path / f"mem{len(overrides)}.json"
    r = subprocess.run([sys.executable, "-m", "agentrl.benchmarks", "memory", "recipes/textcraft_grpo_tiny_cpu.yaml",
                        "--steps", "2", "--json", str(out), *overrides], cwd=repo, capture_output=True, text=True,
                       timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    phases = {row["phase"]: row for row in json.loads(out.read_text())["phases"]}
    assert ["load", "train", "rollout", "generation", "env", "credit", "rows", "logps", "forward", "backward",
            "optimizer", "checkpoint"] == list(phases)
    assert "| forward | 2 |" in r.stdout and "overall peak:" in r.stdout
    return phases["train"]["rss_growth_gib"], r.stdout


def test_the_compact_head_takes_less_memory_than_trls_in_the_same_run(tmp_path):
    compact, table = _train_growth(tmp_path)
    trl, trl_table = _train_growth(tmp_path, "--compact_lm_head", "false")
    assert 0.05 < compact and 0.05 < trl
    assert compact / trl <= RATIO_MAX, (
        f"the compact head's training grew {compact:.3f} GiB against TRL's head's {trl:.3f} GiB (ratio "
        f"{compact / trl:.2f} > {RATIO_MAX}): find the phase that grew\n{table[-2000:]}\n{trl_table[-2000:]}")


FRAGMENTED_HEAP = """
import torch
from agentrl.memory_meter import release_freed_memory

def rss_mib():
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmRSS")) / 1024

big = torch.ones(16 << 20, dtype=torch.uint8)
del big  # freeing a 16 MB mapping raises glibc's mmap threshold: what follows lands on the heap
blocks = [torch.ones(4 << 20, dtype=torch.uint8) for _ in range(100)]  # 400 MB
top = torch.ones(1 << 20, dtype=torch.uint8)  # a live block above them: the heap cannot shrink
del blocks
before = rss_mib()
release_freed_memory()
print(before, rss_mib())
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_freed_heap_pages_go_back_to_the_os():
    """What the trainer's ``ReleaseFreedMemory`` callback does after each CPU step: 400 MB freed
    below a live block stay resident until ``release_freed_memory`` (glibc's ``malloc_trim``)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", FRAGMENTED_HEAP], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    before, after = map(float, r.stdout.split())
    assert before - after > 300, (before, after)

