"""A test plug-in (recipe ``env_modules: [rank_rows]``, ``algorithm: rank_rows``): the default
algorithm whose update runner writes, per rank and iteration, the advantage each of its training
rows carries and the traj ids of its episodes' records, to
``output_dir/rank_rows/r{rank}_{step}.json``, so a test can check that every rank trains on its own
records' advantages."""

from __future__ import annotations

import json
from pathlib import Path

from agentrl.algorithms import Algorithm, register_algorithm
from agentrl.algorithms.runner import UpdateRunner


class RecordingRunner(UpdateRunner):
    def rows(self, episodes, credited, mode):
        rows, counts = super().rows(episodes, credited, mode)
        lr = self.learner
        adv = [r.adv[r.loss_mask.index(1)] for r in rows[:min(counts.real, counts.target)] if 1 in r.loss_mask]
        trajs = [r.traj_id for ep in episodes for r in ep.steps]
        out = Path(lr.config.output_dir) / "rank_rows"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"r{lr.ranks.rank}_{lr.step}.json").write_text(json.dumps({"row_advantages": adv,
                                                                          "record_trajs": trajs}))
        return rows, counts


@register_algorithm("rank_rows")
class RankRows(Algorithm):
    def runner(self, learner):
        return RecordingRunner(learner)
