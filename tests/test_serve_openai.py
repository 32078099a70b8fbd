"""agentrl.serve_openai: a tiny random-init checkpoint behind the OpenAI chat-completions routes,
called through FastAPI's test client and, once, through the OpenAI SDK over a real socket."""

import pytest

pytest.importorskip("fastapi", reason="the server needs fastapi (make setup installs it)")


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    from agentrl.models import build_tiny_model
    from agentrl.serve_openai import ChatModel

    return ChatModel(build_tiny_model(tmp_path_factory.mktemp("serve") / "model"), name="tiny")


@pytest.fixture(scope="module")
def client(chat):
    from fastapi.testclient import TestClient

    from agentrl.serve_openai import create_app

    return TestClient(create_app(chat))


HI = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Craft a stick."}]


def test_a_completion_has_openai_shape_and_counts_its_tokens(chat, client):
    before = chat.requests
    r = client.post("/v1/chat/completions", json={"model": "tiny", "messages": HI, "max_tokens": 6, "seed": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "tiny" and body["id"].startswith("chatcmpl-")
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    # the prompt is the chat template's rendering, ending with the assistant's header
    prompt = chat.prompt_ids(HI)
    assert chat.tokenizer.decode(prompt).endswith("<|im_start|>assistant\n")
    assert usage["prompt_tokens"] == len(prompt) and 1 <= usage["completion_tokens"] <= 6
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # "length" means it was cut at max_tokens; "stop" that it ended its turn (the end token, not shown)
    assert choice["finish_reason"] == "stop" or usage["completion_tokens"] == 6
    assert chat.requests == before + 1 and chat.recent[-1][1].text == choice["message"]["content"]
    assert client.get("/v1/models").json()["data"][0]["id"] == "tiny"


def test_seeded_sampling_repeats_and_temperature_zero_is_greedy(chat, client):
    def reply(**knobs):
        body = {"messages": HI, "max_tokens": 12, **knobs}
        return client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]

    assert reply(seed=7, temperature=1.5) == reply(seed=7, temperature=1.5)
    # a random-init model at temperature 1.5 over 12 tokens: five seeds cannot all agree
    assert len({reply(seed=s, temperature=1.5) for s in range(5)}) > 1
    assert reply(temperature=0, seed=1) == reply(temperature=0, seed=2)
    assert chat.recent[-1][0].temperature == 0 and chat.recent[-1][0].max_tokens == 12
    # greedy worked out without generate(): argmax of the next-token logits, one forward per token,
    # until an end token or 12 tokens
    import torch

    ids, new = list(chat.prompt_ids(HI)), []
    with torch.no_grad():
        while len(new) < 12 and not (new and new[-1] in chat.eos_ids):
            new.append(int(chat.model(torch.tensor([ids + new])).logits[0, -1].argmax()))
    assert reply(temperature=0) == chat.tokenizer.decode(new, skip_special_tokens=True)


@pytest.mark.parametrize("body, says", [
    ({"messages": []}, "messages must be a non-empty list"),
    ({"messages": [{"content": "hi"}]}, "messages[0] must be an object with a string role"),
    ({"messages": HI, "temperature": "hot"}, "temperature must be a number"),
    ({"messages": HI, "top_p": 0}, "top_p must be in (0.0, 1.0]"),
    ({"messages": HI, "max_tokens": 0}, "max_tokens must be at least 1"),
    ({"messages": HI, "seed": 1.5}, "seed must be an integer"),
    ({"messages": HI, "n": 2}, "only n=1 is supported"),
    ([1, 2], "the request body must be a JSON object"),
])
def test_a_malformed_request_gets_a_one_line_400(client, body, says):
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert says in message and "\n" not in message


def test_a_body_that_is_not_json_gets_a_400(client):
    r = client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("the request body is not JSON")


def test_the_openai_sdk_streams_and_reads_a_reply_over_a_socket(chat):
    """A real HTTP server on a free port (uvicorn on a thread) and the OpenAI SDK: the streamed
    reply is the same text as the unstreamed one for the same seed, and usage comes last."""
    openai = pytest.importorskip("openai")
    from agentrl.serve_openai import create_app, serve_in_thread

    with serve_in_thread(create_app(chat)) as base_url:
        sdk = openai.OpenAI(base_url=base_url, api_key="unused")
        whole = sdk.chat.completions.create(model="tiny", messages=HI, max_tokens=8, seed=3)
        parts = list(sdk.chat.completions.create(model="tiny", messages=HI, max_tokens=8, seed=3, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    assert text == whole.choices[0].message.content
    assert parts[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert [p.choices[0].finish_reason for p in parts if p.choices][-1] == whole.choices[0].finish_reason


def test_agentrl_serve_refuses_what_it_cannot_serve_in_one_line(chat, tmp_path, capsys):
    """No model folder, a bad port, a model folder without its tokenizer: exit 2, one line (not a
    traceback from transformers)."""
    from agentrl.cli import main

    no_tokenizer = tmp_path / "weights_only"
    no_tokenizer.mkdir()
    chat.model.config.to_json_file(no_tokenizer / "config.json")
    cases = [([str(tmp_path / "missing")], "is not a model folder (no config.json)"),
             ([str(no_tokenizer), "--port", "70000"], "--port must be in 0..65535"),
             ([str(no_tokenizer)], "agentrl serve: ")]
    for args, says in cases:
        assert main(["serve", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("agentrl serve: ") and says in err[0], err
