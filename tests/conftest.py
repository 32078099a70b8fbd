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
