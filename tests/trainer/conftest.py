import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import count_env  # noqa: E402,F401  (registers agentrl-test/Count-v0)

COUNT_CORPUS = [
    "count from 1 to 3 Say 1. Say 2. Say 3. Done. Not a number.",
    "You are an agent in a counting game. Your task: count from 1 to 5",
    "Current observation: Say 4. Reply with your next command inside <action>...</action>.",
    "<action>1</action> <action>2</action> <action>3</action> <action>4</action> <action>5</action>",
    "Observation: Say 2. Action: 1 You have taken 1 step(s). Your last 1 observation(s) and action(s):",
] * 30


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    from agentrl.models import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts=COUNT_CORPUS,
                                vocab_size=400, hidden_size=32, num_layers=2, num_heads=2,
                                num_kv_heads=1))


@pytest.fixture(scope="session")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    return model, tok
