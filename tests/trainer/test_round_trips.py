"""Following the iteration batch from ``_prepare_inputs`` to the loss visits each of agentrl's
modules once: no call returns into a module it has left (issue 54's "no round trips").

Every training micro-step (``AgentGRPOTrainer.training_step``: TRL's micro-step, our
``_prepare_inputs`` -> source -> credit -> runner -> micro-batches -> old / reference log-probs,
then ``_compute_loss`` -> the registered loss, the backward and the guard's verdict) runs under
``sys.setprofile``. At every call into agentrl's code the call stack is projected onto agentrl's own
modules (frames whose module name starts with ``agentrl.``; TRL's, transformers' and torch's frames
dropped) and the test asserts that each module is one contiguous run in every projected stack:
``agent_trainer -> algorithms.runner -> trainer.update`` is data passed down, while
``agent_trainer -> algorithms.runner -> agent_trainer`` is a round trip (the runner calls back into
the trainer's module: a method, or a lambda the trainer handed it). Frames of ``agent_trainer``
reached through TRL's own loop (``train`` -> TRL -> our ``training_step`` -> TRL -> our
``_prepare_inputs``) are contiguous after projection and fine. ``sys.setprofile`` sees this
thread only: the asynchronous producer is another process, and its episodes arrive as data.

Covered: GRPO with a KL term and two iterations per batch (the old and reference log-probs per
micro-batch), APPO in trajectory mode (branch points scored by the player's ``Scorer``), a
Thinker -> Solver collaboration (two policies behind ``CollabRunner``), and an asynchronous run
(``rollout_mode: async``). ``ROUND_TRIPS_LEFT`` is the exact set still allowed (empty: the ones
found when this test was written are fixed, see below), so a new one fails the test.

Found and fixed when the test was written (each now passes data or a handed-down object down):
- the generation's model getter (and its version getter and the scheduler's hold) were lambdas
  defined in ``agent_trainer``: now ``functools.partial(getattr, learner_state, ...)``, a read of the
  learner state that runs no trainer code;
- the env-failure watch called the trainer's gather / print lambdas: now ``Ranks.gather`` and
  ``functools.partial(print, ...)``;
- the contexts called the rollout's env-timing wrapper defined in ``rollout.episodes``: now
  ``rollout.env_batch.TimedEnvs``;
- the GRPO surrogates in ``losses.policy`` called back into ``losses.compose`` for the shared terms:
  now ``losses.terms``;
- a collaboration: ``UpdateRunner.rows`` called ``CollabRunner.pad_id`` back (now the subclass
  passes its pad id to ``UpdateRunner.balanced_rows``); the policy store called lambdas of
  ``algorithms.collab`` for the learner's optimizer and model (now getattr partials on the
  ``Learner``) and ``Player.generate`` (now the player's ``PolicyGeneration``); the role's generate
  function was a lambda of ``algorithms.collab_play`` (now a partial of ``PolicyStore.generate``).

How it was shown to fail: putting back ``model=lambda: state.model_wrapped`` in
``AgentGRPOTrainer._player`` (agentrl/trainer/agent_trainer.py) fails
``test_sync_steps_visit_each_module_once`` with the round trip
``trainer.agent_trainer -> producer.sync -> algorithms.base -> producer.player -> rollout.episodes
-> producer.generation -> trainer.agent_trainer [AgentGRPOTrainer._player.<locals>.<lambda>]``
(and the same through ``algorithms.appo``); putting back ``return super().rows(...)`` in
``CollabRunner.rows`` fails the collaboration's test with ``algorithms.collab_runner ->
algorithms.runner -> algorithms.collab_runner [CollabRunner.pad_id]``.
``test_the_projection_finds_a_round_trip`` checks the projection itself on real frames.

Runtime: ~17 s on 2 cores (the asynchronous run ~7 s of it, TRL's import ~5 s).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
ROUND_TRIPS_LEFT: set[str] = set()
"""The round trips still allowed, as ``round_trips`` names them (module path [function re-entered])."""


def ours(frame) -> bool:
    """Whether ``frame`` runs agentrl's code: its module's name starts with ``agentrl.``, and it is
    not a method ``dataclasses`` generated (``__init__``, ``__eq__``: compiled from "<string>" with
    the class's module's globals; building a value of a type another module declares is data, not
    a call into that module's code)."""
    return frame.f_globals.get("__name__", "").startswith("agentrl.") and frame.f_code.co_filename != "<string>"


def projected(frame) -> tuple[tuple[str, str], ...]:
    """The stack ending at ``frame``, outermost first, projected onto agentrl's modules:
    (module, function) of each of agentrl's frames (``ours``)."""
    out = []
    while frame is not None:
        if ours(frame):
            out.append((frame.f_globals["__name__"], frame.f_code.co_qualname))
        frame = frame.f_back
    return tuple(reversed(out))


class CallStacks:
    """The distinct projected stacks of every call into agentrl's code while active (this thread)."""

    def __init__(self):
        self.stacks: set[tuple[tuple[str, str], ...]] = set()

    def _profile(self, frame, event, arg):
        # only a call into agentrl's code can close a round trip, so only those are projected
        if event == "call" and ours(frame):
            self.stacks.add(projected(frame))

    def __enter__(self):
        self._old = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self._old)

    def functions(self) -> set[str]:
        """``module:function`` of every frame seen."""
        return {f"{m.removeprefix('agentrl.')}:{q}" for st in self.stacks for m, q in st}


def round_trips(stacks) -> dict[str, str]:
    """Each round trip in ``stacks``: a module that appears in two runs of a projected stack.
    Named ``a -> b -> a [function re-entered]`` (modules without the ``agentrl.`` prefix); the value
    is the trip's frames, for the failure message."""
    found: dict[str, str] = {}
    for st in stacks:
        runs: list[tuple[str, list[str]]] = []
        for module, fn in st:
            if runs and runs[-1][0] == module:
                runs[-1][1].append(fn)
            else:
                runs.append((module, [fn]))
        modules = [m for m, _ in runs]
        for i, (module, fns) in enumerate(runs):
            if module in modules[:i]:
                j = modules.index(module)
                name = " -> ".join(m.removeprefix("agentrl.") for m in modules[j:i + 1]) + f" [{fns[0]}]"
                found.setdefault(name, " | ".join(f"{m.removeprefix('agentrl.')}:{'/'.join(f)}"
                                                  for m, f in runs[j:i + 1]))
    return found


def _check(calls: CallStacks) -> None:
    trips = round_trips(calls.stacks)
    assert set(trips) == ROUND_TRIPS_LEFT, "\n".join(f"{k}\n    {v}" for k, v in sorted(trips.items())
                                                     if k not in ROUND_TRIPS_LEFT) or sorted(trips)


@pytest.fixture
def traced(monkeypatch):
    """Every ``training_step`` of the trainers built in the test runs under one ``CallStacks``."""
    from agentrl.trainer.agent_trainer import AgentGRPOTrainer

    calls, step = CallStacks(), AgentGRPOTrainer.training_step

    def training_step(self, *args, **kwargs):  # this test's frame is not agentrl's: projected away
        with calls:
            return step(self, *args, **kwargs)

    monkeypatch.setattr(AgentGRPOTrainer, "training_step", training_step)
    return calls


# ---------------------------------------------------------------------- the projection's own check
def _module(name: str, source: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def test_the_projection_finds_a_round_trip():
    # real frames: agentrl.rt_a.outer -> agentrl.rt_b.middle -> (a non-agentrl frame) -> agentrl.rt_a.back
    a = _module("agentrl.rt_a", "def outer(b, via):\n    return b.middle(via)\n\ndef back():\n    return 1\n")
    b = _module("agentrl.rt_b", "def middle(via):\n    return via()\n\ndef down():\n    return 2\n")
    with CallStacks() as calls:
        a.outer(b, lambda: a.back())  # the lambda is this test's: dropped, so a -> b -> a remains
    assert round_trips(calls.stacks) == {"rt_a -> rt_b -> rt_a [back]": "rt_a:outer | rt_b:middle | rt_a:back"}
    with CallStacks() as calls:
        a.outer(b, b.down)  # a -> b -> b: data passed down, no trip
    assert round_trips(calls.stacks) == {}
    assert ("agentrl.rt_a", "outer") in next(iter(calls.stacks))
    # stacks whose agentrl frames are one run per module, with foreign frames between, are fine
    assert round_trips({(("agentrl.x", "f"), ("agentrl.x", "g"), ("agentrl.y", "h"))}) == {}


# ---------------------------------------------------------------------- real training steps
def test_sync_steps_visit_each_module_once(tmp_path, tiny_model_dir, traced):
    from test_trainer import make_cfg, make_trainer

    for d in ("grpo", "appo"):
        (tmp_path / d).mkdir()
    # a KL term and two iterations per batch: old and reference log-probs per micro-batch
    make_trainer(make_cfg(tmp_path / "grpo", tiny_model_dir, beta=0.04, num_iterations=2, max_steps=2)).train()
    make_trainer(make_cfg(tmp_path / "appo", tiny_model_dir, context_mode="trajectory", algorithm="appo",
                          credit="appo", beta=0.001, max_steps=1,
                          algorithm_kwargs={"budget": 2, "omega_baseline": "behaviour"})).train()
    _check(traced)
    seen = traced.functions()
    # the walk covered the iteration batch, from the source to the loss
    for fn in ("trainer.agent_trainer:AgentGRPOTrainer._prepare_inputs",
               "trainer.agent_trainer:AgentGRPOTrainer._gather_and_credit",
               "trainer.agent_trainer:AgentGRPOTrainer._compute_loss",
               "producer.sync:SyncSource.next", "producer.generation:PolicyGeneration.__call__",
               "rollout.contexts:WindowContext.first_prompt", "rollout.env_batch:TimedEnvs.__getattr__",
               "algorithms.runner:UpdateRunner.rows", "algorithms.runner:UpdateRunner.micro_batches",
               "trainer.update:old_logps", "trainer.views:Reference.__call__", "trainer.views:Scorer.__call__",
               "losses:compute", "losses.policy:clipped_surrogate", "losses.terms:masked_mean",
               "rollout.failures:EnvFailureWatch.observe", "trainer.guard:NonFiniteGuard.end_step"):
        assert fn in seen, (fn, sorted(seen))


def test_collaboration_steps_visit_each_module_once(tmp_path, traced):
    import importlib.util

    import yaml

    from agentrl.config import load_recipe
    from agentrl.models import build_tiny_model
    from agentrl.train import build_trainer

    spec = importlib.util.spec_from_file_location("collab_conftest", REPO / "tests" / "collab" / "conftest.py")
    collab_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collab_conftest)
    model = build_tiny_model(tmp_path / "m", texts=collab_conftest.MATH_CORPUS, vocab_size=400, hidden_size=32,
                             num_layers=2, num_heads=2, num_kv_heads=1)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(dict(
        env_id="agentrl-test/ParityMath-v0", env_modules=["parity_math"], task_split="",
        env_kwargs={"tasks": ["basic_arithmetic"], "size": 16}, credit="ccpo", algorithm="collab",
        algorithm_kwargs={"collab": "think_solve", "policies": "full", "role_schedule": "blocks",
                          "role_block_steps": 2},  # a rollout trains one role
        num_tasks=4, num_generations=2, per_device_train_batch_size=4, max_completion_length=6, max_steps=4,
        num_iterations=2, beta=0.04, bf16=False, report_to="none", use_cpu=True, seed=0, disable_tqdm=True,
        save_strategy="no", model_name_or_path=str(model), output_dir=str(tmp_path / "out"))))
    build_trainer(load_recipe(str(recipe))).train()
    _check(traced)
    seen = traced.functions()
    for fn in ("algorithms.collab_runner:CollabRunner.rows", "algorithms.collab_runner:CollabRunner.begin_micro_step",
               "trainer.update:old_logps", "trainer.agent_trainer:AgentGRPOTrainer._compute_loss"):
        assert fn in seen, (fn, sorted(seen))


def test_async_steps_visit_each_module_once(tmp_path, tiny_model_dir, traced):
    from test_trainer import make_cfg, make_trainer

    make_trainer(make_cfg(tmp_path, tiny_model_dir, rollout_mode="async", max_staleness=1, max_steps=2)).train()
    _check(traced)
    seen = traced.functions()
    for fn in ("producer.async_source:AsyncSource.next", "trainer.agent_trainer:AgentGRPOTrainer._compute_loss",
               "algorithms.runner:UpdateRunner.micro_batches"):
        assert fn in seen, (fn, sorted(seen))
