"""The asynchronous producer's process: its own copy of the policy plays the iterations ahead of
the learner (``agentrl.producer.async_source`` starts it and talks to it).

It builds the policy from the run's model folder, loads the weights the learner ships (the whole
model, or only the adapter under LoRA), and plays iteration b, for b = first, first + 1, ..., with
the weights of policy version ``max(0, b - k)`` (``k`` = ``max_staleness``): it waits for that
version when it has not arrived, and drops the versions it will not need again. An iteration is
played exactly as the synchronous source plays it (``SyncSource.next`` on a ``Player`` over this
process's model and env batch; sampling keyed on the iteration, not on the process), so at k = 0
the episodes are the synchronous run's, and at any k a given (weights, iteration) pair gives the
same episodes wherever it runs. Each episode leaves tagged with its policy version.

Messages in (``cmd``): ``("weights", version, tensors)``, ``("stop",)``, ``("snapshot",)`` (continuous
mode: the episodes in flight, for a checkpoint). Out (``out``): ``("batch", b, payload)``,
``("inflight", state)``, ``("error", text)``. ``heartbeat`` (a shared double) holds the time of
the last sign of progress: a generate call, an iteration's end, a poll while waiting for weights.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

_DISTRIBUTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                    "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")


@dataclass
class ProducerSpec:
    """Everything the producer's process needs, picklable (no trainer, no accelerator)."""

    config: dict[str, Any]
    """The run's config values (rollout keys, credit, algorithm, seed, ...)."""
    model_path: str
    model_init_kwargs: dict[str, Any]
    peft_config: Any
    """A ``peft.LoraConfig`` when the policy is an adapter, else None."""
    generation_config: Any
    generation_kwargs: dict[str, Any] | None
    pad_id: int
    eos_ids: list[int]
    pad_to_multiple_of: int | None
    fingerprint_layer: int | None
    autocast: str | None
    """'bfloat16' / 'float16' when the learner trains in mixed precision (generation under autocast)."""
    sampler_dtype: Any
    """The recipe's ``sampler_dtype`` as a torch dtype (None: the policy's own)."""
    plan: Any
    """The run's ``TaskPlan``."""
    rank: int
    world: int
    max_staleness: int
    first_iteration: int
    threads: int = 1
    env_modules: list[str] = field(default_factory=list)
    sys_path: list[str] = field(default_factory=list)
    vllm: dict[str, Any] | None = None
    """``VLLMEngine``'s keywords when the run's ``use_vllm`` is served by it: the producer then owns an
    engine, and each version it loads reaches the engine before that version's first generate
    (``PolicyGeneration``: the whole model's weights, a LoRA adapter merged into its base)."""
    inflight: dict[str, Any] | None = None
    """``producer_mode: continuous``: a checkpoint's episodes in flight (``ContinuousMode``), to go on
    with when ``first_iteration`` is the one they were saved before."""


def producer_main(spec: ProducerSpec, cmd, out, heartbeat) -> None:
    """The process's entry point (module docstring)."""
    from agentrl_envs.child import die_with_parent

    die_with_parent()  # a killed learner takes its producer with it
    for k in list(os.environ):
        if k in _DISTRIBUTED_ENV or k.startswith(("ACCELERATE_", "DEEPSPEED")):
            del os.environ[k]
    sys.path[:] = list(dict.fromkeys(spec.sys_path + sys.path))
    try:
        Producer(spec, cmd, out, heartbeat).run()
    except Exception:  # the learner reports it in one line and stops with a resumable checkpoint
        out.put(("error", traceback.format_exc(limit=8)))
        raise SystemExit(1) from None


class Producer:
    """The loop of the producer's process (module docstring)."""

    def __init__(self, spec: ProducerSpec, cmd, out, heartbeat):
        import importlib
        from types import SimpleNamespace

        import torch

        torch.set_num_threads(max(1, spec.threads))
        for m in spec.env_modules:
            importlib.import_module(m)
        self.spec, self.cmd, self.out, self.heartbeat = spec, cmd, out, heartbeat
        self.config = SimpleNamespace(**spec.config)
        self.versions: dict[int, dict[str, Any]] = {}
        self.loaded: int | None = None
        self.stopped = False
        self.snapshot_asked = False
        self.answer_snapshot = None
        """Set by a play mode that can answer ``("snapshot",)`` (called while waiting for weights too)."""
        self.model = self._model()
        self.source = self._source()
        heartbeat.value = time.time()  # ready: from here on, silence means a hang

    # ------------------------------------------------------------------ setup
    def _model(self):
        from trl.trainer.utils import create_model_from_path

        s = self.spec
        model = create_model_from_path(s.model_path, **dict(s.model_init_kwargs or {}))
        if s.peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, s.peft_config)
        model.eval()
        return model

    def _source(self):
        from accelerate import Accelerator

        from agentrl.algorithms import get_algorithm
        from agentrl.producer.generation import GenerationSetup, PolicyGeneration
        from agentrl.producer.player import Player
        from agentrl.producer.sync import SyncSource
        from agentrl.rollout.ranks import Ranks

        s, c = self.spec, self.config
        accelerator = Accelerator(cpu=True)
        setup = GenerationSetup(model=lambda: self.model, accelerator=accelerator, pad_id=s.pad_id, eos_ids=s.eos_ids,
                                generation_config=s.generation_config, generation_kwargs=s.generation_kwargs,
                                pad_to_multiple_of=s.pad_to_multiple_of, fingerprint_layer=s.fingerprint_layer,
                                sampler_dtype=s.sampler_dtype, seed=c.seed, rank=s.rank,
                                **self._vllm_engine())
        generation = PolicyGeneration(setup, version=lambda: self.loaded or 0)
        generation._completions = self._beating(generation._completions)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(s.model_path)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        # alone in its process: no collectives, each rank's producer plays its own tasks
        player = Player(c, generation, tok, Ranks(s.rank, 1, s.rank == 0), score=None, progress=False)
        algorithm = get_algorithm(c.algorithm_name)(c)
        return SyncSource(player, algorithm, c.valid_action_reward)

    def _vllm_engine(self) -> dict[str, Any]:
        """The vLLM engine's setup keys (none when the run generates with transformers)."""
        if self.spec.vllm is None:
            return {}
        from agentrl.sampling.vllm_engine import VLLMEngine

        self.engine = VLLMEngine(**self.spec.vllm)
        return {"engine": "vllm", "vllm": self.engine}

    def _beating(self, fn):
        def beating(*a, **kw):
            self.heartbeat.value = time.time()
            return fn(*a, **kw)
        return beating

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        if getattr(self.config, "producer_mode", "lockstep") == "continuous":
            from agentrl.producer.continuous import ContinuousMode

            ContinuousMode(self).run()
        else:
            self._lockstep()
        if getattr(self, "engine", None) is not None:
            self.engine.close()

    def _lockstep(self) -> None:
        """``producer_mode: lockstep``: iteration after iteration, each played whole (module docstring)."""
        b = self.spec.first_iteration
        while not self.stopped:
            need = max(0, b - self.spec.max_staleness)
            t0 = time.perf_counter()
            if not self._wait_for(need):
                break
            waited = time.perf_counter() - t0
            self._load(need)
            self.out.put(("batch", b, self._play(b, need, waited)))
            self.heartbeat.value = time.time()
            b += 1

    def _wait_for(self, version: int) -> bool:
        """Take messages until ``version``'s weights are here (False: asked to stop)."""
        import queue

        parent = os.getppid()
        while not self.stopped:
            self._drain(block=False)
            if self.snapshot_asked and self.answer_snapshot is not None:
                self.answer_snapshot()  # the learner's save waits for it, and the weights wait for the save
            if version in self.versions:
                return True
            if os.getppid() != parent:  # the learner is gone (where the kernel cannot tell us)
                return False
            self.heartbeat.value = time.time()
            try:
                self._handle(self.cmd.get(timeout=0.5))
            except queue.Empty:
                pass
        return False

    def _drain(self, block: bool) -> None:
        import queue

        while True:
            try:
                self._handle(self.cmd.get(block=block))
            except queue.Empty:
                return

    def _handle(self, msg) -> None:
        if msg[0] == "weights":
            self.versions[int(msg[1])] = msg[2]
        elif msg[0] == "stop":
            self.stopped = True
        elif msg[0] == "snapshot":
            self.snapshot_asked = True

    def _load(self, version: int) -> None:
        """The policy's weights to ``version`` (versions before it are dropped: never needed again)."""
        from agentrl.producer.wire import unflat_weights

        if self.loaded != version:
            _, unexpected = self.model.load_state_dict(unflat_weights(self.versions[version]), strict=False)
            if unexpected:
                raise RuntimeError(f"the learner's weights name parameters this policy lacks: {unexpected[:3]}")
            self.loaded = version
        for v in [v for v in self.versions if v < version]:
            del self.versions[v]

    def _play(self, b: int, version: int, waited: float) -> dict[str, Any]:
        """Iteration ``b`` played with the loaded weights, as the learner receives it."""
        import contextlib

        import torch

        from agentrl.producer.wire import pack_episodes

        s = self.spec
        rows = s.plan.rows(b, s.rank)
        t0 = time.perf_counter()
        cast = (torch.autocast("cpu", dtype=getattr(torch, s.autocast)) if s.autocast
                else contextlib.nullcontext())
        with cast:
            batch = self.source.next(rows, b, training=True, version=version)
        return {"episodes": pack_episodes(batch.episodes), "version": version, "times": batch.times,
                "sampler_differs": batch.sampler_differs, "busy_s": time.perf_counter() - t0, "waited_s": waited}
