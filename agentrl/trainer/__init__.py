"""AgentGRPOTrainer: TRL's GRPOTrainer with multi-turn env rollouts. See README.md here."""

from agentrl.trainer.agent_trainer import AgentGRPOTrainer, build_task_dataset
from agentrl.trainer.credited import credit_requirements

__all__ = ["AgentGRPOTrainer", "build_task_dataset", "credit_requirements"]
