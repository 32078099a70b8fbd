"""Settings every test process shares: one thread, no hub, no wandb (subprocesses inherit them)."""

import os
import sys

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
_THREADS = os.environ["OMP_NUM_THREADS"]

# `make test` runs the suite on two pytest-xdist workers (-n 2 --dist loadgroup). A one-process
# DeepSpeed or torch.distributed run binds MASTER_PORT (29500 unless set): each worker gets its own.
# accelerate and torchrun start a run of several processes on 29500 whatever MASTER_PORT says, so the
# files that start one share the xdist group "ranks" (below; test_resume_matrix.py marks its own 2-process
# cells): one such run at a time.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    os.environ["MASTER_PORT"] = str(29510 + 10 * int(_WORKER[2:]))
RANKS_FILES = {
    "tests/collab/test_collab_zero3.py", "tests/collab/test_collab_zero3_policies.py",
    "tests/trainer/test_guard.py", "tests/trainer/test_plan_ranks.py", "tests/trainer/test_recipe_launch.py",
    "tests/trainer/test_subprocess.py", "tests/test_extending.py",
}


def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    for item in items:
        if item.path.relative_to(root).as_posix() in RANKS_FILES:
            item.add_marker(pytest.mark.xdist_group("ranks"))


@pytest.fixture(autouse=True)
def _threads_as_the_suite_set_them():
    """Loading a recipe in-process applies its ``env:`` block as defaults and ``load_recipe``
    passes OMP_NUM_THREADS to torch; the suite sets it, so the recipe's value (recipes/_parts/cpu.yaml:
    2) does not win, but a test that sets or clears it (or a demo that sets its own) would change
    the thread count of every later test in this process. Tests that compare an in-process reference with a
    one-thread subprocess (kill/resume exactness) then see a different float path. Restored after
    each test."""
    yield
    os.environ["OMP_NUM_THREADS"] = _THREADS
    torch = sys.modules.get("torch")
    if torch is not None and _THREADS.isdigit() and torch.get_num_threads() != int(_THREADS):
        torch.set_num_threads(int(_THREADS))
