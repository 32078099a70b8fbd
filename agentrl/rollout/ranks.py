"""``Ranks``: this process's place among the training processes, and the collectives the rollout,
the row budget and the env-failure watch use (the largest count any rank holds; every rank's value)."""

from __future__ import annotations


class Ranks:
    """Rank, world size, main process; ``max`` and ``gather`` are collectives (every rank calls them)."""

    def __init__(self, rank: int = 0, world: int = 1, is_main: bool = True):
        self.rank, self.world, self.is_main = rank, world, is_main

    @classmethod
    def of(cls, accelerator) -> Ranks:
        return cls(accelerator.process_index, accelerator.num_processes, accelerator.is_main_process)

    def max(self, n: int) -> int:
        """The largest ``n`` any rank holds (every rank must call it)."""
        if self.world == 1:
            return int(n)
        from accelerate.utils import gather_object

        return int(max(gather_object([int(n)])))

    def gather(self, value):
        """Every rank's ``value``, in rank order (every rank must call it)."""
        if self.world == 1:
            return [value]
        from accelerate.utils import gather_object

        return gather_object([value])
