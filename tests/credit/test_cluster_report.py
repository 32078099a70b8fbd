"""agentrl credit clusters: pair precision / recall by hand, the raw vs centred report on records
whose fingerprints share one large direction, and its bad-input lines."""

import json

import numpy as np
import pytest

from agentrl.credit import cluster_report as cr


def test_pair_scores_by_hand():
    # one group of 4: truth {0,1} {2} {3}; labels put 0,1,2 together, 3 alone
    # pairs labelled together: (0,1) (0,2) (1,2) -> 1 of them same-state: precision 1/3
    # same-state pairs: (0,1) -> found: recall 1
    labels, truth = np.array([0, 0, 0, 1]), np.array([5, 5, 6, 7])
    assert cr.pair_scores(labels, truth, [(0, 4)]) == (pytest.approx(1 / 3), 1.0)
    # a second group adds (4,5) labelled apart but same state: recall 1/2; pairs across groups never count
    labels2, truth2 = np.r_[labels, [2, 3]], np.r_[truth, [5, 5]]
    assert cr.pair_scores(labels2, truth2, [(0, 4), (4, 6)]) == (pytest.approx(1 / 3), 0.5)
    # singletons only: nothing judged, both 1
    assert cr.pair_scores(np.array([0]), np.array([0]), [(0, 1)]) == (1.0, 1.0)


def _records():
    e = np.eye(4)
    off = {"A": e[1], "B": e[2], "C": e[3]}
    return [dict(group_id="g0", traj_id=f"g0-{i}", t=0, obs=s, action="a", reward=0.0, done=True, state_key=s,
                 fingerprint=(100 * e[0] + off[s]).tolist()) for i, s in enumerate("AABCBA")]


def test_report_raw_is_one_cluster_centred_is_the_states():
    out = cr.report(_records(), radii=(0.05,))
    assert out["state_classes"] == 3 and out["state_key"] == "state_key"
    raw, cen = out["raw"]["radii"][0], out["centred"]["radii"][0]
    # raw: one cluster of 6; same-state pairs AA: 3, BB: 1 -> 4 of 15 pairs
    assert (raw["clusters"], raw["precision"], raw["recall"]) == (1, pytest.approx(4 / 15), 1.0)
    assert (cen["clusters"], cen["precision"], cen["recall"]) == (3, 1.0, 1.0)
    assert out["raw"]["distance_quantiles"][0.95] < 1e-3 and out["centred"]["distance_quantiles"][0.5] > 0.5


def test_cli_tables_json_and_bad_input(tmp_path, capsys):
    f = tmp_path / "iter_00000.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in _records()))
    assert cr.main([str(f), "--eps", "0.05,0.5"]) == 0
    assert "centred" in capsys.readouterr().out
    assert cr.main([str(f), "--json", "--eps", "0.05"]) == 0
    assert json.loads(capsys.readouterr().out)["centred"]["radii"][0]["clusters"] == 3
    assert cr.main([str(f), "--eps", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[0, 2]" in err
    g = tmp_path / "nofp.jsonl"
    g.write_text("\n".join(json.dumps({k: v for k, v in r.items() if k != "fingerprint"}) for r in _records()))
    assert cr.main([str(g)]) == 2
    assert "lack fingerprints" in capsys.readouterr().err
