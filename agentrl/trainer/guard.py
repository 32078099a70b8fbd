"""The non-finite guard: a NaN or inf in a loss or a gradient never reaches the weights.

Per optimizer step the trainer reports what it saw: ``note_loss`` for every micro-batch whose
loss (or an input the loss read) is not finite, then ``end_step`` with the names of the
parameters whose gradients are not finite (or a flag from DeepSpeed, which checks its partitioned
gradients itself and skips the step). A step with anything non-finite is skipped by the trainer:
no optimizer update, no scheduler step (weights, optimizer and scheduler state stay as they
were). ``max_consecutive`` skips in a row end the run (``NonFiniteStop``: one line, exit 2); the
last checkpoint was written before the first of them, from good weights. The counts are saved in
checkpoints, so a resumed run goes on counting.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


class NonFiniteStop(RuntimeError):
    """Raised after ``max_consecutive`` skipped steps in a row; the message is one line."""


@dataclass
class NonFiniteGuard:
    max_consecutive: int = 3
    """Skipped steps in a row that stop the run (recipe key ``nonfinite_max_consecutive``)."""
    skipped: int = 0
    """Optimizer steps skipped so far in the run (logged as ``train/nonfinite_steps``)."""
    consecutive: int = 0
    """Skipped steps in a row, up to the latest."""
    last: str = ""
    """What the latest skipped step found (a log line)."""
    _pending: list[str] = field(default_factory=list, repr=False)

    def note_loss(self, micro_step: int, parts: list[str], rank: int = 0) -> None:
        """A micro-batch's loss or one of its inputs is not finite (``parts`` names which)."""
        self._pending.append(f"loss at micro-step {micro_step} on rank {rank} ({', '.join(parts)})")

    @property
    def loss_pending(self) -> bool:
        """Whether a micro-batch of the current optimizer step had a non-finite loss."""
        return bool(self._pending)

    def end_step(self, step: int, bad_grads: list[str], n_bad: int = 0, other_ranks: list[str] = ()) -> bool:
        """Close optimizer step ``step``; True if it must be skipped. ``bad_grads`` names (some of)
        the ``n_bad`` parameters whose gradients are not finite; ``other_ranks`` are what the other
        ranks noted (their loss reports). A non-finite loss poisons every gradient on purpose (so
        that every rank skips), so the gradients are named only when no loss was."""
        found = self._pending + list(other_ranks)
        if not found and (bad_grads or n_bad):
            more = f" and {n_bad - len(bad_grads)} more" if n_bad > len(bad_grads) else ""
            found.append(f"gradient of {', '.join(bad_grads)}{more}" if bad_grads else "gradient")
        self._pending = []
        if not found:
            self.consecutive = 0
            return False
        self.skipped += 1
        self.consecutive += 1
        self.last = f"step {step}: non-finite {'; '.join(found)}"
        return True

    def check_stop(self) -> None:
        if self.max_consecutive and self.consecutive >= self.max_consecutive:
            raise NonFiniteStop(f"stopped after {self.consecutive} optimizer steps in a row with non-finite values, "
                                f"none applied (the last, {self.last}); the newest checkpoint holds the last good "
                                "weights")

    def state_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}

    def load_state_dict(self, d: dict) -> None:
        self.skipped, self.consecutive, self.last = int(d["skipped"]), int(d["consecutive"]), str(d.get("last", ""))


def nonfinite_grads(named_params, limit: int = 3) -> tuple[list[str], int]:
    """(up to ``limit`` names, total count) of the parameters whose gradient holds NaN or inf
    (one device sync for all of them)."""
    import torch

    named = [(n, p.grad) for n, p in named_params if p.grad is not None]
    if not named:
        return [], 0
    finite = torch.stack([torch.isfinite(g).all() for _, g in named]).cpu().tolist()
    bad = [n for (n, _), ok in zip(named, finite, strict=True) if not ok]
    return bad[:limit], len(bad)


class HeldScheduler:
    """A learning-rate scheduler whose ``step`` does nothing while ``hold()`` is true: a skipped
    optimizer step leaves the schedule where it was. Everything else is the wrapped scheduler's."""

    def __init__(self, scheduler, hold):
        self._scheduler = scheduler
        self._hold = hold

    def step(self, *args, **kwargs):
        if not self._hold():
            return self._scheduler.step(*args, **kwargs)
        return None

    def __getattr__(self, name):
        return getattr(self._scheduler, name)
