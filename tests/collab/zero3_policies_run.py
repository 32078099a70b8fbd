"""``python -m agentrl.train`` plus a callback that records every policy's full weights (trainable
parameters, gathered from the ZeRO-3 partitions) at the start of training and after every
optimizer step, into ``<output_dir>/policy_snapshots.pt`` (rank 0). Used under ``accelerate
launch`` by ``test_collab_zero3_policies.py``."""

from __future__ import annotations

import sys

import torch
from transformers import TrainerCallback

import agentrl.train as train


class Snapshots(TrainerCallback):
    def __init__(self, trainer):
        self.trainer = trainer
        self.snaps: list[dict] = []

    def snap(self, step: int) -> None:
        import deepspeed

        tr = self.trainer
        named = [(n, p) for n, p in tr.model.named_parameters() if p.requires_grad]
        got = {}
        for name in tr.algorithm.policies.names:
            with tr.algorithm.policies.use_policy(name), deepspeed.zero.GatheredParameters([p for _, p in named]):
                got[name] = {n: p.detach().clone() for n, p in named}
        self.snaps.append({"step": step, "trained": tr.algorithm.policies.swaps.trained, "weights": got})

    def on_train_begin(self, args, state, control, **kw):
        self.snap(state.global_step)

    def on_step_end(self, args, state, control, **kw):
        self.snap(state.global_step)

    def on_train_end(self, args, state, control, **kw):
        if self.trainer.accelerator.is_main_process:
            torch.save(self.snaps, f"{args.output_dir}/policy_snapshots.pt")


_install = train._install_callbacks


def _install_with_snapshots(trainer) -> None:
    _install(trainer)
    trainer.add_callback(Snapshots(trainer))


train._install_callbacks = _install_with_snapshots

if __name__ == "__main__":
    sys.exit(train.main(sys.argv[1:]))
