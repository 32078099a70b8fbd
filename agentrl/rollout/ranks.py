"""``Ranks``: this process's place among the training processes, and the one collective the
rollout and the row budget use (the largest count any rank holds)."""

from __future__ import annotations


class Ranks:
    """Rank, world size, main process; ``max`` is a collective (every rank must call it)."""

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
