"""agentrl.precision: the CPU's bf16 test (a private torch op: its contract) and the warning line."""

import torch

from agentrl import precision


def test_private_onednn_bf16_probe_exists_and_answers_a_bool():
    # contract: cpu_bf16_native relies on torch.ops.mkldnn._is_mkldnn_bf16_supported; a torch that
    # renames it would silently make every CPU "emulated" (fp32 demos, needless warnings)
    assert isinstance(torch.ops.mkldnn._is_mkldnn_bf16_supported(), bool)
    assert precision.cpu_bf16_native() == torch.ops.mkldnn._is_mkldnn_bf16_supported()


def test_warning_only_for_bf16_on_a_cpu_that_emulates_it(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: False)
    line = precision.emulated_bf16_warning(True, True)
    assert line is not None and "\n" not in line and "bf16: false" in line
    assert precision.emulated_bf16_warning(False, True) is None  # fp32 asked
    assert precision.emulated_bf16_warning(True, False) is None  # on a GPU
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: True)
    assert precision.emulated_bf16_warning(True, True) is None


def test_fp32_flags_only_where_bf16_would_be_emulated(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: False)
    assert precision.fp32_args(True, True) == ["--bf16", "false"]
    assert precision.fp32_args(False, True) == [] and precision.fp32_args(True, False) == []
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: True)
    assert precision.fp32_args(True, True) == []


def test_demo_design_drops_emulated_bf16_and_rl_runs_fp32(monkeypatch):
    from agentrl import demo

    monkeypatch.setattr(demo, "cpu_bf16_native", lambda: False)
    design = demo.resolve_design("smollm2")
    assert design["bf16"] is False and demo.DESIGNS["smollm2"]["bf16"] is True  # a copy changed, not the table
    argv = demo.rl_argv(demo.DemoSettings(out=demo.Path("/tmp/x"), seed=0), design, demo.Path("s"), demo.Path("r"),
                        2, 2, [1])
    assert argv[argv.index("--bf16") + 1] == "false"
    monkeypatch.setattr(demo, "cpu_bf16_native", lambda: True)
    assert demo.resolve_design("smollm2")["bf16"] is True
