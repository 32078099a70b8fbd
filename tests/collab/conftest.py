import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

MATH_CORPUS = [
    "Problem: Calculate ( 56 + -33 ) - 84. Thinker plan: add, then subtract. Solver answer \\boxed{-61}",
    "You are the Solver in a two-person team. Check the plan and solve the problem step by step.",
    "Output the final answer within \\boxed{}. Reply with one JSON object: outcome, pair, brief_reason",
] * 30


@pytest.fixture(scope="session")
def collab_model_dir(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    from agentrl.models import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_collab") / "model", texts=MATH_CORPUS,
                                vocab_size=400, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1))


@pytest.fixture(scope="session")
def collab_other_model_dir(tmp_path_factory):
    """A second tiny model unlike ``collab_model_dir``: wider, one layer, its own smaller vocabulary."""
    from agentrl.models import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_collab_other") / "model", texts=MATH_CORPUS,
                                vocab_size=300, hidden_size=48, num_layers=1, num_heads=2, num_kv_heads=1, seed=1))
