"""Eq. 7's future-aware weight inside TRL's loss (APPO, arXiv:2606.12384).

A~_t = A_t (1 + b f_t), f_t = clip(exp(FutureKL_t)), FutureKL_t = sum_{k >= t} gamma^(k-t) Delta_k,
Delta_k = log pi_theta(y_k) - log pi_old(y_k) of the micro-batch being trained on (the numbers are
``agentrl.credit.appo.future_kl`` / ``future_weight`` / ``future_aware_advantages``, exact-value
tested there). f is computed from detached log-probs, so it scales the advantage and adds no
gradient path of its own.

How it gets into TRL 1.16's ``GRPOTrainer._compute_loss`` without copying it: that method runs
the forward (``_get_per_token_logps_and_entropies``) first and reads ``inputs["advantages"]`` only
after it. ``_compute_loss`` here hands TRL a shallow copy of the micro-batch and arms a one-shot
flag; the next ``_get_per_token_logps_and_entropies`` call (TRL's own forward of the loss) returns
its log-probs unchanged and, on the way out, replaces the copy's ``advantages`` by A~. The rest
of TRL's loss (clipping, KL, normalisation) is untouched, and the buffered micro-batch keeps its
plain advantages (TRL reuses it for ``num_iterations`` > 1). ``tests/trainer/test_appo_contract.py``
pins the source order this relies on.

With one PPO epoch and ``steps_per_generation <= gradient_accumulation_steps`` TRL passes no old
log-probs (pi_old = pi_theta), so Delta = 0, f = 1 exactly (high-only) and A~ = (1 + b) A.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agentrl.credit import appo as F


class FutureAwareLoss:
    """Mixin for a GRPOTrainer subclass: Eq. 7 on the advantages of each loss micro-batch.

    The subclass sets ``appo_kwargs`` (the resolved ``appo`` credit kwargs: ``b``, ``decay``,
    ``clip_eps``, ``high_only``, ``safety_ratio``). ``last_future`` keeps the latest micro-batch's
    inputs and outputs of the weight (numpy), for tests and tools; its ``weight`` and the
    ``appo/future_weight_*`` metrics are f after the safety clamp, the f the loss used.
    """

    appo_kwargs: dict[str, Any]
    _future_inputs: dict[str, Any] | None = None
    last_future: dict[str, np.ndarray] | None = None

    def _compute_loss(self, model, inputs):
        if not self.appo_kwargs.get("b"):
            return super()._compute_loss(model, inputs)
        inputs = dict(inputs)  # TRL's buffered micro-batch keeps its plain advantages
        self._future_inputs = inputs
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._future_inputs = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                         *args, **kwargs)
        inputs, self._future_inputs = self._future_inputs, None  # one shot: the loss's own forward
        if inputs is not None:
            inputs["advantages"] = self._future_aware(out[0].detach(), inputs)
        return out

    def _future_aware(self, logps: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        """A~ of one micro-batch from its current log-probs (Eq. 7, the credit module's functions)."""
        kw = self.appo_kwargs
        adv_t = inputs["advantages"]
        adv = adv_t.detach().float().cpu().numpy()
        if adv.ndim == 1:
            adv = np.repeat(adv[:, None], logps.size(1), axis=1)
        mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
        lp = logps.float().cpu().numpy()
        old_t = inputs.get("old_per_token_logps")
        old = lp if old_t is None else old_t.detach().float().cpu().numpy()
        m = mask.detach().cpu().numpy().astype(bool)
        fkl = F.future_kl(lp, old, m, F.gamma_from_decay(kw["decay"]))
        ratio = np.exp(np.clip(lp - old, -F.LOG_CLAMP, F.LOG_CLAMP))
        # the weight the loss uses: after the negative-advantage safety clamp (the metrics too)
        f = F.safe_future_weight(adv, F.future_weight(fkl, kw["clip_eps"], kw["high_only"]), ratio,
                                 kw["safety_ratio"] or None)
        new = F.future_aware_advantages(adv, f, None, kw["b"])
        self.last_future = {"advantages": adv, "weight": f, "logps": lp, "old_logps": old, "mask": m,
                            "weighted": new}
        mode = "train" if self.model.training else "eval"
        if m.any():
            self._metrics[mode]["appo/future_weight_mean"].append(float(f[m].mean()))
            self._metrics[mode]["appo/future_weight_max"].append(float(f[m].max()))
        return torch.as_tensor(new, dtype=adv_t.dtype, device=adv_t.device)
