"""The producer: what is played, behind one interface the learner consumes.

A rollout source yields one ``RolloutBatch`` per iteration (this rank's episodes, the policy
version that played them, what it cost); the learner (``agentrl.trainer``) turns it into credit,
rows and an update, and ``publish``es its weights' version after every optimizer step. The
algorithm's producer-side hooks (``roll_out``, ``shape_rewards``) receive a ``Player``: play tasks,
generate, the tokenizer, the settings, a lock-step collective; never the trainer.

``SyncSource`` (``sync``) plays in the learner's process on its current weights.
"""

from agentrl.producer.batch import RolloutBatch, RolloutSource
from agentrl.producer.generation import GenerationSetup, PolicyGeneration
from agentrl.producer.player import Player, Ranks, shape_rewards
from agentrl.producer.sync import SyncSource, build_tasks

__all__ = ["GenerationSetup", "Player", "PolicyGeneration", "Ranks", "RolloutBatch", "RolloutSource",
           "SyncSource", "build_tasks", "shape_rewards"]
