"""agentrl.sft: expert data uses the RL rollout's prompts, and SFT makes a tiny model imitate.

Runtime: ~15-25 s on a 2-core machine with OMP_NUM_THREADS=1 (TRL import included).
"""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

ENV = "agentrl/TextCraft-v0"
EK = {"prompt_style": "compact"}
OPT = {"split": "train", "families": ["depth2"]}


@pytest.fixture(scope="module")
def expert():
    from agentrl.sft import collect_expert

    return collect_expert(ENV, [0, 1, 2], OPT, EK, history_length=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, expert):
    from agentrl.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), texts=expert.corpus * 5, vocab_size=512,
                            hidden_size=64, num_layers=2, seed=0)


def test_expert_episodes_are_won_and_one_example_per_turn(expert):
    assert expert.episodes == 3 and expert.won == 3
    # Train depth-2 goal 0 is "acacia boat": get 2 logs, craft planks twice (4 each, 5 needed),
    # craft the boat -> 4 turns (worked out from the recipes shown in the prompt).
    first = [s.action for s in expert.steps[:4]]
    assert first == ["get 2 acacia logs", "craft 4 acacia planks using 1 acacia logs",
                     "craft 4 acacia planks using 1 acacia logs", "craft 1 acacia boat using 5 acacia planks"]
    assert all(s.task_family == "depth2" for s in expert.steps)
    assert "Goal: craft acacia boat." in expert.steps[0].user


def test_sft_prompts_equal_the_rl_rollout_prompts(tiny, expert):
    """Replaying the expert's actions through run_episodes must show the policy exactly the
    prompt token ids the SFT examples were built from (same template, history and prefill)."""
    from transformers import AutoTokenizer

    from agentrl.rollout import RolloutSettings, run_episodes
    from agentrl.sft import completion_ids, prompt_ids

    tok = AutoTokenizer.from_pretrained(tiny)
    steps = expert.steps[:4]  # goal 0's episode
    turn = iter(range(len(steps)))

    def replay(prompts):
        assert len(prompts) == 1
        return [completion_ids(tok, steps[next(turn)].action)]

    (ep,) = run_episodes([{"seed": 0, "options": OPT, "group_id": "g"}], replay, tok,
                         RolloutSettings(ENV, env_kwargs=EK, history_length=1))
    assert ep.won and ep.length == 4
    assert ep.tokens.prompt_ids == [prompt_ids(tok, s.user) for s in steps]
    # the completion is the action body, the closing tag and end of turn (prefill is in the prompt)
    assert tok.decode(completion_ids(tok, "get 2 acacia logs")) == "get 2 acacia logs</action><|im_end|>"


def test_chat_rows_format(expert):
    from agentrl.sft import to_chat_rows

    row = to_chat_rows(expert.steps[:1])[0]
    assert row["prompt"] == [{"role": "user", "content": expert.steps[0].user}]
    assert row["completion"] == [{"role": "assistant", "content": "<action>get 2 acacia logs</action>"}]


def test_sft_tiny_model_imitates_the_expert(tiny, expert, tmp_path):
    """Trivially learnable case: SFT on one goal's 4 expert turns; the greedy policy then replays
    the expert through the real rollout and wins; the completion loss falls."""
    import torch

    from agentrl.evaluation.checkpoint import load_policy
    from agentrl.rollout import RolloutSettings, hf_generate_fn, run_episodes
    from agentrl.sft import sft_train

    torch.manual_seed(0)
    m = sft_train(str(tiny), expert.steps[:4], tmp_path / "sft", max_steps=60, learning_rate=3e-3,
                  batch_size=4, seed=0, quiet=True, logging_steps=10)
    losses = [v for _, v in m["loss_curve"]]
    assert m["examples"] == 4 and m["train_steps"] == 60
    # a random-init model starts near ln(vocab) ~ 6; after imitation the loss is near zero
    assert losses[0] > 1.0 and losses[-1] < 0.1 * losses[0]
    model, tok = load_policy(str(tmp_path / "sft"))
    gen = hf_generate_fn(model, tok, max_new_tokens=24, do_sample=False)
    (ep,) = run_episodes([{"seed": 0, "options": OPT, "group_id": "g"}], gen, tok,
                         RolloutSettings(ENV, env_kwargs=EK, history_length=1, max_turns=8))
    assert ep.won
    assert [r.action for r in ep.steps] == [s.action for s in expert.steps[:4]]

    # the demo's goal scores on the same model: greedy wins goal 0 only (the one it imitated);
    # sampled success near temperature 0 repeats the greedy outcome, per task (repeats grouped)
    from agentrl.evaluation.heldout import HeldOutSettings, evaluate_wins, sampled_success

    hs = HeldOutSettings(ENV, split="train", families=["depth2"], seeds=[0, 1], env_kwargs=EK, history_length=1,
                         max_turns=8, max_new_tokens=24)
    assert evaluate_wins(str(tmp_path / "sft"), hs)["wins"] == [True, False]
    assert sampled_success(str(tmp_path / "sft"), hs, samples=3, temperature=1e-3) == [1.0, 0.0]
    hot = sampled_success(str(tmp_path / "sft"), hs, samples=4, temperature=1.0)
    assert len(hot) == 2  # one rate per task, not per episode
    # without a temperature: the settings' (the recipe's), here near 0, so greedy's outcomes again
    cold = HeldOutSettings(**{**hs.to_dict(), "temperature": 1e-3})
    assert sampled_success(str(tmp_path / "sft"), cold, samples=3) == [1.0, 0.0]
    # played a batch of at most 2 episodes at a time: the same greedy outcomes, the same rates
    # per task near temperature 0 (6 episodes in 3 batches, each task's repeats split over two)
    hs.max_batch = 2
    assert evaluate_wins(str(tmp_path / "sft"), hs)["wins"] == [True, False]
    assert sampled_success(str(tmp_path / "sft"), hs, samples=3, temperature=1e-3) == [1.0, 0.0]
    with pytest.raises(ValueError, match="samples must be >= 1"):
        sampled_success(str(tmp_path / "sft"), hs, samples=0)


def test_cli_bad_env_is_one_line_error(capsys, tmp_path):
    from agentrl.sft import main

    assert main(["--env", "agentrl/Nope-v0", "--out", str(tmp_path / "x"), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentrl sft: unknown env id 'agentrl/Nope-v0' (did you mean") and "TextCraft" in err
    assert len(err.splitlines()) == 1


def test_cli_bad_json(capsys, tmp_path):
    from agentrl.sft import main

    assert main(["--env", ENV, "--out", str(tmp_path / "x"), "--options", "[1]"]) == 2
    assert "--options must be a JSON object" in capsys.readouterr().err


def test_sft_metrics_written(tiny, tmp_path):
    """The CLI path end to end on one episode: data, model and metrics land in --out."""
    from agentrl.sft import run_sft

    m = run_sft(ENV, str(tiny), tmp_path / "o", episodes=1, options={"families": ["depth2"]}, env_kwargs=EK,
                history_length=1, max_steps=2, batch_size=2, quiet=True)
    assert m["expert_won"] == 1 and m["train_steps"] == 2
    rows = [json.loads(x) for x in (tmp_path / "o" / "sft_data.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and m["examples"] == 4
    assert (tmp_path / "o" / "config.json").is_file() and (tmp_path / "o" / "tokenizer_config.json").is_file()


def test_an_sft_folder_is_a_run_folder(tiny, tmp_path, capsys):
    # the same record as an RL run: `agentrl eval` replays its settings without flags, `agentrl show`
    # prints the expert's episodes it imitated, metrics.jsonl has the loss curve
    from agentrl.cli import main
    from agentrl.sft import run_sft

    out = tmp_path / "sft"
    run_sft(ENV, str(tiny), out, episodes=2, options={"families": ["depth2"]}, env_kwargs=EK, history_length=1,
            max_steps=2, batch_size=2, quiet=True, logging_steps=1, argv=["--env", ENV])
    from agentrl.runinfo import training_settings

    settings, source = training_settings(out)
    assert source == str(out / "recipe.yaml")
    assert (settings["env_id"], settings["env_kwargs"], settings["context_mode"], settings["history_length"]) == (
        ENV, EK, "window", 1)
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert json.loads((out / "run_info.json").read_text())["train_args"] == ["--env", ENV]
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    table = capsys.readouterr().out
    assert "expert:0" in table and "expert:1" in table  # one group per expert episode
    assert main(["eval", "--checkpoint", str(out), "--split", "train", "--episodes", "2", "--max-turns", "2",
                 "--out", str(tmp_path / "e.json")]) == 0
    (ev,) = json.loads((tmp_path / "e.json").read_text())
    assert ev["env_id"] == ENV and ev["all"]["episodes"] == 2
    assert ev["settings"]["history_length"] == 1 and ev["settings"]["env_kwargs"] == EK  # the SFT run's own
