"""The shared action parser and the step-record schema."""

import json

import pytest
from agentrl_envs.actions import format_action, parse_action

from agentrl.records import StepRecord, read_jsonl, write_jsonl


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<action>go north</action>", "go north"),
        ("think first... <action>  open fridge 1 </action> trailing", "open fridge 1"),
        ("<action>a</action><action>b</action>", "a"),  # first well-formed pair wins (App. J)
        ("<action>broken <action>craft stick</action>", "craft stick"),  # innermost closed pair
        ("<ACTION>look</ACTION>", "look"),
        ("<action>multi\nline</action>", "multi\nline"),
        ("<action></action>", None),  # empty body is malformed
        ("<action>   </action>", None),
        ("<action>never closed", None),
        ("no tags at all", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_action(response, expected):
    assert parse_action(response) == expected


def test_format_round_trip():
    assert parse_action(format_action("craft 4 oak planks using 1 oak log")) == "craft 4 oak planks using 1 oak log"


def test_record_jsonl_round_trip(tmp_path):
    recs = [
        StepRecord(group_id="g0", traj_id="g0/0", t=0, obs="o0", action="a0", reward=0.0, done=False,
                   action_token_ids=[5, 6], fingerprint=[0.5, -0.5], history=[]),
        StepRecord(group_id="g0", traj_id="g0/0", t=1, obs="o1", action="a1", reward=1.0, done=True,
                   won=True, history=[("o0", "a0")], task_family="depth2"),
    ]
    p = tmp_path / "r.jsonl"
    write_jsonl(recs, p)
    lines = p.read_text().splitlines()
    assert len(lines) == 2
    # None fields are dropped from the JSON, required ones are present
    first = json.loads(lines[0])
    assert "state_sig" not in first and first["fingerprint"] == [0.5, -0.5]
    back = [StepRecord.from_dict(d) for d in read_jsonl(p)]
    assert back == recs


def test_record_missing_field_and_bad_json(tmp_path):
    with pytest.raises(ValueError, match="required field"):
        StepRecord.from_dict({"group_id": "g", "traj_id": "t", "t": 0, "obs": "", "action": ""})
    p = tmp_path / "bad.jsonl"
    p.write_text('{"group_id": "g"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        list(read_jsonl(p))


def test_unknown_fields_go_to_info():
    r = StepRecord.from_dict({"group_id": "g", "traj_id": "t", "t": 0, "obs": "", "action": "", "reward": 0,
                              "done": True, "custom": 3})
    assert r.info == {"custom": 3}
