"""agentrl.serve_openai: a tiny random-init checkpoint behind the OpenAI chat-completions routes,
called through FastAPI's test client and, once, through the OpenAI SDK over a real socket: tokens
streamed as generated, a second request answered while a first streams, ``n``, ``stop`` and
``logprobs`` (checked against an argmax loop worked out without generate())."""

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
    ({"messages": HI, "n": 0}, "n must be in 1..16"),
    ({"messages": HI, "stop": ["a", 3]}, "stop must be a non-empty string or a list"),
    ({"messages": HI, "top_logprobs": 2}, "top_logprobs must be in 0..20, with logprobs true"),
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
             ([str(no_tokenizer)], "agentrl serve: "),
             ([chat.model.name_or_path, "--threads", "0"], "--threads must be >= 1, got 0"),
             ([chat.model.name_or_path, "--kv-cache-gib", "2"], "the hf engine has none"),
             ([chat.model.name_or_path, "--max-model-len", "100000"], "--max-model-len must be in 1..")]
    for args, says in cases:
        assert main(["serve", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("agentrl serve: ") and says in err[0], err


def _post(client, **body):
    r = client.post("/v1/chat/completions", json={"messages": HI, **body})
    assert r.status_code == 200, r.text
    return r


def _events(r) -> list[dict]:
    import json

    lines = [x.removeprefix("data: ") for x in r.text.split("\n\n") if x.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


def test_tokens_stream_as_they_are_generated(chat, client):
    whole = _post(client, temperature=0, max_tokens=12).json()["choices"][0]["message"]["content"]
    events = _events(_post(client, temperature=0, max_tokens=12, stream=True))
    texts = [e["choices"][0]["delta"].get("content") for e in events if e["choices"]]
    # the role, then a chunk per token whose text could be sent (not the whole reply at the end)
    assert texts[0] == "" and sum(1 for t in texts[1:] if t) >= 3
    assert "".join(t or "" for t in texts) == whole
    assert events[-1]["usage"]["completion_tokens"] == chat.recent[-1][1].completion_tokens


def _generating() -> int:
    import threading

    return sum(1 for t in threading.enumerate() if t.name == "hf_stream" and t.is_alive())


def test_a_second_request_is_answered_while_the_first_streams(chat):
    from agentrl.sampling.hf import STREAM_AHEAD
    from agentrl.serve_openai import ChatRequest

    first = ChatRequest(messages=HI, temperature=0, max_tokens=40)
    alone = chat.complete(first)
    # greedy, the tiny model never ends its turn within 40 tokens: the stream cannot finish early
    assert alone.completion_tokens == 40 > STREAM_AHEAD + 2
    ids, max_new = chat.start(first)
    it = chat.stream(first, ids, max_new)
    head = [next(it)]  # under way; the engine is at most STREAM_AHEAD steps ahead, waiting
    assert _generating() == 1
    other = chat.complete(ChatRequest(messages=[{"role": "user", "content": "Say 2."}], temperature=0, max_tokens=5))
    assert other.completion_tokens >= 1 and _generating() == 1  # answered; the first still streams
    rest = head + list(it)
    assert "".join(d.text for d in rest) == alone.text and _generating() == 0


def test_n_choices_and_their_token_counts(client):
    body = _post(client, temperature=1.5, max_tokens=10, n=3, seed=5).json()
    choices = body["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    assert len({c["message"]["content"] for c in choices}) > 1  # drawn independently
    assert body == _post(client, temperature=1.5, max_tokens=10, n=3, seed=5).json() | {
        "id": body["id"], "created": body["created"]}  # seeded: the same three
    greedy = _post(client, temperature=0, max_tokens=10, n=2).json()
    a, b = greedy["choices"]
    assert a["message"] == b["message"] and greedy["usage"]["completion_tokens"] == 2 * _post(
        client, temperature=0, max_tokens=10).json()["usage"]["completion_tokens"]
    streamed = _events(_post(client, temperature=1.5, max_tokens=10, n=3, seed=5, stream=True))
    for i, c in enumerate(choices):
        parts = [e["choices"][0] for e in streamed if e["choices"] and e["choices"][0]["index"] == i]
        assert "".join(p["delta"].get("content") or "" for p in parts) == c["message"]["content"]
        assert parts[-1]["finish_reason"] == c["finish_reason"]


def test_a_stop_string_ends_the_reply_before_it(client):
    whole = _post(client, temperature=0, max_tokens=16).json()["choices"][0]["message"]["content"]
    assert len(whole) >= 8
    stop = whole[4:7]
    want = whole[:whole.find(stop)]
    c = _post(client, temperature=0, max_tokens=16, stop=[stop, "never-written"]).json()["choices"][0]
    assert c["message"]["content"] == want and c["finish_reason"] == "stop"
    events = _events(_post(client, temperature=0, max_tokens=16, stop=stop, stream=True))
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == want


def test_logprobs_are_the_drawn_tokens_under_the_sampled_distribution(chat, client):
    import math

    import torch

    c = _post(client, temperature=0, max_tokens=6, logprobs=True, top_logprobs=2).json()["choices"][0]
    entries = c["logprobs"]["content"]
    # greedy worked out by hand: argmax of each forward's logits, its log-softmax value
    ids, want = list(chat.prompt_ids(HI)), []
    with torch.no_grad():
        while len(want) < 6:
            logp = torch.log_softmax(chat.model(torch.tensor([ids])).logits[0, -1].float(), -1)
            t = int(logp.argmax())
            if t in chat.eos_ids:
                break
            want.append(logp[t].item())
            ids.append(t)
    assert [e["logprob"] for e in entries] == pytest.approx(want, abs=1e-4)
    for e in entries:  # greedy drew the likeliest: the first alternative is the token itself
        assert e["top_logprobs"][0]["token"] == e["token"] and len(e["top_logprobs"]) == 2
        assert e["top_logprobs"][0]["logprob"] == pytest.approx(e["logprob"]) and e["logprob"] <= 0
        assert bytes(e["bytes"]).decode() == e["token"]
    assert "".join(e["token"] for e in entries) == c["message"]["content"]
    # sampled at top-p 0.5: a finite log-prob per token, no alternatives unless asked
    s = _post(client, temperature=1.0, top_p=0.5, max_tokens=6, seed=2, logprobs=True).json()["choices"][0]
    assert all(math.isfinite(e["logprob"]) and e["top_logprobs"] == [] for e in s["logprobs"]["content"])


def test_max_model_len_bounds_the_context_served(chat):
    """``--max-model-len`` below the model's context: a prompt that fills it is a one-line 400, a
    reply is cut to what is left of it."""
    from fastapi.testclient import TestClient

    from agentrl.serve_openai import ChatModel, create_app

    n = len(chat.prompt_ids(HI))
    short = ChatModel(chat.model.name_or_path, name="tiny", max_model_len=n + 3, threads=1)
    client = TestClient(create_app(short))
    r = client.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 50, "temperature": 0})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 3
    long = [{"role": "user", "content": "Craft a stick. " * 4}]
    r = client.post("/v1/chat/completions", json={"messages": long})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == f"the prompt is {len(short.prompt_ids(long))} tokens; the model's context is {n + 3}"
