"""agentrl: multi-turn RL for LLM agents with swappable step-level credit assignment."""

__version__ = "0.1.0"
