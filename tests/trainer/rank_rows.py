"""A test plug-in (recipe ``env_modules: [rank_rows]``, ``algorithm: rank_rows``): the default
algorithm that writes, per rank and iteration, the advantage each of its training rows carries and
the traj ids of its episodes' records, to ``output_dir/rank_rows/r{rank}_{step}.json``, so a test
can check that every rank trains on its own records' advantages."""

from __future__ import annotations

import json
from pathlib import Path

from agentrl.algorithms import Algorithm, register_algorithm


@register_algorithm("rank_rows")
class RankRows(Algorithm):
    def metrics(self, trainer) -> dict[str, float]:
        lr = trainer.last_rollout
        rows, n_real = lr["rows"], lr["n_real_rows"]
        mask = rows["loss_mask"].bool()
        adv = [float(rows["advantages"][i][mask[i]][0]) for i in range(n_real) if mask[i].any()]
        trajs = [r.traj_id for ep in lr["episodes"] for r in ep.steps]
        out = Path(trainer.args.output_dir) / "rank_rows"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"r{trainer.accelerator.process_index}_{trainer.state.global_step}.json").write_text(
            json.dumps({"row_advantages": adv, "record_trajs": trajs}))
        return {}
