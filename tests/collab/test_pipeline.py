"""One Think-Solve step from problems to per-role advantages, with scripted policies: the pieces
the multi-policy trainer will call, in the order it calls them."""

from __future__ import annotations

import pytest
from agentrl_envs.tasks.math import reasoning_gym_problems, verify_response

from agentrl.collab import run, solo_solver, think_solve
from agentrl.credit.collab import ccpo, parse_rating, rating_prompt, sepo


def test_think_solve_step_to_advantages():
    problems = reasoning_gym_problems("chain_sum", n=2, seed=0)
    collab, solo = think_solve(), solo_solver()
    n = 2  # rollouts per problem

    def policy(problem, j):
        # the Thinker leaks a box (removed before the Solver sees it); with the plan the Solver is
        # right on problem 0 always and on problem 1 for j = 0 only; alone it is right on problem 1 only
        def gen(role, msgs):
            text = msgs[-1]["content"]
            if role.name == "thinker":
                return "Add the terms left to right. \\boxed{0}"
            if "Thinker's plan" in text:
                assert "\\boxed{0}" not in text
                right = problem is problems[0] or j == 0
            else:
                right = problem is problems[1]
            return f"\\boxed{{{problem.answer if right else problem.answer + '1'}}}"

        return gen

    groups, r_joint, r_solo, transcripts = [], [], [], []
    for gi, p in enumerate(problems):
        for j in range(n):
            joint = run(collab, p.question, policy(p, j))
            alone = run(solo, p.question, policy(p, j))
            transcripts.append(joint)
            groups.append(gi)
            r_joint.append(verify_response(joint["solver"]["raw"], p.answer))
            r_solo.append(verify_response(alone["solver"]["raw"], p.answer))
    # problem 0: joint [1, 1], solo [0, 0] -> helpful; problem 1: joint [1, 0], solo [1, 1]
    assert r_joint == [1.0, 1.0, 1.0, 0.0] and r_solo == [0.0, 0.0, 1.0, 1.0]
    credit, state = ccpo(r_joint, r_solo, groups)
    assert credit.diagnostics["helpful_frac"] == 0.5 and credit.diagnostics["harmful_frac"] == 0.25
    # Delta = [1, 1, 0, -1]: problem 0 ties (A = 0), problem 1 separates the two thoughts
    assert credit.advantages["thinker"].tolist()[:2] == [0.0, 0.0]
    assert credit.advantages["thinker"][2] > 0 > credit.advantages["thinker"][3]
    assert state.delta.count == 4

    # SEPO on the same rollouts: +-1 verifier, both roles rate each rollout
    r_ver = [
        verify_response(t["solver"]["raw"], problems[g].answer, scale="pm1")
        for t, g in zip(transcripts, groups, strict=True)
    ]
    t_r, s_r = [], []
    for t, g, rv in zip(transcripts, groups, r_ver, strict=True):
        for rater, out in (("thinker", t_r), ("solver", s_r)):
            prompt = rating_prompt(
                rater, problems[g].question, t["thinker"]["output"], t["solver"]["raw"], rv > 0
            )
            outcome = "correct" if "it is correct." in prompt else "incorrect"
            out.append(
                parse_rating(f'{{"outcome": "{outcome}", "pair": [0.6, 0.4], "brief_reason": "-"}}', rv > 0)
            )
    c = sepo(r_ver, groups, t_r, s_r)
    assert c.diagnostics["sepo_invalid_frac"] == 0.0
    # equal ratings everywhere -> bonus 0 -> rewards are the verifier outcome
    assert c.rewards["thinker"].tolist() == pytest.approx(r_ver)
