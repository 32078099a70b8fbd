"""ToolReason's latencies: ``python -m agentrl_envs.toolreason.latency [--calls 30] [--json]``.

Medians (ms) of: reset per family, a search step, a QA answer step (token-F1), a math answer step
(math-verify), and the python tool per call in the sandbox (a trivial cell and a 10^6-element
sum), plus the one-off cold costs (KB + BM25 index, reasoning-gym problem generation, sandbox).
Step figures are timed around ``step`` alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def _ms(fn, n: int) -> float:
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        ts.append(time.perf_counter() - t0)
    return round(1e3 * statistics.median(ts), 3)


def _step_ms(env, family: str, response, n: int) -> float:
    ts = []
    for i in range(n):
        env.reset(seed=i, options={"families": family})
        text = response(env.unwrapped)
        t0 = time.perf_counter()
        env.step(text)
        ts.append(time.perf_counter() - t0)
    return round(1e3 * statistics.median(ts), 3)


def measure(calls: int = 30) -> dict[str, float]:
    import gymnasium as gym

    import agentrl_envs  # noqa: F401  (registers the ids)

    env = gym.make("agentrl/ToolReason-v0")
    out: dict[str, float] = {}
    for fam in ("multihop", "math"):
        t0 = time.perf_counter()
        env.reset(seed=0, options={"families": fam})
        out[f"cold_first_reset_{fam}_ms"] = round(1e3 * (time.perf_counter() - t0), 1)
        out[f"reset_{fam}_ms"] = _ms(lambda i, f=fam: env.reset(seed=i, options={"families": f}), 200)
    out["search_step_ms"] = _step_ms(env, "multihop", lambda u: f"<search>{u.task.hops[0]}</search>", 100)
    def answer(u):
        return f"<answer>\\boxed{{{u.task.answers[0]}}}</answer>"

    out["qa_answer_step_ms"] = _step_ms(env, "multihop", answer, 100)
    out["math_answer_step_ms"] = _step_ms(env, "math", answer, 100)
    u = env.unwrapped
    t0 = time.perf_counter()
    u._run_python("1")
    out["cold_sandbox_first_call_ms"] = round(1e3 * (time.perf_counter() - t0), 1)
    out["python_call_trivial_ms"] = _ms(lambda i: u._run_python("1 + 1"), calls)
    out["python_call_sum_1e6_ms"] = _ms(lambda i: u._run_python("sum(range(10**6))"), calls)
    out["python_step_ms"] = _step_ms(env, "math", lambda u: f"<python>{u.task.code}</python>", calls)
    env.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentrl_envs.toolreason.latency",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=30, help="python tool calls per figure (default 30)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    if args.calls < 1:
        ap.error("--calls must be >= 1")
    res = measure(args.calls)
    print(json.dumps(res, indent=1) if args.json else "\n".join(f"{k:<32} {v:>10}" for k, v in res.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
