"""`make test` runs on two pytest-xdist workers: a test file that starts a run of several processes
(accelerate or torchrun, port 29500) must be in conftest's "ranks" group, or two such runs meet on
the port; each worker's one-process runs get a MASTER_PORT of their own."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _ranks_files() -> set[str]:
    # tests/conftest.py by path: under tests/trainer another conftest module is also named `conftest`
    import importlib.util

    spec = importlib.util.spec_from_file_location("_suite_conftest", REPO / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.RANKS_FILES


RANKS_FILES = _ranks_files()
# what starts several processes: accelerate's launcher (our 2-process configs), torchrun, `accelerate launch`
LAUNCHERS = re.compile(r"accelerate\.commands\.launch|torch\.distributed\.run|\"launch\", card")


def test_every_file_that_launches_ranks_is_grouped():
    texts = {p.relative_to(REPO).as_posix(): p.read_text() for p in (REPO / "tests").rglob("test_*.py")}
    launching = {f for f, text in texts.items() if LAUNCHERS.search(text)}
    assert {"tests/trainer/test_subprocess.py", "tests/trainer/test_resume_matrix.py"} <= launching
    # a file either is grouped whole or marks its own multi-process tests
    ungrouped = {f for f in launching - RANKS_FILES if 'xdist_group("ranks")' not in texts[f]}
    assert not ungrouped, f"add to RANKS_FILES in tests/conftest.py: {sorted(ungrouped)}"
    assert all((REPO / f).is_file() for f in RANKS_FILES)


def test_grouped_items_carry_the_mark(request):
    assert not list(request.node.iter_markers("xdist_group"))  # this file launches nothing
    items = request.session.items
    grouped = [i for i in items if i.path.relative_to(REPO).as_posix() in RANKS_FILES]
    matrix = {i.callspec.params["name"]: [m.args for m in i.iter_markers("xdist_group")]
              for i in items if i.path.name == "test_resume_matrix.py"}
    if not grouped and not matrix:
        pytest.skip("no test that starts several processes collected in this run")
    assert all([m.args for m in i.iter_markers("xdist_group")] == [("ranks",)] for i in grouped)
    # the two cells under cpu_zero3.yaml (2 processes) are grouped, one-process cells are not
    two_ranks = {"zero3_grpo", "async_zero3"}
    assert matrix == {n: [("ranks",)] if n in two_ranks else [] for n in matrix}


def test_workers_have_their_own_master_port():
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        pytest.skip("one pytest process: MASTER_PORT left as the shell set it")
    # worked out by hand: neither 29500 (the multi-process launches') nor the other worker's
    assert os.environ["MASTER_PORT"] == {"gw0": "29510", "gw1": "29520", "gw2": "29530"}[worker]
