"""Whether this machine's CPU runs bfloat16 natively.

bf16 autocast on a CPU without AVX512-BF16 or AMX is emulated: SmolLM2-135M's forward and
backward (2 x 160 tokens, 2 threads) took 65 s under it against 2.4 s in fp32 on a 2-core AMD
EPYC with AVX2 only, while CPUs with AMX run the same step about twice as fast in bf16 as in
fp32. The demo designs that ask for bf16 take it only where it is native, and so do the runs of
``agentrl arena`` and ``agentrl bench async`` (they time and race the demos' RL phases); a recipe
run on the CPU with ``bf16: true`` where it is not gets one warning line.
"""

from __future__ import annotations

import functools


@functools.cache
def cpu_bf16_native() -> bool:
    """oneDNN's own test for a bf16-capable CPU (the kernels autocast uses on the CPU)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without oneDNN: no native bf16 kernels
        return False


def emulated_bf16(bf16: bool, on_cpu: bool) -> bool:
    """Whether a run that asks for ``bf16`` on the CPU (``on_cpu``) would get it emulated."""
    return bool(bf16 and on_cpu) and not cpu_bf16_native()


def fp32_args(bf16: bool, on_cpu: bool) -> list[str]:
    """The ``agentrl.train`` flags that run a recipe asking for emulated bf16 in fp32 (``--bf16
    false``), else none: what ``agentrl arena`` and ``agentrl bench async`` add to every run."""
    return ["--bf16", "false"] if emulated_bf16(bf16, on_cpu) else []


def emulated_bf16_warning(bf16: bool, on_cpu: bool) -> str | None:
    """The line to print when a run asks for bf16 on a CPU that only emulates it, else None."""
    if not emulated_bf16(bf16, on_cpu):
        return None
    return ("warning: bf16 is emulated on this CPU (no AVX512-BF16 or AMX): expect steps ~25x slower "
            "than fp32 (measured on SmolLM2-135M); set bf16: false to train in fp32")
