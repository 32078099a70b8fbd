"""Several policies on one set of model parameters: swap in the one that generates or trains.

A collaboration names a policy per role (``agentrl.collab``). With one policy name, every role
is played by the trainer's model (the shared baseline). With several, each policy has its own
weights (``full``: every parameter; ``lora``: its own LoRA adapter on the shared frozen base),
and the trainer's model parameters hold exactly one policy at a time, the *loaded* one:

* The other policies' trainable tensors are *parked*: same-device copies keyed by parameter
  name. ``use(name)`` swaps a policy's tensors into the model for a generation and back after
  (weights only). ``activate(name)`` makes ``name`` the trained policy: its weights AND its
  optimizer state (AdamW's ``exp_avg``, ``exp_avg_sq``, ``step`` per parameter) go into the
  model and the optimizer, the previous policy's are parked.
* Swaps are ``copy_`` of tensors (no arithmetic), so a parked policy comes back bit for bit;
  its optimizer state is not stepped while parked, so Adam's bias correction and moments resume
  where they stopped. (The arXiv 2603.21563 authors' code swaps weights and optimizer state at
  each role switch the same way.) Copies, not ``.data`` reassignment, keep DDP's gradient
  buckets pointing at the live storage.
* The optimizer is created by the Trainer over the model's trainable parameters, which always
  hold the active policy: one optimizer, one learning-rate schedule, shared by the policies.

ZeRO-3 partitions parameters and flattens optimizer state: there separate policies swap each
rank's flat partitions and their optimizer state instead (``agentrl.policies.swap_zero3``,
chosen by the trainer under DeepSpeed; stage 3 without offload). The shared policy runs under
every launch path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

MODES = ("shared", "lora", "full")
"""How the policies of a collaboration are realised (``collab_policies``)."""


class PolicyNames:
    """What every way of holding several policies in one model shares: the names, which policy is
    loaded and which trained, and ``use``. Subclasses swap the tensors (``_swap_weights``)."""

    def __init__(self, names: tuple[str, ...], optimizer_fn=lambda: None):
        """``names``: policy names, the first one loaded; ``optimizer_fn()``: the Trainer's
        optimizer (None before training starts)."""
        if not names:
            raise ValueError(f"{type(self).__name__}: needs at least one policy name")
        self.names = tuple(names)
        self.loaded = self.names[0]
        """The policy whose weights are in the model now."""
        self.trained = self.names[0]
        """The policy whose optimizer state is in the optimizer (equal to ``loaded`` outside ``use``)."""
        self._optimizer_fn = optimizer_fn

    @property
    def separate(self) -> bool:
        """Whether there is more than one set of weights."""
        return len(self.names) > 1

    def _check(self, name: str) -> None:
        if name not in self.names:
            raise ValueError(f"unknown policy {name!r}; policies: {', '.join(self.names)}")

    def _swap_weights(self, name: str) -> None:
        """Exchange the model's weights with ``name``'s parked ones (``loaded`` becomes ``name``)."""
        raise NotImplementedError

    def _needs_switch(self, name: str) -> bool:
        """``activate``'s preamble: False when ``name`` is already loaded and trained; an error
        inside ``use`` (a generation holds another policy's weights)."""
        self._check(name)
        if name == self.loaded == self.trained:
            return False
        self._outside_use("activate", ": finish the generation first")
        return True

    def _outside_use(self, what: str, hint: str = "") -> None:
        if self.loaded != self.trained:
            raise RuntimeError(f"{type(self).__name__}.{what} inside use(){hint}")

    @contextlib.contextmanager
    def use(self, name: str) -> Iterator[None]:
        """Generate with ``name``'s weights inside the block; the loaded policy returns after."""
        self._check(name)
        if name == self.loaded:
            yield
            return
        back = self.loaded
        self._swap_weights(name)
        try:
            yield
        finally:
            self._swap_weights(back)


class SwappedPolicies(PolicyNames):
    """The policies of a collaboration over one model (module docstring)."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...], optimizer_fn=lambda: None):
        """``model``: the unwrapped model; ``names``, ``optimizer_fn``: as ``PolicyNames``."""
        super().__init__(names, optimizer_fn)
        self.params: list[tuple[str, torch.nn.Parameter]] = [
            (n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.parked: dict[str, dict[str, torch.Tensor]] = {
            name: {n: p.detach().clone() for n, p in self.params} for name in self.names[1:]}
        self.parked_opt: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in self.names[1:]}

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def _swap_weights(self, name: str) -> None:
        """Exchange the model's tensors with ``name``'s parked ones (``loaded`` becomes ``name``)."""
        store = self.parked.pop(name)
        for n, p in self.params:
            tmp = p.detach().clone()
            p.data.copy_(store[n])
            store[n].copy_(tmp)
        self.parked[self.loaded] = store
        self.loaded = name

    # ------------------------------------------------------------------ training
    def _optimizer_state(self) -> dict | None:
        opt = self._optimizer_fn()
        if opt is None:
            return None
        return getattr(opt, "optimizer", opt).state  # accelerate wraps the torch optimizer

    def activate(self, name: str) -> bool:
        """Make ``name`` the loaded and trained policy; True when that changed anything."""
        if not self._needs_switch(name):
            return False
        for _, p in self.params:
            if p.grad is not None:  # a switch between accumulation steps would mix two policies' grads
                raise RuntimeError("SwappedPolicies.activate with gradients pending")
        state = self._optimizer_state()
        old = self.trained
        if state is not None:
            mine = self.parked_opt.pop(name, {})
            out: dict[str, dict[str, Any]] = {}
            for n, p in self.params:
                cur = state.pop(p, None)
                if cur:
                    out[n] = cur
                if n in mine:
                    state[p] = mine[n]
            self.parked_opt[old] = out
        else:
            self.parked_opt[old] = self.parked_opt.pop(name, {})
        self._swap_weights(name)
        self.trained = name
        return True

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything but the loaded policy's weights and optimizer state (the Trainer's own
        checkpoint files hold those), on the CPU."""
        self._outside_use("state_dict")
        return {
            "names": list(self.names),
            "loaded": self.loaded,
            "parked": {k: {n: t.detach().cpu() for n, t in v.items()} for k, v in self.parked.items()},
            "parked_opt": {k: {n: {s: (x.detach().cpu() if torch.is_tensor(x) else x) for s, x in st.items()}
                               for n, st in v.items()} for k, v in self.parked_opt.items()},
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore parked weights and optimizer states after the Trainer loaded the checkpoint's
        model and optimizer (which belong to ``d["loaded"]``)."""
        if list(d["names"]) != list(self.names):
            raise ValueError(f"checkpoint has policies {d['names']}, this run {list(self.names)}")
        device = {n: p.device for n, p in self.params}
        self.loaded = self.trained = d["loaded"]
        self.parked = {k: {n: t.to(device[n]) for n, t in v.items()} for k, v in d["parked"].items()}
        self.parked_opt = {k: {n: {s: (x.to(device[n]) if torch.is_tensor(x) and x.dim() > 0 else x)
                                   for s, x in st.items()} for n, st in v.items()}
                           for k, v in d["parked_opt"].items()}
        for k in self.names:
            if k != self.loaded:
                self.parked_opt.setdefault(k, {})
