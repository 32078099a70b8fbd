"""One sampler behind every generate call: a ``SamplingSpec`` built once from the recipe and an
``Engine`` that draws tokens under it (``HFEngine`` here; vLLM beside it).

    spec.py       SamplingSpec (temperature, top-k, top-p, min-p, repetition penalty, max new
                  tokens, end tokens, greedy), end_token_ids, the Engine protocol (generate;
                  submit + poll: requests that finish on their own, Finished)
    keys.py       keyed sampling: sampling_seed(*key), keyed_rng(seed)
    hf.py         HFEngine (generate, stream, submit/poll), hf_sample, hf_stream, Drawn, left_pad,
                  generation_config, sample_with_logprobs, cut_rows
    processed.py  the learner's log-probs under the sampler's processing (the rollout correction)

A rollout-layer package: it imports nothing from the trainer, the producer or the apps.
"""

from agentrl.sampling.hf import (
    Drawn,
    HFEngine,
    cut_rows,
    generation_config,
    hf_sample,
    hf_stream,
    left_pad,
    pad_id_of,
    sample_with_logprobs,
)
from agentrl.sampling.keys import keyed_rng, sampling_seed
from agentrl.sampling.processed import processed_logits, processed_logprobs
from agentrl.sampling.spec import Engine, Finished, SamplingSpec, end_token_ids

__all__ = ["Drawn", "Engine", "Finished", "HFEngine", "SamplingSpec", "cut_rows", "end_token_ids", "generation_config",
           "hf_sample", "hf_stream", "keyed_rng", "left_pad", "pad_id_of", "processed_logits", "processed_logprobs",
           "sample_with_logprobs", "sampling_seed"]
