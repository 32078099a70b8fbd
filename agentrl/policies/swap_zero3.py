"""Separate policies under DeepSpeed ZeRO-3: ``SwappedPolicies`` on each rank's partitions.

ZeRO-3 keeps a parameter's data partitioned: this rank's shard is ``p.ds_tensor`` (``p.data``
is empty outside a gather). DeepSpeed's ZeRO-3 optimizer (``DeepSpeedZeroOptimizer_Stage3``)
lays the trainable parameters' shards out in flat buffers, one per sub-group:
``fp16_partitioned_groups_flat`` (the ``ds_tensor`` of each parameter is a view into it; in fp32
training it is fp32 too) and ``fp32_partitioned_groups_flat`` (the master weights the torch
optimizer steps; DeepSpeed may make it the same tensor as the former: each distinct buffer is
swapped once), and the torch optimizer's state (AdamW's ``exp_avg``, ``exp_avg_sq``, ``step``)
is keyed by the fp32 flats.

Every policy has the same parameter shapes and the same partitioning, so each rank's flats have
the same layout for every policy, and a policy is exactly its flats (weights) plus the optimizer
state of its fp32 flats. ``Zero3SwappedPolicies`` parks clones of the flats and moves the state
entries, as ``SwappedPolicies`` does per parameter:

* ``use(name)``: swap the flats (weights only) for a generation, and back after.
* ``activate(name)``: swap the flats and the optimizer state entries.

Around a swap the gathered parameters are released first and the persistent ones (small
parameters ZeRO-3 keeps gathered) gathered again after, as the optimizer's own step does; both are
collective over the ranks, so every rank swaps in the same order (the rollouts and the optimizer
steps run in lock-step). Swaps need the ZeRO-3 optimizer, which exists once training started;
optimizer or parameter offload is refused. Checkpoints hold one rank's parked partitions
(``state_dict`` per rank).
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.policies.swap import PolicyNames


def check_zero3(accelerator) -> None:
    """RecipeError unless DeepSpeed runs ZeRO stage 3 without offload (separate policies swap there)."""
    from agentrl.recipe_file import RecipeError

    plugin = accelerator.state.deepspeed_plugin
    zero = (plugin.deepspeed_config or {}).get("zero_optimization", {}) if plugin is not None else {}
    if int(zero.get("stage", 0)) != 3:
        raise RecipeError("separate policies under DeepSpeed need ZeRO stage 3 (or collab_policies: shared)")
    for key in ("offload_optimizer", "offload_param"):
        if (zero.get(key) or {}).get("device", "none") not in ("none", None):
            raise RecipeError(f"separate policies under ZeRO-3 do not support {key}: set its device to none")


def zero3_optimizer(opt: Any) -> Any | None:
    """The ``DeepSpeedZeroOptimizer_Stage3`` under accelerate's / DeepSpeed's wrappers, or None."""
    for _ in range(4):
        if opt is None or hasattr(opt, "fp32_partitioned_groups_flat"):
            return opt
        opt = getattr(opt, "optimizer", None)
    return None


class Zero3SwappedPolicies(PolicyNames):
    """The policies of a collaboration over one ZeRO-3 engine (module docstring)."""

    def __init__(self, names: tuple[str, ...], optimizer_fn=lambda: None):
        """As ``PolicyNames``; every policy starts from the model's weights."""
        super().__init__(names, optimizer_fn)
        self.parked: dict[str, list[torch.Tensor]] | None = None
        """Per parked policy, clones of this rank's flats; None until the first swap (every policy
        then still holds the initial weights)."""
        self.parked_opt: dict[str, list[dict[str, Any] | None]] = {}

    def _zero(self):
        z = zero3_optimizer(self._optimizer_fn())
        if z is None:
            raise RuntimeError("separate policies under ZeRO-3 swap on the ZeRO-3 optimizer, which exists "
                               "only once training started")
        if getattr(z, "offload_optimizer", False) or getattr(z, "offload_param", False):
            raise RuntimeError("separate policies under ZeRO-3: optimizer and parameter offload are not supported")
        return z

    @staticmethod
    def _flats(z) -> list[torch.Tensor]:
        """This rank's weight flats: the low-precision ones, then the fp32 masters that are not the same tensor."""
        out, seen = [], set()
        for f in list(z.fp16_partitioned_groups_flat) + list(z.fp32_partitioned_groups_flat):
            if f is None:
                raise RuntimeError("separate policies under ZeRO-3: a parameter group has no flat buffer (NVMe?)")
            key = (f.data_ptr(), f.numel(), f.dtype)
            if key not in seen:
                seen.add(key)
                out.append(f)
        return out

    def _ensure_parked(self, z) -> None:
        if self.parked is not None:
            return
        state = z.optimizer.state
        if any(state.get(f) for f in z.fp32_partitioned_groups_flat):
            raise RuntimeError("Zero3SwappedPolicies: the loaded policy has stepped before the others were parked")
        self.parked = {name: [f.detach().clone() for f in self._flats(z)] for name in self.names[1:]}
        self.parked_opt = {name: [None] * len(z.fp32_partitioned_groups_flat) for name in self.names[1:]}

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def _swap_weights(self, name: str, z=None) -> None:
        z = self._zero() if z is None else z
        self._ensure_parked(z)
        z._partition_all_parameters()  # release gathered copies: they would keep the old weights
        store = self.parked.pop(name)
        flats = self._flats(z)
        if len(store) != len(flats) or any(s.shape != f.shape for s, f in zip(store, flats, strict=True)):
            raise RuntimeError("Zero3SwappedPolicies: the parked partitions do not match this rank's flats")
        for f, s in zip(flats, store, strict=True):
            tmp = f.detach().clone()
            f.copy_(s)
            s.copy_(tmp)
        self.parked[self.loaded] = store
        self.loaded = name
        if hasattr(z, "invalidate_secondary_tensor"):
            z.invalidate_secondary_tensor()
        persistent = getattr(z, "persistent_parameters", None)
        if persistent:
            persistent[0].all_gather(persistent)

    # ------------------------------------------------------------------ training
    def activate(self, name: str) -> bool:
        """Make ``name`` the loaded and trained policy; True when that changed anything."""
        if not self._needs_switch(name):
            return False
        z = self._zero()
        self._ensure_parked(z)
        state = z.optimizer.state
        fp32 = z.fp32_partitioned_groups_flat
        mine = self.parked_opt.pop(name)
        out = []
        for f, st in zip(fp32, mine, strict=True):
            out.append(state.pop(f, None) or None)
            if st:
                state[f] = st
        self.parked_opt[self.trained] = out
        self._swap_weights(name, z)
        self.trained = name
        return True

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """This rank's parked partitions and optimizer states, on the CPU (one file per rank)."""
        self._outside_use("state_dict")
        self._ensure_parked(self._zero())

        def cpu(st):
            return None if st is None else {s: (x.detach().cpu() if torch.is_tensor(x) else x) for s, x in st.items()}

        return {"names": list(self.names), "loaded": self.loaded,
                "parked": {k: [t.detach().cpu() for t in v] for k, v in self.parked.items()},
                "parked_opt": {k: [cpu(st) for st in v] for k, v in self.parked_opt.items()}}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore this rank's parked partitions and optimizer states after DeepSpeed loaded the
        checkpoint's engine (which holds ``d["loaded"]``)."""
        if list(d["names"]) != list(self.names):
            raise ValueError(f"checkpoint has policies {d['names']}, this run {list(self.names)}")
        z = self._zero()
        flats = self._flats(z)
        dev = flats[0].device
        self.loaded = self.trained = d["loaded"]
        self.parked = {k: [t.to(f.device, f.dtype) for t, f in zip(v, flats, strict=True)]
                       for k, v in d["parked"].items()}
        self.parked_opt = {k: [None if st is None else
                               {s: (x.to(dev) if torch.is_tensor(x) and x.dim() > 0 else x) for s, x in st.items()}
                               for st in v] for k, v in d["parked_opt"].items()}
