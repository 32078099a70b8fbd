"""Serve a local Hugging Face causal LM as an OpenAI-compatible chat-completions endpoint.

    agentrl serve CHECKPOINT [--port 8000] [--host 127.0.0.1] [--model-name NAME] [--device cpu]
                             [--engine hf|vllm]
    (or python -m agentrl.serve_openai ...)

Routes: ``POST /v1/chat/completions`` (the conversation goes through the checkpoint's chat
template, the reply is sampled with the request's ``temperature``, ``top_p``, ``max_tokens``,
``seed``, ``n`` choices, ``stop`` strings and ``logprobs`` / ``top_logprobs``; ``stream: true``
answers with server-sent events, a chunk per generated token) and ``GET /v1/models``. A malformed
request gets a 400 whose message is one line.

It exists so that tools which only speak to an OpenAI-style endpoint (verifiers' harnesses, an
OpenAI SDK script) can play agentrl's envs with a checkpoint on this machine: a small,
single-process server, not an inference engine. Every reply goes through the one sampler
(``agentrl.sampling``: a ``SamplingSpec`` per request, the engine's ``stream``; the HF engine by
default, any engine with ``stream`` can stand in). On the HF engine requests run concurrently,
each on its own generate call; a seeded one runs alone (the sampling key seeds the process's
generator, which a concurrent call would draw from). ``--engine vllm`` serves through agentrl's
vLLM engine (``agentrl.sampling.vllm_engine``, vLLM's CPU build in its venv; ``BatchedEngine``):
each request joins those in flight in vLLM's continuous batching (or, on an engine with a
blocking ``generate`` only, requests that arrive while a call runs are batched into the next),
and its tokens are streamed as vLLM draws them (read from the engine every ``POLL_S``).
Log-probs are those of the distribution each token was drawn from (temperature and top-p
applied). Tool calls are not implemented.
"""

# no `from __future__ import annotations`: FastAPI reads the handlers' annotations (Request)
# at runtime, and they are imported inside create_app
import argparse
import json
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrl.serve_engine import BatchedEngine, SharedLock, sizing_refusal

if TYPE_CHECKING:  # agentrl.sampling imports torch: `agentrl serve --help` must not wait for it
    from agentrl.sampling import SamplingSpec

DEFAULT_MAX_TOKENS = 256
"""Reply length when a request names none (OpenAI leaves it to the model; a bound keeps a
random-init checkpoint from talking until its context is full)."""
RECENT = 256
"""How many exchanges ``ChatModel.recent`` keeps."""
MAX_N = 16
"""The most choices one request may ask for (``n``)."""
MAX_STOP = 4
"""The most stop strings one request may give (OpenAI's bound)."""
MAX_TOP_LOGPROBS = 20
"""The most alternatives per token ``top_logprobs`` may ask for (OpenAI's bound)."""


class BadRequest(ValueError):
    """A request this server cannot serve as written; its message becomes the 400's text."""


@dataclass
class ChatRequest:
    """The parts of a chat-completions request that this server honours."""

    messages: list[dict[str, str]]
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int | None = None
    stream: bool = False
    model: str | None = None
    n: int = 1
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0


@dataclass
class Choice:
    """One generated reply."""

    text: str
    tokens: int
    """Tokens generated, the end token included."""
    finish_reason: str
    """"stop" (the model ended its turn or wrote a stop string) or "length" (max_tokens reached)."""
    logprobs: list[dict] | None = None
    """OpenAI's ``logprobs.content`` entries (``logprobs`` asked), one per token of the text."""


@dataclass
class Completion:
    """The ``n`` replies to one request and the token counts."""

    choices: list[Choice]
    prompt_tokens: int

    @property
    def text(self) -> str:
        return self.choices[0].text

    @property
    def finish_reason(self) -> str:
        return self.choices[0].finish_reason

    @property
    def completion_tokens(self) -> int:
        return sum(c.tokens for c in self.choices)


def _content_text(content: Any, where: str) -> str:
    """A message's content as text: a string, None (an assistant turn that only called tools),
    or a list of parts of which only text parts are allowed (this server has no images)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise BadRequest(f"{where}.content: only text parts are supported")
            texts.append(part["text"])
        return "".join(texts)
    raise BadRequest(f"{where}.content must be a string or a list of text parts")


def _parse_messages(raw: Any) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages must be a non-empty list")
    messages = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a string role")
        messages.append({"role": m["role"], "content": _content_text(m.get("content"), f"messages[{i}]")})
    return messages


def _number(body: dict, key: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    """``body[key]`` as a float in [low, high] ((low, high] when ``low_open``); null means the
    default, as OpenAI's clients send it."""
    value = body.get(key)
    if value is None:
        return default
    # bool is an int to Python; a JSON true is not a temperature
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{key} must be a number")
    if value < low or value > high or (low_open and value == low):
        raise BadRequest(f"{key} must be in {'(' if low_open else '['}{low}, {high}], got {value}")
    return float(value)


def _integer(body: dict, key: str) -> int | None:
    value = body.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadRequest(f"{key} must be an integer")
    return value


def parse_request(body: Any) -> ChatRequest:
    """Check a decoded chat-completions body and keep what the server honours; raises
    ``BadRequest`` naming the first problem."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    n = _integer(body, "n")
    if n is not None and not 1 <= n <= MAX_N:
        raise BadRequest(f"n must be in 1..{MAX_N}, got {n}")
    logprobs = body.get("logprobs") or False
    if not isinstance(logprobs, bool):
        raise BadRequest("logprobs must be a boolean")
    top = _integer(body, "top_logprobs") or 0
    if not 0 <= top <= MAX_TOP_LOGPROBS or (top and not logprobs):
        raise BadRequest(f"top_logprobs must be in 0..{MAX_TOP_LOGPROBS}, with logprobs true")
    # max_completion_tokens is the newer spelling; the SDKs send either
    max_tokens = _integer(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens")
    if max_tokens is not None and max_tokens < 1:
        raise BadRequest(f"max_tokens must be at least 1, got {max_tokens}")
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise BadRequest("stream must be a boolean")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("model must be a string")
    return ChatRequest(
        messages=_parse_messages(body.get("messages")),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        max_tokens=max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS,
        seed=_integer(body, "seed"),
        stream=stream,
        model=model,
        n=n or 1,
        stop=_stops(body.get("stop")),
        logprobs=logprobs,
        top_logprobs=top,
    )


def _stops(raw: Any) -> tuple[str, ...]:
    """``stop`` as a tuple: a string, a list of up to ``MAX_STOP`` non-empty strings, or null."""
    if raw is None:
        return ()
    stops = [raw] if isinstance(raw, str) else raw
    if not isinstance(stops, list) or not all(isinstance(x, str) and x for x in stops) or len(stops) > MAX_STOP:
        raise BadRequest(f"stop must be a non-empty string or a list of at most {MAX_STOP} of them")
    return tuple(stops)


class _Row:
    """One choice being generated: its tokens, the text decoded so far and how much of it was sent
    (the tail that could begin a stop string, or an unfinished UTF-8 character, is held back)."""

    def __init__(self, tokenizer, ends: set[int], stops: tuple[str, ...], logprobs: bool):
        self.tokenizer, self.ends, self.stops = tokenizer, ends, stops
        self.ids: list[int] = []
        self.tokens = 0
        self.text = ""
        self.sent = 0
        self.finish: str | None = None
        self.logprobs: list[dict] | None = [] if logprobs else None

    def add(self, d: Any) -> tuple[str, list[dict]]:
        """Take one drawn token; returns the text that can be sent now and its log-prob entries."""
        self.tokens += 1
        if d.token in self.ends:  # the turn ends: the end token is counted, not shown
            self.finish = "stop"
            return self._flush(len(self.text)), []
        self.ids.append(d.token)
        self.text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        entries = [] if self.logprobs is None else [self._entry(d)]
        if self.logprobs is not None:
            self.logprobs += entries
        hit = [i for i in (self.text.find(s) for s in self.stops) if i >= 0]
        if hit:  # a stop string ends the reply before it
            self.text, self.finish = self.text[:min(hit)], "stop"
            return self._flush(len(self.text)), entries
        return self._flush(len(self.text) - self._held()), entries

    def end(self) -> str:
        """max_tokens reached: the rest of the text."""
        self.finish = self.finish or "length"
        return self._flush(len(self.text))

    def _held(self) -> int:
        if self.text.endswith("\ufffd"):
            return 1
        return max((k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)

    def _flush(self, upto: int) -> str:
        out, self.sent = self.text[self.sent:max(upto, self.sent)], max(upto, self.sent)
        return out

    def _entry(self, d: Any) -> dict:
        def one(token: int, logprob: float) -> dict:
            piece = self.tokenizer.decode([token])
            return {"token": piece, "logprob": logprob, "bytes": list(piece.encode("utf-8"))}

        return {**one(d.token, d.logprob), "top_logprobs": [one(t, lp) for t, lp in d.top]}


@dataclass
class Delta:
    """What one step adds to one choice: text, log-prob entries, and its finish reason once it ends."""

    index: int
    text: str
    logprobs: list[dict]
    finish: str | None = None


class ChatModel:
    """A checkpoint, its tokenizer and the engine that generates its replies."""

    def __init__(self, checkpoint: str | Path, name: str | None = None, device: str = "cpu", engine: Any = None,
                 max_model_len: int | None = None, kv_cache_gib: int = 1, threads: int | None = None):
        """``max_model_len``: the context served (prompt + reply; default and at most the model's);
        ``kv_cache_gib``: the vLLM engine's KV-cache reservation (CPU memory); ``threads``: the
        engine's compute threads (vLLM's OMP threads, torch's for the HF engine; None: the default)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = name or Path(checkpoint).name
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        if self.tokenizer.chat_template is None:
            raise ValueError(f"{checkpoint}: the tokenizer has no chat template")
        from agentrl.sampling import HFEngine, SamplingSpec, end_token_ids, pad_id_of

        if engine == "vllm":  # vLLM loads the weights in its own process: only the configs here
            self.model = None
            config, holder = _configs(checkpoint)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(checkpoint).to(device).eval()
            config, holder = self.model.config, self.model
        self.context = getattr(config, "max_position_embeddings", None)
        if max_model_len is not None:
            if max_model_len < 1 or (self.context is not None and max_model_len > self.context):
                raise ValueError(f"--max-model-len must be in 1..{self.context} (the model's context), "
                                 f"got {max_model_len}")
            self.context = max_model_len
        if threads is not None and engine != "vllm":
            torch.set_num_threads(threads)
        self.eos_ids = end_token_ids(holder, self.tokenizer)
        if not self.eos_ids:
            raise ValueError(f"{checkpoint}: neither the tokenizer nor the generation config names an end token")
        if engine == "vllm":
            from agentrl.sampling.vllm_engine import VLLMEngine

            engine = BatchedEngine(VLLMEngine(checkpoint, max_model_len=self.context, kv_cache_gib=kv_cache_gib,
                                              threads=threads))
        elif engine in (None, "hf"):
            engine = HFEngine(self.model, pad_id_of(self.tokenizer, SamplingSpec(
                end_token_ids=tuple(sorted(self.eos_ids)))))
        self.engine = engine
        """What generates (``stream(prompts, spec, seed, top_logprobs)``: ``agentrl.sampling.hf.HFEngine``,
        or ``BatchedEngine`` over the vLLM engine)."""
        self.lock = SharedLock()
        """Unseeded requests share it; a seeded one holds it alone (module docstring)."""
        self._count = threading.Lock()
        self.requests = 0
        """Chat completions served (the tests count the model's turns with it)."""
        self.recent: deque[tuple[ChatRequest, Completion]] = deque(maxlen=RECENT)
        """The last ``RECENT`` requests and their replies, oldest first (what a caller can
        check a client's record against without a log file)."""

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The conversation rendered by the chat template, ending with the assistant's header."""
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # the template already wrote the special tokens it wants
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def spec(self, request: ChatRequest, max_new: int) -> "SamplingSpec":
        """The request's sampling spec: its temperature and top-p (greedy at temperature 0), no
        top-k (OpenAI's sampling has none), this model's end tokens."""
        from agentrl.sampling import SamplingSpec

        return SamplingSpec(temperature=request.temperature or 1.0, top_p=request.top_p, max_new_tokens=max_new,
                            end_token_ids=tuple(sorted(self.eos_ids)), greedy=request.temperature == 0)

    def start(self, request: ChatRequest) -> tuple[list[int], int]:
        """The prompt's ids and the reply's length bound; a prompt longer than the context is a 400."""
        if request.top_logprobs and not getattr(self.engine, "serves_top_logprobs", True):
            raise BadRequest("top_logprobs is not served on this engine (logprobs is); leave it at 0")
        ids = self.prompt_ids(request.messages)
        if self.context is not None and len(ids) >= self.context:
            raise BadRequest(f"the prompt is {len(ids)} tokens; the model's context is {self.context}")
        return ids, min(request.max_tokens, self.context - len(ids)) if self.context else request.max_tokens

    def stream(self, request: ChatRequest, ids: list[int], max_new: int,
               out: list[Completion] | None = None) -> Iterator[Delta]:
        """The ``n`` replies as they are generated: a ``Delta`` per choice and step that adds text
        or log-probs, and one with the finish reason as each choice ends; when the last one ends
        the ``Completion`` is appended to ``out`` and recorded in ``recent``."""
        rows = [_Row(self.tokenizer, self.eos_ids, request.stop, request.logprobs) for _ in range(request.n)]
        seeded = (request.seed is not None and request.temperature > 0
                  and not getattr(self.engine, "own_random_stream", False))
        with self._count:
            self.requests += 1
        with self.lock.hold(exclusive=seeded):
            steps = self.engine.stream([ids] * request.n, self.spec(request, max_new), request.seed,
                                       request.top_logprobs)
            try:
                for step in steps:
                    for i, (row, d) in enumerate(zip(rows, step, strict=True)):
                        if d is None or row.finish:
                            continue
                        text, entries = row.add(d)
                        if text or entries or row.finish:
                            yield Delta(i, text, entries, row.finish)
                    if all(r.finish for r in rows):
                        break
            finally:
                steps.close()
        for i, row in enumerate(rows):
            if not row.finish:
                yield Delta(i, row.end(), [], row.finish)
        done = Completion([Choice(r.text, r.tokens, r.finish or "length", r.logprobs) for r in rows], len(ids))
        with self._count:
            self.recent.append((request, done))
        if out is not None:
            out.append(done)

    def complete(self, request: ChatRequest) -> Completion:
        """The whole reply to ``request`` (greedy at temperature 0)."""
        ids, max_new = self.start(request)
        out: list[Completion] = []
        for _ in self.stream(request, ids, max_new, out):
            pass
        return out[0]

    def close(self) -> None:
        """Stop the engine when it runs outside this process (the vLLM engine's server)."""
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


def _configs(checkpoint: str | Path) -> tuple[Any, Any]:
    """The checkpoint's model config and something holding its generation config (what
    ``end_token_ids`` reads), without loading the weights: the folder's generation_config.json, else
    the one transformers derives from the model config (what ``from_pretrained`` would give)."""
    from types import SimpleNamespace

    from transformers import AutoConfig, GenerationConfig

    config = AutoConfig.from_pretrained(checkpoint)
    try:
        generation = GenerationConfig.from_pretrained(checkpoint)
    except OSError:
        generation = GenerationConfig.from_model_config(config)
    return config, SimpleNamespace(generation_config=generation)


def completion_json(done: Completion, model: str, completion_id: str, created: int) -> dict:
    """The OpenAI ``chat.completion`` object for one request's replies."""
    return {
        "id": completion_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": c.text},
                     "finish_reason": c.finish_reason,
                     "logprobs": None if c.logprobs is None else {"content": c.logprobs}}
                    for i, c in enumerate(done.choices)],
        "usage": _usage(done),
    }


def _usage(done: Completion) -> dict:
    return {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.completion_tokens,
            "total_tokens": done.prompt_tokens + done.completion_tokens}


def stream_events(chat: ChatModel, request: ChatRequest, ids: list[int], max_new: int, model: str,
                  completion_id: str, created: int) -> Iterator[str]:
    """The replies as ``chat.completion.chunk`` server-sent events, generated as they are sent:
    each choice's role, a chunk per step that adds text or log-probs, its finish reason, then the
    usage and ``[DONE]``."""
    def chunk(choices: list[dict], usage: dict | None = None) -> str:
        body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": choices, "usage": usage}
        return f"data: {json.dumps(body)}\n\n"

    def choice(i: int, delta: dict, finish: str | None = None, logprobs: list[dict] | None = None) -> dict:
        return {"index": i, "delta": delta, "finish_reason": finish,
                "logprobs": {"content": logprobs} if logprobs else None}

    for i in range(request.n):
        yield chunk([choice(i, {"role": "assistant", "content": ""})])
    out: list[Completion] = []
    for d in chat.stream(request, ids, max_new, out):
        if d.text or d.logprobs:
            yield chunk([choice(d.index, {"content": d.text} if d.text else {}, None, d.logprobs)])
        if d.finish:
            yield chunk([choice(d.index, {}, d.finish)])
    done = out[0]
    # sent always (not only for stream_options.include_usage): clients that did not ask skip it
    yield chunk([], usage=_usage(done))
    yield "data: [DONE]\n\n"


def _error(status: int, message: str, kind: str = "invalid_request_error"):
    from fastapi.responses import JSONResponse

    # one line: the message ends up in a client's log or exception text
    line = " ".join(str(message).split())
    return JSONResponse({"error": {"message": line, "type": kind, "param": None, "code": None}}, status_code=status)


def create_app(chat: ChatModel):
    """The FastAPI app serving ``chat``."""
    from fastapi import FastAPI, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import StreamingResponse
    from starlette.exceptions import HTTPException

    app = FastAPI(title=f"agentrl serve_openai: {chat.name}")
    app.state.chat = chat

    @app.exception_handler(HTTPException)
    async def http_error(_request, exc: HTTPException):  # 404, 405, ...: OpenAI's error shape
        return _error(exc.status_code, exc.detail, "not_found" if exc.status_code == 404 else "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def invalid(_request, exc: RequestValidationError):
        return _error(400, f"invalid request: {exc.errors()[0].get('msg', exc)}")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": chat.name, "object": "model", "created": 0, "owned_by": "agentrl"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            body = json.loads(await request.body())
        except ValueError as e:  # UnicodeDecodeError included
            return _error(400, f"the request body is not JSON: {e}")
        completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        try:
            parsed = parse_request(body)
            model = parsed.model or chat.name
            if parsed.stream:  # a sync iterator: Starlette runs it on a worker thread, chunk by chunk
                ids, max_new = chat.start(parsed)
                return StreamingResponse(stream_events(chat, parsed, ids, max_new, model, completion_id, created),
                                         media_type="text/event-stream")
            # generation blocks for a while; off the event loop so other requests are taken meanwhile
            done = await run_in_threadpool(chat.complete, parsed)
        except BadRequest as e:
            return _error(400, str(e))
        return completion_json(done, model, completion_id, created)

    return app


@contextmanager
def serve_in_thread(app, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run ``app`` with uvicorn on a background thread for the ``with`` block; yields the
    base URL (``http://host:port/v1``). Port 0 takes a free port."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="serve_openai", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server on {host}:{port} did not start")
        time.sleep(0.05)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from agentrl.cli_args import both_spellings

    p = argparse.ArgumentParser(prog="agentrl serve", description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a Hugging Face causal LM folder (its tokenizer needs a chat template)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model-name", default=None, help="the id /v1/models lists (default: the folder's name)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda (the HF engine's)")
    p.add_argument("--engine", default="hf", choices=("hf", "vllm"),
                   help="hf: transformers' generate in this process (default); vllm: agentrl's vLLM engine "
                        "(vLLM's CPU build in its venv, make vllm-venv; concurrent requests batched)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="the context served, prompt + reply (default: the model's); a longer prompt is a 400")
    p.add_argument("--kv-cache-gib", type=int, default=None,
                   help="CPU memory vLLM reserves for its KV cache (vllm engine only; default 1)")
    p.add_argument("--threads", type=int, default=None,
                   help="compute threads of the engine (vLLM's OMP threads, or torch's; default: all cores)")
    both_spellings(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    args = parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"agentrl serve: --port must be in 0..65535, got {args.port}", file=sys.stderr)
        return 2
    if not (Path(args.checkpoint) / "config.json").is_file():
        print(f"agentrl serve: {args.checkpoint} is not a model folder (no config.json)", file=sys.stderr)
        return 2
    why = sizing_refusal(args)  # before anything loads
    if why:
        print(f"agentrl serve: {why}", file=sys.stderr)
        return 2
    if args.engine == "vllm":  # before the engine takes a minute to start and then refuses
        from agentrl.sampling.vllm_heads import head_size_refusal

        why = head_size_refusal(args.checkpoint, "--engine hf")
        if why:
            print(f"agentrl serve: {why}", file=sys.stderr)
            return 2
    try:
        chat = ChatModel(args.checkpoint, args.model_name, args.device, engine=args.engine,
                         max_model_len=args.max_model_len, kv_cache_gib=args.kv_cache_gib or 1, threads=args.threads)
    except (OSError, ValueError, RuntimeError) as e:  # no tokenizer, chat template, end token; a bad
        # device; no vLLM venv or a vLLM server that did not start (VLLMError)
        print(f"agentrl serve: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"serving {chat.name} at http://{args.host}:{args.port}/v1 ({args.engine} engine)", flush=True)
    try:
        uvicorn.run(create_app(chat), host=args.host, port=args.port, log_level="info")
    finally:
        chat.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
