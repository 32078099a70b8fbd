"""The rollout sources the trainer builds that need more than its handle: the asynchronous
producer's spec and source (``agentrl.producer.async_source``), from explicit inputs."""

from __future__ import annotations

import sys
from typing import Any

from agentrl.config import config_keys
from agentrl.models.lora import build_peft_config
from agentrl.recipe_file import RecipeError
from agentrl.rollout.ranks import Ranks
from agentrl.trainer.views import WeightsView


def _picklable(values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that pickle (a producer process gets them)."""
    import pickle

    out = {}
    for k, v in values.items():
        try:
            pickle.dumps(v)
        except Exception:  # noqa: BLE001  (an object of the launcher's: the producer does not need it)
            continue
        out[k] = v
    return out


def async_source(a, *, model_path, algorithm_name: str, train_dataset, accelerator, eval_source, learner_state,
                 tokenizer, vllm_engine: bool, zero3: bool):
    """A producer process per rank with the model folder, the sampling settings of the run's
    synchronous player (``eval_source``) and the run's task plan; the learner's weights shipped
    through a ``WeightsView`` of its state."""
    from agentrl.producer.async_source import AsyncSettings, AsyncSource
    from agentrl.producer.plan import TaskPlan
    from agentrl.producer.worker import ProducerSpec
    from agentrl.sampling.vllm_engine import engine_settings

    ranks = Ranks.of(accelerator)
    if not model_path:
        raise RecipeError("rollout_mode async needs the model as a folder (the producer loads it)")
    init = {k: v for k, v in dict(a.model_init_kwargs or {}).items() if k != "device_map"}
    gen = eval_source.player.generation.setup
    spec = ProducerSpec(
        config={**_picklable({k: getattr(a, k) for k in config_keys()}), "algorithm_name": algorithm_name},
        model_path=str(model_path), model_init_kwargs=init, peft_config=build_peft_config(a),
        generation_config=gen.generation_config, generation_kwargs=gen.generation_kwargs, pad_id=gen.pad_id,
        eos_ids=gen.eos_ids, pad_to_multiple_of=gen.pad_to_multiple_of, fingerprint_layer=gen.fingerprint_layer,
        autocast="bfloat16" if a.bf16 else "float16" if a.fp16 else None, sampler_dtype=gen.sampler_dtype,
        plan=TaskPlan.of(train_dataset, a, ranks.world), rank=ranks.rank, world=ranks.world,
        max_staleness=a.max_staleness, first_iteration=0, threads=a.async_producer_threads,
        env_modules=list(a.env_modules or []), sys_path=list(sys.path),
        vllm=engine_settings(a, model_path) if vllm_engine else None)
    weights = WeightsView(learner_state, accelerator, adapter_only=bool(a.use_peft), zero3=zero3)
    return AsyncSource(spec, AsyncSettings.of(a), ranks, weights=weights, tokenizer=tokenizer,
                       context_settings=eval_source.player.settings, evaluation=eval_source)
