"""A test plug-in (recipe ``env_modules: [faults]``, ``algorithm: faulty``): the default algorithm
with a NaN or inf injected at chosen optimizer steps, into the loss or into one entry of a parameter's
gradient, on every rank or one. Its metric ``faulty/param_sum`` (the sum of this rank's share of
every trainable weight, taken at the start of each step's rollout) shows whether a step changed
the weights.

    algorithm_kwargs: {where: loss | grad, value: nan | inf, steps: [2, 3], rank: -1}
"""

from __future__ import annotations

import torch

from agentrl.algorithms import Algorithm, register_algorithm
from agentrl.losses import LossBatch, LossOutput, LossSettings, get_policy_loss, register_policy_loss
from agentrl.registry import Param


@register_algorithm("faulty")
class Faulty(Algorithm):
    params = {
        "where": Param("loss", "'loss' or 'grad' (one parameter's gradient)", "choice", ("loss", "grad")),
        "value": Param("nan", "what is injected", "choice", ("nan", "inf")),
        "steps": Param([2], "optimizer steps (1-based) that get it", "any"),
        "rank": Param(-1, "the rank that injects (-1: every rank)", "int", lo=-1),
        "param": Param("model.layers.0.mlp.down_proj.weight", "the parameter one entry of whose gradient gets it", "str"),
    }

    def bind(self, player, learner) -> None:
        self.learner = learner
        if self.kwargs["where"] == "grad":
            params = dict(learner.model.named_parameters())
            params[self.kwargs["param"]].register_hook(self.poison_one_entry)

    def poison(self) -> float:
        """The factor of this moment: the injected value at a chosen step on a chosen rank, else 1."""
        lr = self.learner
        step = lr.step + 1
        rank = self.kwargs["rank"]
        hit = step in self.kwargs["steps"] and rank in (-1, lr.ranks.rank) and lr.training
        return float(self.kwargs["value"]) if hit else 1.0

    def poison_one_entry(self, grad: torch.Tensor) -> torch.Tensor:
        """The gradient with its first entry times the factor (one bad entry of a large tensor)."""
        factor = self.poison()
        if factor == 1.0:
            return grad
        grad = grad.clone()
        grad.view(-1)[0] = grad.view(-1)[0] * factor if grad.view(-1)[0] != 0 else factor
        return grad

    def loss(self, config):
        return "faulty_dapo", {"poison": self.poison if self.kwargs["where"] == "loss" else (lambda: 1.0)}

    def metrics(self, step: int) -> dict[str, float]:
        with torch.no_grad():
            total = sum(float(getattr(p, "ds_tensor", p).double().sum()) for p in self.learner.model.parameters()
                        if p.requires_grad)
        return {"faulty/param_sum": total}


@register_policy_loss("faulty_dapo")
def faulty_dapo(b: LossBatch, s: LossSettings) -> LossOutput:
    out = get_policy_loss("dapo")(b, s)
    out.loss = out.loss * s.options["poison"]()
    return out
