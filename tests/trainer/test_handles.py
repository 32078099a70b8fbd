"""Plug-ins never see the trainer: algorithms, runners, policies, collaborations and the producer
import nothing from ``agentrl.trainer`` (not even for annotations), every hook an algorithm or
its runner is called with during real training receives handles (``Player``, ``Learner``),
never an ``AgentGRPOTrainer``, and no handle reaches the trainer: walking each one's attributes
(objects' fields, containers, bound methods' ``__self__``, closures' cells, ``functools.partial``)
never meets the trainer instance (identity, so a wrapper that holds the trainer fails too).

Runtime: ~70 s (tiny runs: GRPO in window mode, APPO with branches, a Thinker -> Solver
collaboration, each twice; an asynchronous trainer built).
"""

from __future__ import annotations

import ast
import collections
import functools
import types
from pathlib import Path

import pytest
import torch

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
                  "end_micro_step", "checkpointed", "restored_state", "model_folders", "model_files")


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
    tr = build_trainer(load_recipe(str(recipe)))
    tr.train()
    _no_handle_reaches(tr)  # the policy store, its swaps and the role schedule included
    called = set(spied)
    for name in ("Collab.bind", "Collab.roll_out", "Collab.advantages", "Collab.metrics", "CollabRunner.rows",
                 "CollabRunner.begin_micro_step", "CollabRunner.end_micro_step"):
        assert name in called, (name, sorted(called))


# ---------------------------------------------------------------------- no handle reaches the trainer
_LEAVES = (str, bytes, int, float, complex, bool, type(None), type, types.ModuleType, types.CodeType,
           types.BuiltinFunctionType)


def _children(obj):
    """(name, value) of what ``obj`` holds: container items, a partial's parts, a bound method's
    object and function, a function's closure cells and defaults, an object's fields and slots, a
    tensor's hooks. Modules, classes and a function's globals are not followed (shared by all)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"[{k!r}]", v
            yield "<key>", k
        return
    if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
        yield from ((f"[{i}]", v) for i, v in enumerate(obj))
        return
    if isinstance(obj, functools.partial):
        yield from ((".func", obj.func), (".args", obj.args), (".keywords", obj.keywords))
        return
    if isinstance(obj, types.MethodType):
        yield from ((".__self__", obj.__self__), (".__func__", obj.__func__))
        return
    if isinstance(obj, types.FunctionType):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or (), strict=True):
            try:
                yield f"<cell {name}>", cell.cell_contents
            except ValueError:  # an empty cell
                pass
        yield from ((".__defaults__", obj.__defaults__), (".__kwdefaults__", obj.__kwdefaults__))
        return
    if isinstance(obj, torch.Tensor):
        yield "._backward_hooks", getattr(obj, "_backward_hooks", None)
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        yield from ((f".{k}", v) for k, v in d.items())
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot != "__dict__" and hasattr(obj, slot):
                yield f".{slot}", getattr(obj, slot)


def path_to(root, target, root_name: str) -> str | None:
    """The attribute path from ``root`` to the object ``target`` (by identity), or None."""
    seen, stack = set(), [(root, root_name)]
    while stack:
        obj, path = stack.pop()
        if obj is target:
            return path
        if isinstance(obj, _LEAVES) or id(obj) in seen:
            continue
        seen.add(id(obj))
        stack += [(v, path + name) for name, v in _children(obj)]
    return None


def handles(tr) -> dict:
    """Every object the trainer hands to plug-ins, runners and the producer."""
    from agentrl import losses

    return {"player": tr.eval_source.player, "source": tr.source, "eval_source": tr.eval_source,
            "runner": tr.runner, "learner": tr.learner, "algorithm": tr.algorithm,
            "loss": (losses.get_policy_loss(tr.loss_name), tr.loss_options), "guard": tr.guard,
            "scheduler": tr.lr_scheduler, "env_failures": tr.env_failures, "zero_signal": tr.zero_signal,
            "learner_state": getattr(tr, "learner_state", None),
            "runner_parts": tr.runner.checkpointed() if hasattr(tr.runner, "checkpointed") else None}


def _no_handle_reaches(tr) -> None:
    found = {name: p for name, h in handles(tr).items() if (p := path_to(h, tr, name)) is not None}
    assert found == {}, found
    # the walk goes deep: the handles that use the trained model and its optimizer do reach them
    assert path_to(tr.learner, tr.model, "learner") and path_to(tr.eval_source.player, tr.model, "player")
    assert path_to(tr.learner, tr.optimizer, "learner") or tr.optimizer is None


def test_the_walk_finds_a_trainer_behind_a_wrapper():
    # the walk's own check: a trainer held in a closure cell, behind a bound method, in a partial
    trainer = object()

    class Box:
        def __init__(self):
            self.f = functools.partial(print, lambda: trainer)

    assert path_to([{"x": Box().f}], trainer, "h") == "h[0]['x'].args[0]<cell trainer>"
    assert path_to(types.MethodType(lambda self: None, Box()), trainer, "m") == "m.__self__.f.args[0]<cell trainer>"
    assert path_to(Box(), object(), "b") is None


def test_no_handle_reaches_the_trainer(tmp_path, tiny_model_dir):
    from test_trainer import make_cfg, make_trainer

    for d in ("grpo", "appo", "async"):
        (tmp_path / d).mkdir()
    grpo = make_trainer(make_cfg(tmp_path / "grpo", tiny_model_dir, max_steps=1))
    grpo.train()  # the optimizer, the scheduler and the wrapped model exist
    _no_handle_reaches(grpo)
    # a CPU run gives each step's freed heap back (tests/test_memory_meter.py: what that does)
    from agentrl.trainer.callbacks import ReleaseFreedMemory

    assert sum(isinstance(c, ReleaseFreedMemory) for c in grpo.callback_handler.callbacks) == 1
    appo = make_trainer(make_cfg(tmp_path / "appo", tiny_model_dir, context_mode="trajectory", algorithm="appo",
                                 credit="appo", beta=0.001, max_steps=1,
                                 credit_kwargs={"budget": 2, "omega_baseline": "behaviour"}))
    appo.train()
    _no_handle_reaches(appo)
    asy = make_trainer(make_cfg(tmp_path / "async", tiny_model_dir, rollout_mode="async", max_staleness=1))
    try:
        assert type(asy.source).__name__ == "AsyncSource"
        _no_handle_reaches(asy)
    finally:
        asy.source.close()
