"""Collaboration specs: prompts, counterfactuals, validation, recipe round trip."""

from __future__ import annotations

import pytest

from agentrl.collab import (
    CollabError,
    Collaboration,
    Role,
    counterfactual,
    from_dict,
    placeholders,
    render,
    role_messages,
    run,
    solo_solver,
    think_solve,
    to_dict,
    validate,
)

PROBLEM = "What is $\\frac{1}{2} + \\frac{1}{3}$?"


# ----------------------------------------------------------------------------- templates
def test_placeholders_skip_latex():
    t = "Answer in \\boxed{}. Problem:\n{problem}\nPlan: {thinker} and \\frac{a}{b}, x^{n}, \\text{problem}"
    assert placeholders(t) == ["problem", "thinker"]
    assert render(t, "P", {"thinker": "T"}) == (
        "Answer in \\boxed{}. Problem:\nP\nPlan: T and \\frac{a}{b}, x^{n}, \\text{problem}"
    )
    # values are inserted verbatim: braces inside the problem are not re-read as placeholders
    assert render("{problem}", "{thinker}", {}) == "{thinker}"


def test_render_unknown_output():
    with pytest.raises(CollabError, match="reads \\{thinker\\} but no such output"):
        render("{thinker}", "p", {})


# ----------------------------------------------------------------------------- think-solve
def test_think_solve_prompts():
    c = think_solve()
    assert c.role_names == ("thinker", "solver") and c.policies == ("thinker", "solver")
    assert think_solve("m", "m").policies == ("m",)  # one shared model plays both roles
    th = role_messages(c.role("thinker"), PROBLEM, {})
    assert th == [{"role": "user", "content": th[0]["content"]}]
    assert th[0]["content"].endswith("Problem:\n" + PROBLEM)
    assert "do not state the final answer" in th[0]["content"]
    so = role_messages(c.role("solver"), PROBLEM, {"thinker": "Use a common denominator."})[0]["content"]
    assert "Problem:\n" + PROBLEM + "\n\nThinker's plan:\nUse a common denominator.\n\n" in so
    assert so.endswith("Output the final answer within \\boxed{}.")


def test_think_solve_run_strips_thinker_box():
    calls = []

    def gen(role, msgs):
        calls.append((role.name, role.policy, msgs[-1]["content"]))
        return (
            " Common denominator 6, so \\boxed{\\frac{5}{6}} " if role.name == "thinker" else "\\boxed{5/6}"
        )

    out = run(think_solve(), PROBLEM, gen)
    assert out["thinker"]["output"] == "Common denominator 6, so"
    assert out["thinker"]["raw"].startswith(" Common")
    assert [c[:2] for c in calls] == [("thinker", "thinker"), ("solver", "solver")]
    assert "Thinker's plan:\nCommon denominator 6, so\n\n" in calls[1][2]
    assert "5}{6" not in calls[1][2]  # the boxed answer never reaches the Solver
    assert out["solver"]["raw"] == "\\boxed{5/6}"


def test_solo_counterfactual():
    solo = solo_solver()
    assert solo.role_names == ("solver",) and solo.policies == ("solver",)
    assert solo.name == "think_solve-without-thinker"
    (msg,) = role_messages(solo.roles[0], PROBLEM, {})
    assert "Thinker" not in msg["content"] and msg["content"].startswith("Problem:\n" + PROBLEM + "\n\n")
    assert msg["content"].endswith("Output the final answer within \\boxed{}.")
    with pytest.raises(CollabError, match="final role 'solver' cannot be removed"):
        counterfactual(think_solve(), "solver")
    with pytest.raises(CollabError, match="no role 'critic'; roles: thinker, solver"):
        counterfactual(think_solve(), "critic")


# ----------------------------------------------------------------------------- a third role
def three_roles() -> Collaboration:
    return validate(
        Collaboration(
            "plan_solve_check",
            (
                Role("planner", "a", "Plan: {problem}"),
                Role("solver", "b", "Solve {problem} with {planner}", without={"planner": "Solve {problem}"}),
                Role(
                    "checker",
                    "a",
                    "Check {solver} for {problem} given {planner}",
                    without={
                        "planner": "Check {solver} for {problem}",
                        "solver": "Answer {problem} from {planner}",
                    },
                ),
            ),
        )
    )


def test_third_role_is_a_spec_change():
    c = three_roles()
    assert c.policies == ("a", "b")
    out = run(c, "P", lambda role, msgs: f"<{role.name}:{msgs[-1]['content']}>")
    assert (
        out["checker"]["raw"]
        == "<checker:Check <solver:Solve P with <planner:Plan: P>> for P given <planner:Plan: P>>"
    )
    no_plan = counterfactual(c, "planner")
    assert [r.template for r in no_plan.roles] == ["Solve {problem}", "Check {solver} for {problem}"]
    no_solver = counterfactual(c, "solver")
    assert [r.template for r in no_solver.roles] == ["Plan: {problem}", "Answer {problem} from {planner}"]
    # one removal at a time: without-templates that read the removed role are dropped
    assert no_solver.roles[1].without == {} and no_plan.roles[1].without == {}


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "roles, msg",
    [
        ((), "needs at least one role"),
        ((Role("a b", "p", "{problem}"),), "role name 'a b' must be an identifier"),
        ((Role("problem", "p", "{problem}"),), "role 'problem': name is reserved"),
        ((Role("a", "p", "{problem}"), Role("a", "p", "{problem}")), "role 'a': name is used twice"),
        ((Role("a", "", "{problem}"),), "role 'a': policy name is empty"),
        (
            (Role("a", "p", "{problem}", clean="upper"),),
            "clean='upper' must be one of none, strip, remove_boxed",
        ),
        ((Role("a", "p", "  "),), "role 'a': template is empty"),
        (
            (Role("a", "p", "{b} {problem}"), Role("b", "p", "{problem}")),
            "template reads \\{b\\}; it may read \\{problem\\}$",
        ),
        (
            (Role("a", "p", "{problem}", without={"z": "{problem}"}),),
            "without\\['z'\\] names no earlier role; earlier: none",
        ),
        (
            (Role("a", "p", "{problem}"), Role("b", "p", "{a}", without={"a": "{a} {problem}"})),
            "role 'b' without 'a': template reads \\{a\\}",
        ),
    ],
)
def test_validate_errors(roles, msg):
    with pytest.raises(CollabError, match=msg) as e:
        validate(Collaboration("x", roles))
    assert "\n" not in str(e.value)


def test_counterfactual_needs_without_template():
    c = validate(Collaboration("x", (Role("a", "p", "{problem}"), Role("b", "p", "{problem} {a}"))))
    with pytest.raises(CollabError, match="role 'b': reads \\{a\\} but has no without\\['a'\\] template"):
        counterfactual(c, "a")


def test_from_dict_round_trip_and_errors():
    c = think_solve()
    d = to_dict(c)
    assert from_dict(d) == c
    assert d["roles"][1]["without"] == {"thinker": c.roles[1].without["thinker"]}
    with pytest.raises(CollabError, match="unknown key 'rolez'; keys: name, roles"):
        from_dict({"name": "x", "rolez": []})
    with pytest.raises(CollabError, match="role 0: unknown key 'prompt'; keys: name, policy, template"):
        from_dict({"roles": [{"name": "a", "policy": "p", "prompt": "{problem}"}]})
    with pytest.raises(CollabError, match="role 0: missing key 'policy'"):
        from_dict({"roles": [{"name": "a", "template": "{problem}"}]})
    with pytest.raises(CollabError, match="needs at least one role"):
        from_dict({"name": "x", "roles": []})
    with pytest.raises(CollabError, match="must be a mapping, got list"):
        from_dict([])
