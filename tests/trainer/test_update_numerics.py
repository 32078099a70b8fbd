"""The numerics of the update that made the card's recipe diverge on an H100, pinned on CPU.

On one H100 (torch 2.11, cuDNN attention, the default SDPA backend there) the BiPACE TextCraft
1.5B recipe got a NaN gradient at step 2 with a finite loss. cuDNN's SDPA backward returns NaN
in dQ for a query row whose log-sum-exp is below -ln(FLT_MAX) when an explicit mask is passed and
the sequence length is 64 mod 128 (pytorch/pytorch#196678). A query row whose keys are *all*
masked has log-sum-exp -inf: the update's forward had such rows because prompts were
left-padded (every pad position of a shorter row sees only pad keys). The NaN in dQ of a masked
row reaches every weight of the attention's query projection through the shared matmul, so the
gradient is NaN although the loss never reads that row. These tests pin the two properties of
our update that remove the trigger, on real tiny-model runs:

1. no attention call of the update (policy, old and reference log-probs) sees a query row with
   every key masked;
2. policy and reference log-probs are computed on the same tensors, so with equal weights the
   KL term is exactly 0 at step 1 (it was 6.5e-5 on the GPU and 8e-8 on CPU in bf16 before:
   the reference saw the whole batch's padding, the policy each micro-batch's).

Runtime: ~20 s.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from test_trainer import make_cfg, make_trainer

# prompts of several lengths (history grows over the episode) in every micro-batch
MIXED = dict(max_turns=6, task_options={"length": 5, "parity": True}, per_device_train_batch_size=8,
             num_generations=4, gradient_accumulation_steps=2, steps_per_generation=2, max_steps=2, beta=0.01)


class AttentionSpy:
    """Wraps torch's SDPA: counts the calls with a mask and the query rows whose keys are all masked."""

    def __init__(self):
        self.calls = 0
        self.masked_calls = 0
        self.dead_rows = 0
        self.paused = False
        self._sdpa = F.scaled_dot_product_attention

    def __call__(self, query, key, value, attn_mask=None, *args, **kwargs):
        if self.paused:
            return self._sdpa(query, key, value, attn_mask, *args, **kwargs)
        self.calls += 1
        if attn_mask is not None:
            self.masked_calls += 1
            allowed = attn_mask if attn_mask.dtype == torch.bool else attn_mask > torch.finfo(attn_mask.dtype).min
            self.dead_rows += int((~allowed.any(-1)).sum())
        return self._sdpa(query, key, value, attn_mask, *args, **kwargs)

    def pausing(self, fn):
        """``fn`` with the spy off: generation's prompts are left-padded too, but generation
        has no backward (the bug is in the backward kernel)."""
        def call(*a, **kw):
            self.paused = True
            try:
                return fn(*a, **kw)
            finally:
                self.paused = False
        return call


def test_no_attention_row_of_the_update_is_fully_masked(tmp_path, tiny_model_dir, monkeypatch):
    cfg = make_cfg(tmp_path, tiny_model_dir, **MIXED)
    tr = make_trainer(cfg)
    spy = AttentionSpy()
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    gen = tr.source.player.generation
    monkeypatch.setattr(gen, "_completions", spy.pausing(gen._completions))
    tr.train()
    assert spy.calls > 0 and spy.masked_calls > 0, "the update ran no masked attention: the test proves nothing"
    assert spy.dead_rows == 0, f"{spy.dead_rows} query rows with every key masked in {spy.masked_calls} calls"


@pytest.mark.parametrize("bf16", [False, True])
def test_kl_is_exactly_zero_while_policy_equals_reference(tmp_path, tiny_model_dir, bf16):
    # step 1: the policy's weights are the reference's, so every token's k3 KL term
    # exp(r - l) - (r - l) - 1 is 0 when both forwards see the same tensors
    cfg = make_cfg(tmp_path, tiny_model_dir, **dict(MIXED, max_steps=1, bf16=bf16))
    tr = make_trainer(cfg)
    tr.train()
    kls = [h["kl"] for h in tr.state.log_history if "kl" in h]
    assert kls and all(math.isfinite(k) for k in kls)
    assert kls[0] == 0.0, f"kl {kls[0]!r} at step 1 with the policy equal to the reference"
