"""``agentrl/MathAnswer-v0`` with the real math-verify verifier, and the ``role`` context that
renders each role's prompt from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentrl_envs.probe import make_env

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "math"


def test_generated_problem_graded_by_math_verify():
    env = make_env("agentrl/MathAnswer-v0", {"tasks": ["basic_arithmetic"], "size": 10})
    obs, info = env.reset(seed=3)
    gold = env.unwrapped.problem.answer
    assert obs == info["problem"] and info["task_family"] == "basic_arithmetic"
    # the LAST box counts; an equivalent form is right; no box is wrong
    assert env.step(f"maybe \\boxed{{0}} but \\boxed{{{gold}}}")[1:3] == (1.0, True)
    env.reset(seed=3)
    assert env.step(f"\\boxed{{{gold}.0}}")[1] == 1.0
    env.reset(seed=3)
    _, r, _, _, info = env.step(f"the answer is {gold}")
    assert r == 0.0 and info["won"] is False
    env.reset(seed=3, options={"grade": False})  # a Thinker's turn: never scored
    assert env.step(f"\\boxed{{{gold}}}")[1] == 0.0
    env.reset(seed=13)
    assert env.unwrapped.problem == env.unwrapped.problems("train")[3]  # seed % size
    assert env.unwrapped.problems("valid")[0] != env.unwrapped.problems("train")[0]


def test_pm1_scale_and_benchmark_file():
    env = make_env("agentrl/MathAnswer-v0", {"scale": "pm1", "benchmarks": {
        "train": {"name": "math_train", "path": str(FIXTURES / "math_train.jsonl")}}})
    obs, _ = env.reset(seed=0)
    assert obs.startswith("What is the value of")
    assert env.step("\\boxed{\\frac{5}{6}}")[1] == 1.0
    env.reset(seed=0)
    assert env.step("\\boxed{5/7}")[1] == -1.0


@pytest.mark.parametrize("kwargs, options, needle", [
    ({"scale": "half"}, None, "verifier scale 'half'"),
    ({"benchmarks": {"test": {"name": "math500"}}}, None, "unknown split 'test'"),
    ({}, {"families": ["x"]}, "unknown reset option(s) ['families']"),
    ({}, {"split": "dev"}, "unknown split 'dev'"),
])
def test_bad_input_is_one_line(kwargs, options, needle):
    with pytest.raises(ValueError) as e:
        env = make_env("agentrl/MathAnswer-v0", kwargs)
        env.reset(seed=0, options=options)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_role_context_renders_templates_and_rows(collab_model_dir):
    from transformers import AutoTokenizer

    from agentrl.collab import solo_solver, think_solve
    from agentrl.rollout.episodes import run_episodes
    from agentrl.rollout.settings import RolloutSettings

    tok = AutoTokenizer.from_pretrained(collab_model_dir)
    c, solo = think_solve(), solo_solver()
    settings = RolloutSettings(env_id="agentrl/MathAnswer-v0", env_kwargs={"size": 4}, context_mode="role",
                               prefill="", max_turns=1)
    tasks = [{"seed": 0, "options": {}, "group_id": "g", "role": c.role("solver"), "outputs": {"thinker": "PLAN"},
              "train": True},
             {"seed": 0, "options": {}, "group_id": "g", "role": solo.role("solver"), "train": False}]
    eps = run_episodes(tasks, lambda prompts: [[5, 6, 7]] * len(prompts), tok, settings)
    joint_text, solo_text = (tok.decode(ep.tokens.prompt_ids) for ep in eps)
    assert "Thinker's plan:\nPLAN" in joint_text and "PLAN" not in solo_text
    assert eps[0].steps[0].obs in joint_text and eps[0].steps[0].obs in solo_text
    (row,) = eps[0].context.rows(eps[0], [0.5])
    assert row.completion == [5, 6, 7] and row.adv == [0.5] * 3
    assert eps[1].context.rows(eps[1], [0.5]) == []  # not trained: no row
