"""Peak memory per named phase of one process: resident memory (CPU), CUDA memory, the Python heap.

A ``PhaseMeter`` holds gauges and a stack of open phases. At every phase boundary it reads each
gauge's peak since the last boundary, folds it into every open phase (a phase's peak includes its
sub-phases) and resets the gauge's peak, so a short spike inside a phase is never missed:

- ``RssGauge``: the kernel's own high-water mark of the resident set (``VmHWM`` in
  ``/proc/self/status``), reset by writing ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0). Exact,
  no sampling thread.
- ``CudaGauge``: ``torch.cuda.max_memory_allocated`` (tensors only; the caching allocator's
  reserve and the CUDA context are not counted), reset by ``reset_peak_memory_stats``.
- ``HeapGauge``: ``tracemalloc``'s traced peak: Python objects and numpy arrays, not torch tensors
  (what holds rollouts and records twice shows here, not in torch).

A gauge's peak is one per process (the kernel's, torch's, tracemalloc's), so every live meter
sees every boundary's peak: a demo's meter around its RL phase and the trainer's meter inside it
both hold correct figures.

``agentrl.trainer.memory_phases`` puts a trainer's steps into phases; ``agentrl bench memory`` prints the
table; the demo records its own phases in ``demo_summary.json``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import re
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 2**30


def _status_kib(key: str, pid: int | str = "self") -> int | None:
    """A ``/proc/PID/status`` field in KiB (VmRSS, VmHWM); None where there is none."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    return int(m.group(1)) if m else None


class RssGauge:
    """Resident memory of this process (bytes): current and the kernel's peak since the last reset."""

    name = "rss"

    def __init__(self):
        if _status_kib("VmHWM") is None:
            raise OSError("resident-memory peaks need Linux's /proc/self/status")
        try:  # the peak is reset at every phase boundary; without that, phases could not be told apart
            Path("/proc/self/clear_refs").write_text("5")
        except OSError as e:
            raise OSError(f"cannot reset the resident-memory peak (/proc/self/clear_refs: {e.strerror})") from None

    def current(self) -> int:
        return 1024 * (_status_kib("VmRSS") or 0)

    def peak(self) -> int:
        return 1024 * (_status_kib("VmHWM") or 0)

    def reset_peak(self) -> None:
        Path("/proc/self/clear_refs").write_text("5")


class CudaGauge:
    """Bytes of CUDA tensors allocated by torch on the current device."""

    name = "cuda"

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise OSError("no CUDA device")
        self._cuda = torch.cuda

    def current(self) -> int:
        return int(self._cuda.memory_allocated())

    def peak(self) -> int:
        return int(self._cuda.max_memory_allocated())

    def reset_peak(self) -> None:
        self._cuda.reset_peak_memory_stats()


class HeapGauge:
    """Bytes ``tracemalloc`` traces (Python objects, numpy arrays); starts tracing if it is off."""

    name = "heap"

    def __init__(self):
        import tracemalloc

        if not tracemalloc.is_tracing():
            tracemalloc.start()
        self._tm = tracemalloc

    def current(self) -> int:
        return self._tm.get_traced_memory()[0]

    def peak(self) -> int:
        return self._tm.get_traced_memory()[1]

    def reset_peak(self) -> None:
        self._tm.reset_peak()


@dataclass
class PhaseStats:
    """One phase over all its occurrences: bytes per gauge."""

    calls: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    """This process's CPU time inside the phase (all its threads): comparable on a shared machine."""
    peak: dict[str, int] = field(default_factory=dict)
    """The highest value each gauge reached inside the phase."""
    growth: dict[str, int] = field(default_factory=dict)
    """The most each gauge rose inside one occurrence above its value at the phase's entry."""


@dataclass
class _Open:
    name: str
    t0: float
    cpu0: float
    entry: dict[str, int]
    peak: dict[str, int]


class PhaseMeter:
    """Peak memory per phase (module docstring). ``with meter.phase("update"): ...`` or
    ``meter.wrap(obj, "method", "phase")``; ``stats`` holds every phase seen so far,
    ``take_step()`` the phases since its last call (one training step's)."""

    def __init__(self, gauges: list[Any]):
        if not gauges:
            raise ValueError("a PhaseMeter needs at least one gauge")
        self.gauges = list(gauges)
        self.stats: dict[str, PhaseStats] = {}
        self.step_stats: dict[str, PhaseStats] = {}
        self.overall: dict[str, int] = {}
        """The highest value each gauge reached while the meter ran."""
        self._open: list[_Open] = []
        self.overall.update({g.name: 0 for g in self.gauges})
        _LIVE.add(self)
        self._fold()

    @property
    def main(self) -> str:
        """The gauge the figures are quoted in: CUDA where there is one, else resident memory."""
        return self.gauges[0].name

    def _fold(self) -> dict[str, int]:
        """Each gauge's peak since the last boundary (any live meter's) into every live meter's
        open phases; reset the peaks. Returns the gauges' current values."""
        now = {}
        for g in self.gauges:
            p = g.peak()
            now[g.name] = g.current()
            g.reset_peak()
            for m in _LIVE:
                m._note(g.name, p)
        return now

    def _note(self, gauge: str, p: int) -> None:
        if gauge not in self.overall:
            return  # a gauge this meter does not read
        self.overall[gauge] = max(self.overall[gauge], p)
        for o in self._open:
            o.peak[gauge] = max(o.peak[gauge], p)

    def enter(self, name: str) -> None:
        now = self._fold()
        self._open.append(_Open(name, time.perf_counter(), time.process_time(), now, dict(now)))

    def exit(self, name: str) -> None:
        self._fold()
        if not self._open or self._open[-1].name != name:
            raise RuntimeError(f"phase {name!r} ended but {self._open[-1].name if self._open else 'none'!r} is open")
        o = self._open.pop()
        for table in (self.stats, self.step_stats):
            s = table.setdefault(name, PhaseStats())
            s.calls += 1
            s.seconds += time.perf_counter() - o.t0
            s.cpu_seconds += time.process_time() - o.cpu0
            for k, p in o.peak.items():
                s.peak[k] = max(s.peak.get(k, 0), p)
                s.growth[k] = max(s.growth.get(k, 0), p - o.entry[k])

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.enter(name)
        try:
            yield
        finally:
            self.exit(name)

    def wrap(self, obj: Any, attr: str, name: str) -> None:
        """Run ``obj.attr`` (a method, replaced on the instance) inside phase ``name``."""
        fn: Callable = getattr(obj, attr)

        @functools.wraps(fn)
        def inside(*args, **kwargs):
            with self.phase(name):
                return fn(*args, **kwargs)

        setattr(obj, attr, inside)

    def take_step(self) -> dict[str, PhaseStats]:
        """The phases that ended since the last call (and forget them)."""
        self._fold()
        out, self.step_stats = self.step_stats, {}
        return out

    def table(self, order: list[str] | None = None) -> list[dict[str, Any]]:
        """One row per phase: calls, seconds, and per gauge the peak and the growth in GiB."""
        self._fold()
        names = [n for n in (order or []) if n in self.stats] + [n for n in self.stats if n not in (order or [])]
        rows = []
        for n in names:
            s = self.stats[n]
            row: dict[str, Any] = {"phase": n, "calls": s.calls, "seconds": round(s.seconds, 3),
                                   "cpu_seconds": round(s.cpu_seconds, 3)}
            for g in self.gauges:
                row[f"{g.name}_peak_gib"] = round(s.peak.get(g.name, 0) / GIB, 4)
                row[f"{g.name}_growth_gib"] = round(s.growth.get(g.name, 0) / GIB, 4)
            rows.append(row)
        return rows


_LIVE: weakref.WeakSet[PhaseMeter] = weakref.WeakSet()
"""Every meter alive in this process (each boundary's peaks go to all of them)."""


def default_gauges(device: str = "auto", heap: bool = False) -> list[Any]:
    """CUDA (``device`` cuda, or auto with a CUDA device) or resident memory first; then resident
    memory beside CUDA, and the Python heap with ``heap``."""
    import torch

    cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    gauges: list[Any] = [CudaGauge()] if cuda else []
    gauges.append(RssGauge())
    if heap:
        gauges.append(HeapGauge())
    return gauges


def release_freed_memory(collect: bool = True) -> None:
    """Give freed heap pages back to the OS: a collection (``collect``), then glibc's
    ``malloc_trim``. Freed blocks otherwise stay in glibc's arenas and count as resident memory (a
    process that trained and then evaluates would carry the training's peak on). A no-op where
    glibc is absent."""
    if collect:
        gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def children_rss(pids: list[int]) -> tuple[int, int]:
    """(current, peak) resident bytes summed over processes ``pids`` (an env-worker pool)."""
    cur = sum(_status_kib("VmRSS", p) or 0 for p in pids)
    peak = sum(_status_kib("VmHWM", p) or 0 for p in pids)
    return 1024 * cur, 1024 * peak
