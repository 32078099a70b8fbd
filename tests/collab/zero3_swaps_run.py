"""Under ``accelerate launch`` (2 processes, ZeRO-3): ``Zero3SwappedPolicies`` on a small model against
two independent copies, each with its own AdamW. Every rank gets the same inputs, so the averaged
gradient is each rank's own and the copies are the exact reference. Writes ``result.pt`` (rank 0)
into the folder given as argument: the largest difference per policy, and whether a parked policy
ever changed. Used by ``test_collab_zero3_policies.py``."""

from __future__ import annotations

import copy
import sys

import deepspeed
import torch
from accelerate import Accelerator

from agentrl.policies.swap_zero3 import Zero3SwappedPolicies

SCHEDULE = ["a", "b", "b", "a", "a", "b", "a"]
"""The policy trained at each optimizer step: switches in both directions, runs of several steps."""


def main(out: str, dtype: str = "fp32") -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 40), torch.nn.Tanh(), torch.nn.LayerNorm(40),
                                torch.nn.Linear(40, 3))
    model[2].weight.requires_grad_(False)  # a frozen parameter stays shared
    refs = {name: copy.deepcopy(model) for name in ("a", "b")}
    kw = dict(lr=0.05, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)
    ropts = {n: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], **kw) for n, m in refs.items()}
    acc = Accelerator()  # the process group and DeepSpeed's CPU accelerator, as the trainer has them
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], **kw)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 0.0,
              "zero_allow_untested_optimizer": True,
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 50}}  # biases persistent
    if dtype == "bf16":  # bf16 partitions and separate fp32 master partitions
        config["bf16"] = {"enabled": True}
    engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    z = opt
    masters_apart = all(a.data_ptr() != b.data_ptr() for a, b in zip(z.fp16_partitioned_groups_flat,
                                                                     z.fp32_partitioned_groups_flat, strict=True))
    masters_back = True
    swaps = Zero3SwappedPolicies(("a", "b"), lambda: opt)
    trainable = [(n, p) for n, p in engine.module.named_parameters() if p.requires_grad]

    def weights(name):
        with swaps.use(name), deepspeed.zero.GatheredParameters([p for _, p in trainable]):
            return {n: p.detach().clone() for n, p in trainable}

    parked_changed = False
    g = torch.Generator().manual_seed(1)
    for step, name in enumerate(SCHEDULE):
        x = torch.randn(5, 6, generator=g).to(next(engine.module.parameters()).dtype)
        other = "b" if name == "a" else "a"
        before = weights(other)
        masters = [f.clone() for f in z.fp32_partitioned_groups_flat]
        with swaps.use(other):  # a generation with the other policy
            engine(x)
        masters_back &= all(torch.equal(a, b) for a, b in zip(masters, z.fp32_partitioned_groups_flat, strict=True))
        swaps.activate(name)
        loss = engine(x).pow(2).mean() + step * 0.1 * engine(x).sum()
        engine.backward(loss)
        engine.step()
        parked_changed |= any(not torch.equal(before[n], w) for n, w in weights(other).items())
        m = refs[name]
        x = x.float()
        rloss = m(x).pow(2).mean() + step * 0.1 * m(x).sum()
        rloss.backward()
        ropts[name].step()
        ropts[name].zero_grad()
    diff = {}
    for name, m in refs.items():
        want = dict(m.named_parameters())
        got = weights(name)
        diff[name] = max((got[n] - want[n]).abs().max().item() for n in got)
    moved = max((weights("a")[n] - weights("b")[n]).abs().max().item() for n, _ in trainable)
    if acc.is_main_process:
        torch.save({"diff": diff, "parked_changed": parked_changed, "a_vs_b": moved,
                    "masters_apart": masters_apart, "masters_back": masters_back}, f"{out}/result.pt")
    # every rank leaves together and closes the group: a rank that exits while the group's threads
    # still run can abort ("terminate called without an active exception") after the result is saved
    acc.wait_for_everyone()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
