"""AgentGRPOTrainer: TRL's GRPOTrainer with multi-turn env rollouts. See README.md here."""

from agentrl.trainer.agent_trainer import (
    AgentGRPOTrainer,
    RolloutHooks,
    build_task_dataset,
    compute_credit,
    credit_kwargs,
    credit_requirements,
)
from agentrl.trainer.collab_trainer import CollabTrainer

__all__ = ["AgentGRPOTrainer", "CollabTrainer", "RolloutHooks", "build_task_dataset", "compute_credit", "credit_kwargs",
           "credit_requirements"]
