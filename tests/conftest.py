"""Settings every test process shares: one thread, no hub, no wandb (subprocesses inherit them)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
