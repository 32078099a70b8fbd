"""The trainer's own callbacks in TRL's loop (``AgentGRPOTrainer`` adds them when it is built)."""

from __future__ import annotations

from transformers import TrainerCallback


class SyncOnTrainBegin(TrainerCallback):
    """Brings the learner state up to date (``sync``) when TRL's loop begins training."""

    def __init__(self, sync):
        self.sync = sync

    def on_train_begin(self, args, state, control, **kwargs):
        self.sync()


class PublishWeights(TrainerCallback):
    """Tells the rollout source the learner's policy version after every optimizer step."""

    def __init__(self, source):
        self.source = source

    def on_step_end(self, args, state, control, **kwargs):
        self.source.publish(state.global_step)
