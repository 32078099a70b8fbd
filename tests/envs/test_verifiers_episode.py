"""Real verifiers episodes of an agentrl env against a real model endpoint on this machine.

A tiny random-init checkpoint is served by ``agentrl.serve_openai`` on a free port; verifiers'
own eval runner (``run_episodes``: its interception server, the ``null`` harness's chat program
as a subprocess, ``AgentrlEnv.run`` playing the user) plays TextCraft tasks with it. The model's
replies are read back from verifiers' traces and replayed into the same env seeds directly:
the trace's ``agentrl_return`` reward, step count, win flag and user turns must be what the env
gives for those replies, and every reply must have come from the server.
"""

import asyncio

import pytest
from agentrl_envs.probe import make_env
from agentrl_envs.prompts import turn_message, user_prompt

vf = pytest.importorskip("verifiers.v1", reason="needs the verifiers extra of agentrl-envs")
pytest.importorskip("fastapi", reason="the model server needs fastapi (make setup installs it)")

ENV_ID = "agentrl/TextCraft-v0"
# a short prompt for the tiny model's context, and an episode of at most 3 env steps
ENV_KWARGS = {"prompt_style": "brief", "max_episode_steps": 3}
SAMPLING = {"temperature": 1.0, "top_p": 0.95, "max_tokens": 12, "seed": 11}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(the ChatModel, its base URL) for the module: a tiny model behind the server on a thread."""
    from agentrl.models import build_tiny_model
    from agentrl.serve_openai import ChatModel, create_app, serve_in_thread

    chat = ChatModel(build_tiny_model(tmp_path_factory.mktemp("vf_episode") / "model"), name="tiny")
    with serve_in_thread(create_app(chat)) as base_url:
        yield chat, base_url


def _play(base_url, out, **kw):
    from agentrl_envs.interop.verifiers_env import run_episodes

    return asyncio.run(run_episodes(base_url, "tiny", ENV_ID, sampling=SAMPLING, env_kwargs=ENV_KWARGS,
                                    output_dir=str(out), **kw))


def _replay(seed: int, replies: list[str]):
    """The env stepped directly with ``replies``: (return, steps, won, the user messages it
    would have sent: its opening prompt and each turn message before the end)."""
    env = make_env(ENV_ID, ENV_KWARGS)
    obs, info = env.reset(seed=seed, options={"split": "train"})
    users = [user_prompt(env.unwrapped, obs, info, [], 0, 0)]
    total, steps, won = 0.0, 0, False
    for reply in replies:
        obs, reward, terminated, truncated, info = env.step(reply)
        total, steps, won = total + float(reward), steps + 1, bool(info.get("won", won))
        if terminated or truncated:
            break
        users.append(turn_message(env.unwrapped, obs, info, steps))
    env.close()
    return total, steps, won, users


def _replies(trace) -> list[str]:
    # verifiers hands the env each reply stripped (Segment.last_reply)
    return [(m.content or "").strip() for m in trace.assistant_messages]


def test_verifiers_plays_textcraft_with_a_served_model(served, tmp_path):
    chat, base_url = served
    before = chat.requests
    episodes = _play(base_url, tmp_path, num_tasks=3, seed_start=4, max_turns=6)
    assert len(episodes) == 3 and all(e.ok and not e.errors for e in episodes), [e.errors for e in episodes]
    assert sorted(e.traces[0].task.data.seed for e in episodes) == [4, 5, 6]
    all_replies = []
    for episode in episodes:
        (trace,) = episode.traces
        replies = _replies(trace)
        total, steps, won, users = _replay(trace.task.data.seed, replies)
        # the env ended every episode (3 steps or a win), before the turn cap of 6
        assert steps == len(replies) == trace.info["env_steps"] and (steps == 3 or won)
        assert trace.rewards["agentrl_return"].score == pytest.approx(total) and trace.reward == pytest.approx(total)
        assert trace.info["won"] == won
        assert [m.content for m in trace.messages if m.role == "user"] == users
        all_replies += replies
    # every model turn was one request to the server, with the run's sampling knobs, and its replies
    # are the ones in the traces
    assert chat.requests - before == len(all_replies) == sum(e.traces[0].info["env_steps"] for e in episodes)
    served_now = list(chat.recent)[-len(all_replies):]
    assert sorted(done.text.strip() for _, done in served_now) == sorted(all_replies)
    for request, done in served_now:
        assert (request.temperature, request.top_p, request.max_tokens, request.seed) == (1.0, 0.95, 12, 11)
        assert done.completion_tokens <= 12
    # verifiers' runner wrote its traces where it was told
    assert list(tmp_path.glob("*/traces.jsonl"))


def test_the_turn_cap_ends_an_episode_before_the_env_does(served, tmp_path):
    chat, base_url = served
    before = chat.requests
    (episode,) = _play(base_url, tmp_path, num_tasks=1, seed_start=2, max_turns=2)
    (trace,) = episode.traces
    replies = _replies(trace)
    total, steps, won, _ = _replay(2, replies)
    assert len(replies) == 2 == chat.requests - before and trace.info["env_steps"] == steps == 2
    assert trace.rewards["agentrl_return"].score == pytest.approx(total)


def test_agentrl_envs_verifiers_prints_each_episode(served, tmp_path, capsys):
    """The command line over ``run_episodes``: one line per episode, as the trace has it."""
    import json

    from agentrl_envs.cli import main

    _, base_url = served
    assert main(["verifiers", ENV_ID, "--base-url", base_url, "--model", "tiny", "--num-tasks", "1",
                 "--seed-start", "9", "--max-tokens", "8", "--env-kwargs", json.dumps(ENV_KWARGS),
                 "--out", str(tmp_path)]) == 0
    (record,) = [json.loads(line) for line in next(tmp_path.glob("*/traces.jsonl")).read_text().splitlines()]
    (trace,) = record["traces"]
    score, steps = trace["rewards"]["agentrl_return"]["score"], trace["info"]["env_steps"]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"seed 9: return {score:+.3f}, steps {steps}, won False" and steps == 3
    assert out[1].startswith(f"mean return {score:+.3f} over 1 episodes")


@pytest.mark.parametrize("args, says", [
    (["agentrl/Nope-v0"], "unknown env id 'agentrl/Nope-v0'"),
    ([ENV_ID, "--split", "nope"], "unknown split 'nope'"),
    ([ENV_ID, "--env-kwargs", "[1]"], "--env-kwargs: must be a JSON object"),
    ([ENV_ID, "--num-tasks", "0"], "--num-tasks, --max-tokens and --max-turns must be >= 1"),
])
def test_agentrl_envs_verifiers_refuses_bad_input_in_one_line(args, says, capsys):
    """Checked before verifiers starts (no endpoint behind the URL): exit 2, one line on stderr."""
    from agentrl_envs.cli import main

    assert main(["verifiers", *args, "--base-url", "http://127.0.0.1:9/v1", "--model", "tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agentrl-envs verifiers: ") and says in err[0]
