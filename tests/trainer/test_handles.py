"""Plug-ins never see the trainer: algorithms, runners, policies, collaborations and the producer
import nothing from ``agentrl.trainer`` (not even for annotations), and every hook an algorithm or
its runner is called with during real training receives handles (``Player``, ``Learner``),
never an ``AgentGRPOTrainer``.

Runtime: ~40 s (three tiny runs: GRPO in window mode, APPO with branches, a Thinker -> Solver
collaboration).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
PLUGIN_PACKAGES = ("algorithms", "policies", "collab", "producer")


def test_plugins_import_nothing_from_the_trainer():
    offenders = []
    for pkg in PLUGIN_PACKAGES:
        for f in sorted((REPO / "agentrl" / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                offenders += [f"{f.relative_to(REPO)}:{node.lineno}" for n in names
                              if n == "agentrl.trainer" or n.startswith("agentrl.trainer.")]
    assert offenders == []


HOOKS = ("check", "bind", "roll_out", "shape_rewards", "advantages", "loss", "metric_episodes", "metrics", "runner")
RUNNER_METHODS = ("__init__", "pad_id", "rows", "micro_batches", "policy", "loss_model", "begin_micro_step",
                  "end_micro_step", "save_checkpoint", "load_checkpoint", "save_model")


def _spy(cls, names, seen: list):
    """Wrap ``cls``'s own methods ``names``: record every call and refuse a trainer argument."""
    from agentrl.trainer import AgentGRPOTrainer

    def wrap(name, fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            seen.append(f"{cls.__name__}.{name}")
            for a in (*args[1:], *kwargs.values()):
                assert not isinstance(a, AgentGRPOTrainer), f"{cls.__name__}.{name} was given the trainer"
            return fn(*args, **kwargs)
        return inner

    return {n: wrap(n, vars(cls)[n]) for n in names if n in vars(cls)}


@pytest.fixture
def spied(monkeypatch):
    from agentrl.algorithms.appo import Appo
    from agentrl.algorithms.base import Algorithm
    from agentrl.algorithms.collab import Collab
    from agentrl.algorithms.collab_runner import CollabRunner
    from agentrl.algorithms.runner import UpdateRunner

    seen: list[str] = []
    for cls, names in ((Algorithm, HOOKS), (Appo, HOOKS), (Collab, HOOKS), (UpdateRunner, RUNNER_METHODS),
                       (CollabRunner, RUNNER_METHODS)):
        for n, fn in _spy(cls, names, seen).items():
            monkeypatch.setattr(cls, n, fn)
    return seen


def test_grpo_and_appo_hooks_get_handles(tmp_path, tiny_model_dir, spied):
    from test_trainer import make_cfg, make_trainer

    for d in ("grpo", "appo"):
        (tmp_path / d).mkdir()
    make_trainer(make_cfg(tmp_path / "grpo", tiny_model_dir, max_steps=1)).train()
    cfg = make_cfg(tmp_path / "appo", tiny_model_dir, context_mode="trajectory", algorithm="appo", credit="appo",
                   beta=0.001, max_steps=1, credit_kwargs={"budget": 2, "omega_baseline": "behaviour"})
    make_trainer(cfg).train()
    called = set(spied)
    # the hooks that ran are the ones every iteration calls, and the default runner's steps
    for name in ("Algorithm.roll_out", "Algorithm.advantages", "Algorithm.metrics", "Algorithm.runner",
                 "Appo.roll_out", "Appo.advantages", "Appo.bind", "UpdateRunner.rows", "UpdateRunner.micro_batches",
                 "UpdateRunner.begin_micro_step"):
        assert name in called, (name, sorted(called))


def test_collaboration_hooks_get_handles(tmp_path, spied):
    import importlib.util

    spec = importlib.util.spec_from_file_location("collab_conftest", REPO / "tests" / "collab" / "conftest.py")
    collab_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collab_conftest)
    MATH_CORPUS = collab_conftest.MATH_CORPUS

    from agentrl.config import load_recipe
    from agentrl.models import build_tiny_model
    from agentrl.train import build_trainer

    model = build_tiny_model(tmp_path / "m", texts=MATH_CORPUS, vocab_size=400, hidden_size=32, num_layers=2,
                             num_heads=2, num_kv_heads=1)
    recipe = tmp_path / "r.yaml"
    import yaml

    recipe.write_text(yaml.safe_dump(dict(
        env_id="agentrl-test/ParityMath-v0", env_modules=["parity_math"], task_split="",
        env_kwargs={"tasks": ["basic_arithmetic"], "size": 16}, credit="ccpo", algorithm="collab",
        algorithm_kwargs={"collab": "think_solve", "policies": "full", "role_schedule": "blocks",
                          "role_block_steps": 1},
        num_tasks=4, num_generations=2, per_device_train_batch_size=4, max_completion_length=6, max_steps=2,
        bf16=False, report_to="none", use_cpu=True, seed=0, disable_tqdm=True, save_strategy="no",
        model_name_or_path=str(model), output_dir=str(tmp_path / "out"))))
    build_trainer(load_recipe(str(recipe))).train()
    called = set(spied)
    for name in ("Collab.bind", "Collab.roll_out", "Collab.advantages", "Collab.metrics", "CollabRunner.rows",
                 "CollabRunner.begin_micro_step", "CollabRunner.end_micro_step"):
        assert name in called, (name, sorted(called))
