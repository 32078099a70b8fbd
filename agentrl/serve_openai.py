"""Serve a local Hugging Face causal LM as an OpenAI-compatible chat-completions endpoint.

    agentrl serve CHECKPOINT [--port 8000] [--host 127.0.0.1] [--model-name NAME] [--device cpu]
    (or python -m agentrl.serve_openai ...)

Routes: ``POST /v1/chat/completions`` (the conversation goes through the checkpoint's chat
template, the reply is sampled with the request's ``temperature``, ``top_p``, ``max_tokens``
and ``seed``; ``stream: true`` answers with server-sent events) and ``GET /v1/models``. A
malformed request gets a 400 whose message is one line.

It exists so that tools which only speak to an OpenAI-style endpoint (verifiers' harnesses, an
OpenAI SDK script) can play agentrl's envs with a checkpoint on this machine: it is a small,
single-process server (one generation at a time), not an inference engine. Tool calls, ``n > 1``,
logprobs and stop strings are not implemented; the fields that ask for them are ignored, except
``n``, which must be 1.
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
from typing import Any

from agentrl.rollout.generation import end_token_ids, hf_generate_fn

DEFAULT_MAX_TOKENS = 256
"""Reply length when a request names none (OpenAI leaves it to the model; a bound keeps a
random-init checkpoint from talking until its context is full)."""
RECENT = 256
"""How many exchanges ``ChatModel.recent`` keeps."""


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


@dataclass
class Completion:
    """One generated reply and its token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (the model ended its turn) or "length" (max_tokens reached)


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
    if body.get("n", 1) not in (1, None):
        raise BadRequest("only n=1 is supported")
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
    )


class ChatModel:
    """A checkpoint and its tokenizer, generating one reply at a time."""

    def __init__(self, checkpoint: str | Path, name: str | None = None, device: str = "cpu"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = name or Path(checkpoint).name
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        if self.tokenizer.chat_template is None:
            raise ValueError(f"{checkpoint}: the tokenizer has no chat template")
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint).to(device).eval()
        self.context = getattr(self.model.config, "max_position_embeddings", None)
        self.eos_ids = end_token_ids(self.model, self.tokenizer)
        if not self.eos_ids:
            raise ValueError(f"{checkpoint}: neither the tokenizer nor the generation config names an end token")
        # generate() draws from torch's global generator: a seeded request reseeds it, and the
        # lock keeps another request from drawing in between (and the model from running twice
        # at once on a small machine)
        self._lock = threading.Lock()
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

    def complete(self, request: ChatRequest) -> Completion:
        """Sample the reply to ``request`` (greedy at temperature 0)."""
        import torch

        ids = self.prompt_ids(request.messages)
        if self.context is not None and len(ids) >= self.context:
            raise BadRequest(f"the prompt is {len(ids)} tokens; the model's context is {self.context}")
        max_new = min(request.max_tokens, self.context - len(ids)) if self.context else request.max_tokens
        # the rollout's own generate call; top-k off: OpenAI's sampling has no top-k
        generate = hf_generate_fn(self.model, self.tokenizer, max_new_tokens=max_new,
                                  temperature=request.temperature, do_sample=request.temperature > 0,
                                  top_p=request.top_p, top_k=0)
        with self._lock:
            self.requests += 1
            if request.seed is not None:
                torch.manual_seed(request.seed)
            new = generate([ids])[0]
            ended = bool(new) and new[-1] in self.eos_ids
            done = Completion(text=self.tokenizer.decode(new, skip_special_tokens=True), prompt_tokens=len(ids),
                              completion_tokens=len(new), finish_reason="stop" if ended else "length")
            self.recent.append((request, done))
        return done


def completion_json(done: Completion, model: str, completion_id: str, created: int) -> dict:
    """The OpenAI ``chat.completion`` object for one reply."""
    return {
        "id": completion_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": done.text},
                     "finish_reason": done.finish_reason, "logprobs": None}],
        "usage": _usage(done),
    }


def _usage(done: Completion) -> dict:
    return {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.completion_tokens,
            "total_tokens": done.prompt_tokens + done.completion_tokens}


def stream_events(done: Completion, model: str, completion_id: str, created: int) -> Iterator[str]:
    """The reply as ``chat.completion.chunk`` server-sent events: the role, the text (generated
    whole, so one chunk), the finish reason, the usage, then ``[DONE]``."""
    def chunk(delta: dict, finish: str | None = None, usage: dict | None = None, choices: bool = True) -> str:
        body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
                if choices else [], "usage": usage}
        return f"data: {json.dumps(body)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if done.text:
        yield chunk({"content": done.text})
    yield chunk({}, finish=done.finish_reason)
    # sent always (not only for stream_options.include_usage): clients that did not ask skip it
    yield chunk({}, usage=_usage(done), choices=False)
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
        try:
            parsed = parse_request(body)
            # generation blocks for a while; off the event loop so /v1/models stays answerable
            done = await run_in_threadpool(chat.complete, parsed)
        except BadRequest as e:
            return _error(400, str(e))
        completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        model = parsed.model or chat.name
        if parsed.stream:
            return StreamingResponse(stream_events(done, model, completion_id, created),
                                     media_type="text/event-stream")
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
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
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
    try:
        chat = ChatModel(args.checkpoint, args.model_name, args.device)
    except (OSError, ValueError) as e:  # no tokenizer, no chat template, no end token, a bad device
        print(f"agentrl serve: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"serving {chat.name} at http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(create_app(chat), host=args.host, port=args.port, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
