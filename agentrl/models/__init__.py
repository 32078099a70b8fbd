"""Model sources that work offline: the embedded SmolLM2 and tiny from-scratch Qwen2 models."""

from agentrl.models.registry import EMBEDDED_MODELS, resolve_model
from agentrl.models.tiny import build_tiny_model, model_or_tiny, train_tokenizer

__all__ = ["EMBEDDED_MODELS", "resolve_model", "build_tiny_model", "model_or_tiny", "train_tokenizer"]
