"""What the training benchmarks share: an offline run on a model built or resolved once."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def offline_model(name: str, threads: int | None, prefix: str, **tiny) -> tuple[str, Path]:
    """Resolve ``name`` ('tiny' is built on the fly with ``tiny``'s sizes) in a fresh temporary
    folder, with the hub and wandb offline and torch on ``threads`` threads (None: torch's
    default). Returns (model path, the folder, for the run's output)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    import torch

    from agentrl.models import model_or_tiny

    if threads:
        torch.set_num_threads(threads)
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    return model_or_tiny(name, tmp / "tiny", **tiny), tmp
