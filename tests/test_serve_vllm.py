"""``agentrl serve --engine vllm``: the OpenAI-compatible server on agentrl's vLLM engine (vLLM's CPU
build in its venv), against the HF engine on the same checkpoint.

One vLLM server for the module (it imports vLLM and loads the model in about 60 s on a loaded
2-core machine), on a tiny random Qwen2 whose head size is 64 (vLLM's CPU attention refuses the
default tiny model's 16: ``agentrl.sampling.vllm_heads``). What is proven over HTTP: greedy replies
and their log-probs equal the HF engine's (1e-4), streaming gives the same text in per-token
chunks, ``n``, ``stop``, ``top_logprobs`` (HF's within 1e-4), seeded sampling repeating, and concurrent requests batched into one
engine call with the replies each would get alone, and tokens handed over while vLLM still
generates the reply. ``BatchedEngine``'s batching is also checked
without vLLM, over the HF engine's whole-reply ``generate``, and the refusals run without it too.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="the server needs fastapi (make setup installs it)")

from agentrl.sampling.vllm_engine import vllm_python, vllm_venv  # noqa: E402

needs_vllm = pytest.mark.skipif(vllm_python() is None, reason=f"no vLLM venv at {vllm_venv()} (make vllm-venv)")

HI = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Craft a stick."}]
LOGPROB_TOL = 1e-4
"""vLLM's greedy log-probs vs the HF engine's for the same reply: both fp32 log-softmax of the same
logits from different kernels (2e-6 apart in tests/sampling/test_vllm_engine.py)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from agentrl.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("serve64") / "model", hidden_size=128, num_heads=2,
                            num_kv_heads=1)


@pytest.fixture(scope="module")
def hf_chat(model_dir):
    from agentrl.serve_openai import ChatModel

    return ChatModel(model_dir, name="tiny")


@pytest.fixture(scope="module")
def vllm_chat(model_dir):
    from agentrl.serve_openai import ChatModel

    # the serve options of the engine (the model's context is 4096): the tests' prompts fit in 512
    chat = ChatModel(model_dir, name="tiny", engine="vllm", max_model_len=512, kv_cache_gib=1, threads=2)
    yield chat
    chat.close()


@pytest.fixture(scope="module")
def url(vllm_chat):
    from agentrl.serve_openai import create_app, serve_in_thread

    with serve_in_thread(create_app(vllm_chat)) as base:
        yield base


def _post(url: str, **body) -> dict:
    import httpx

    r = httpx.post(f"{url}/chat/completions", json={"messages": HI, **body}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def _stream(url: str, **body) -> list[dict]:
    import httpx

    r = httpx.post(f"{url}/chat/completions", json={"messages": HI, "stream": True, **body}, timeout=300)
    assert r.status_code == 200, r.text
    lines = [x.removeprefix("data: ") for x in r.text.split("\n\n") if x.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


def _text(events: list[dict], index: int = 0) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                   if e["choices"] and e["choices"][0]["index"] == index)


@pytest.mark.slow
@needs_vllm
def test_greedy_reply_and_logprobs_equal_the_hf_engines_and_stream_in_chunks(url, vllm_chat, hf_chat):
    from agentrl.serve_openai import ChatRequest

    got = _post(url, temperature=0, max_tokens=12, logprobs=True)
    (choice,) = got["choices"]
    want = hf_chat.complete(ChatRequest(messages=HI, temperature=0, max_tokens=12, logprobs=True)).choices[0]
    assert choice["message"]["content"] == want.text and choice["finish_reason"] == want.finish_reason
    entries = choice["logprobs"]["content"]
    assert len(entries) == len(want.logprobs) >= 6
    assert [e["token"] for e in entries] == [e["token"] for e in want.logprobs]
    assert [e["logprob"] for e in entries] == pytest.approx([e["logprob"] for e in want.logprobs], abs=LOGPROB_TOL)
    assert got["usage"]["completion_tokens"] == want.tokens
    # streamed: the same text in a chunk per token (not the whole reply in one)
    events = _stream(url, temperature=0, max_tokens=12)
    pieces = [e["choices"][0]["delta"].get("content") for e in events if e["choices"]]
    assert _text(events) == want.text and sum(1 for p in pieces if p) >= 3
    assert events[-1]["usage"]["completion_tokens"] == want.tokens


@pytest.mark.slow
@needs_vllm
def test_tokens_stream_while_vllm_generates(vllm_chat):
    from agentrl.serve_openai import ChatRequest

    request = ChatRequest(messages=HI, temperature=0, max_tokens=300)
    alone = vllm_chat.complete(request)
    assert alone.completion_tokens == 300  # greedy, this model does not end its turn early
    ids, max_new = vllm_chat.start(request)
    it = vllm_chat.stream(request, ids, max_new)
    head = next(it)
    # the first text is out while vLLM still generates the reply (not handed over at its end)
    assert vllm_chat.engine.live and vllm_chat.engine.engine.unfinished() == 1
    rest = [head, *it]
    assert "".join(d.text for d in rest) == alone.text and vllm_chat.engine.engine.unfinished() == 0


def _wait(done, seconds: float = 60.0) -> bool:
    """Poll ``done`` every 10 ms for up to ``seconds``; whether it came true."""
    end = time.monotonic() + seconds
    while not done():
        if time.monotonic() > end:
            return False
        threading.Event().wait(0.01)
    return True


@pytest.mark.slow
@needs_vllm
def test_n_choices_seeded_sampling_and_a_stop_string(url, vllm_chat):
    two = _post(url, temperature=1.5, max_tokens=10, n=2, seed=5)
    a, b = (c["message"]["content"] for c in two["choices"])
    assert [c["index"] for c in two["choices"]] == [0, 1] and a and b
    assert a != b  # drawn independently (each row its own key): a random-init model at T 1.5
    assert [c["message"]["content"] for c in _post(url, temperature=1.5, max_tokens=10, n=2, seed=5)["choices"]] == [a, b]
    streamed = _stream(url, temperature=1.5, max_tokens=10, n=2, seed=5)
    assert [_text(streamed, 0), _text(streamed, 1)] == [a, b]
    # a stop string: the reply ends before it, finish_reason "stop", streamed the same
    whole = _post(url, temperature=0, max_tokens=16)["choices"][0]["message"]["content"]
    assert len(whole) >= 8
    stop = whole[4:7]
    c = _post(url, temperature=0, max_tokens=16, stop=[stop])["choices"][0]
    assert c["message"]["content"] == whole[:whole.find(stop)] and c["finish_reason"] == "stop"
    assert _text(_stream(url, temperature=0, max_tokens=16, stop=stop)) == whole[:whole.find(stop)]
    # a reply cut by its stop string early is not generated on to max_tokens: the engine aborts it
    # (once the streamed reply above is done in the engine: its abort would count otherwise; on a
    # loaded machine that took over 5 s in CI, so wait up to a minute and say so if not)
    engine = vllm_chat.engine
    assert _wait(lambda: engine.engine.unfinished() == 0), "the streamed reply is still in the engine"
    aborted = engine.aborted
    c = _post(url, temperature=0, max_tokens=300, stop=[stop])["choices"][0]
    assert c["message"]["content"] == whole[:whole.find(stop)]
    # the engine's thread aborts it at its next round (every 50 ms)
    _wait(lambda: engine.aborted > aborted and engine.engine.unfinished() == 0)
    assert vllm_chat.engine.aborted == aborted + 1 and vllm_chat.engine.engine.unfinished() == 0


@pytest.mark.slow
@needs_vllm
def test_concurrent_requests_are_batched_into_one_call(url, vllm_chat):
    prompts = [[{"role": "user", "content": f"Say {k}."}] for k in range(3)]
    alone = [_post(url, messages=p, temperature=0, max_tokens=8)["choices"][0]["message"]["content"] for p in prompts]
    before = len(vllm_chat.engine.batches)
    # a long reply holds the engine; the three sent meanwhile wait together for its next call
    out: dict[int, str] = {}

    def ask(k: int, **body):
        out[k] = _post(url, **body)["choices"][0]["message"]["content"]

    first = threading.Thread(target=ask, args=(-1,), kwargs=dict(temperature=0, max_tokens=400))
    first.start()
    assert _wait(lambda: len(vllm_chat.engine.batches) > before or vllm_chat.engine.busy), "the long reply never started"
    others = [threading.Thread(target=ask, args=(k,), kwargs=dict(messages=p, temperature=0, max_tokens=8))
              for k, p in enumerate(prompts)]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join()
    calls = vllm_chat.engine.batches[before:]
    # the long reply alone first; the others joined it in flight (measured: [1, 4]; [1, 3] on an
    # engine without submit / poll, the three in the call after the long one)
    assert calls[0] == 1 and max(calls[1:]) >= 2, calls
    assert [out[k] for k in range(3)] == alone  # batched, each still gets its own greedy reply


@pytest.mark.slow
@needs_vllm
def test_top_logprobs_equal_the_hf_engines_streamed_or_not(url, hf_chat):
    from agentrl.serve_openai import ChatRequest

    want = hf_chat.complete(ChatRequest(messages=HI, temperature=0, max_tokens=8, logprobs=True,
                                        top_logprobs=3)).choices[0].logprobs
    got = _post(url, temperature=0, max_tokens=8, logprobs=True, top_logprobs=3)["choices"][0]["logprobs"]["content"]
    assert len(got) == len(want) >= 4
    for g, w in zip(got, want, strict=True):
        assert [t["token"] for t in g["top_logprobs"]] == [t["token"] for t in w["top_logprobs"]]
        assert [t["logprob"] for t in g["top_logprobs"]] == pytest.approx(
            [t["logprob"] for t in w["top_logprobs"]], abs=LOGPROB_TOL)
        assert g["top_logprobs"][0]["token"] == g["token"]  # greedy drew the likeliest
    # streamed: the same entries, chunk by chunk
    events = _stream(url, temperature=0, max_tokens=8, logprobs=True, top_logprobs=3)
    streamed = [x for e in events if e["choices"] and e["choices"][0]["logprobs"] for x in e["choices"][0]["logprobs"]["content"]]
    assert streamed == got


# ---------------------------------------------------------------- without vLLM


@pytest.fixture(scope="module", params=[False, True], ids=["generate", "submit-poll"])
def batched(request, model_dir, hf_chat):
    """The server's batching over the HF engine (what it does on vLLM): its blocking ``generate``,
    or its ``submit`` / ``poll``."""
    from agentrl.sampling import HFEngine
    from agentrl.serve_openai import BatchedEngine, ChatModel

    if request.param and not hasattr(HFEngine, "submit"):
        pytest.skip("this checkout's HFEngine has no submit / poll")
    engine = BatchedEngine(HFEngine(hf_chat.model, pad_id=hf_chat.tokenizer.pad_token_id), continuous=request.param)
    chat = ChatModel(model_dir, name="tiny", engine=engine)
    yield chat
    engine._jobs.put(None)  # the thread ends; the HF model stays (hf_chat's)


def test_batched_replies_are_the_engines_and_concurrent_ones_share_a_call(batched, hf_chat):
    from agentrl.serve_openai import ChatRequest

    def ask(messages=HI, **knobs):
        return batched.complete(ChatRequest(messages=messages, **knobs))

    want = hf_chat.complete(ChatRequest(messages=HI, temperature=0, max_tokens=10, logprobs=True)).choices[0]
    got = ask(temperature=0, max_tokens=10, logprobs=True).choices[0]
    assert got.text == want.text and got.tokens == want.tokens
    assert [e["logprob"] for e in got.logprobs] == pytest.approx([e["logprob"] for e in want.logprobs], abs=1e-5)
    # seeded: the same n replies again; a stop string cuts as on the HF engine
    first = [c.text for c in ask(temperature=1.5, max_tokens=10, n=2, seed=4).choices]
    assert first == [c.text for c in ask(temperature=1.5, max_tokens=10, n=2, seed=4).choices] and first[0] != first[1]
    stop = want.text[3:6]
    assert ask(temperature=0, max_tokens=10, stop=(stop,)).text == want.text[:want.text.find(stop)]
    # top tokens come only from an engine that reports them while it generates (vLLM's progress)
    from agentrl.serve_openai import BadRequest

    with pytest.raises(BadRequest, match="top_logprobs is not served on this engine"):
        ask(temperature=0, max_tokens=4, logprobs=True, top_logprobs=2)

    prompts = [[{"role": "user", "content": f"Say {k}."}] for k in range(3)]
    alone = [ask(p, temperature=0, max_tokens=8).text for p in prompts]
    before = len(batched.engine.batches)
    out: dict[int, str] = {}
    long = threading.Thread(target=lambda: out.setdefault(-1, ask(temperature=0, max_tokens=300).text))
    long.start()
    assert _wait(lambda: len(batched.engine.batches) > before or batched.engine.busy), "the long reply never started"
    others = [threading.Thread(target=lambda k=k, p=p: out.setdefault(k, ask(p, temperature=0, max_tokens=8).text))
              for k, p in enumerate(prompts)]
    for t in others:
        t.start()
    for t in [long, *others]:
        t.join()
    calls = batched.engine.batches[before:]
    # the long reply alone, then the three that waited for it: in one call, or submitted together
    assert max(calls) >= 2, calls
    assert [out[k] for k in range(3)] == alone


@needs_vllm
def test_the_serve_options_reach_the_vllm_engine(url, vllm_chat):
    """--max-model-len, --kv-cache-gib and --threads as the engine's server was started with them,
    and a prompt over the context served is a 400 before it reaches vLLM."""
    engine = vllm_chat.engine.engine
    cmd = engine._cmd
    assert cmd[cmd.index("--max-model-len") + 1] == "512" and cmd[cmd.index("--kv-cache-gib") + 1] == "1"
    assert engine._env["OMP_NUM_THREADS"] == "2"  # --threads: the server's OMP threads
    import httpx

    long = [{"role": "user", "content": "Craft a stick. " * 200}]
    r = httpx.post(f"{url}/chat/completions", json={"messages": long}, timeout=300)
    assert r.status_code == 400 and "the model's context is 512" in r.json()["error"]["message"]


def test_serve_on_vllm_refuses_a_head_size_it_has_no_kernel_for_in_one_line(tmp_path, capsys, monkeypatch):
    """Before a minute of vLLM start-up: the default tiny model's head size 16; then no vLLM venv."""
    from agentrl.cli import main
    from agentrl.models import build_tiny_model

    sixteen = build_tiny_model(tmp_path / "tiny16")  # hidden 64 over 4 heads
    sixty_four = build_tiny_model(tmp_path / "tiny64", hidden_size=128, num_heads=2, num_kv_heads=1)
    capsys.readouterr()  # the builds' progress bars
    assert main(["serve", str(sixteen), "--engine", "vllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agentrl serve: ") and "head size 16" in err[0], err
    monkeypatch.setenv("AGENTRL_VLLM_VENV", str(tmp_path / "no-venv"))
    assert main(["serve", str(sixty_four), "--engine", "vllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs the vLLM venv" in err[0] and "make vllm-venv" in err[0], err
