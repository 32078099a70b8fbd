"""The two tools: Python in the bubblewrap sandbox, BM25 search over a local corpus.

Python: every call is a fresh interpreter (no variables survive between calls, as in APPO's
code, which starts a subprocess per call) in ``agentrl_envs.swe.sandbox.Sandbox``: no network,
own namespaces, address-space / CPU / process / file-size limits and a wall-clock kill. The cell
is written to an emptied workspace and run by a small runner that executes it like a notebook
cell: the value of a last bare expression is printed (its ``repr``, unless None). ``random`` is
seeded with 0 so that a replayed call prints the same thing. The jail's interpreter is the
system ``/usr/bin/python3`` (standard library only).

Search: bm25s (Lucene scoring, English stopwords, Snowball stemmer) over one document per
corpus entry (title + text); a query returns the top ``k`` documents with a positive score.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import weakref
from pathlib import Path

from agentrl_envs.swe.sandbox import JAIL_PYTHON, RUNTIME_MOUNT, WORKDIR, Limits, Sandbox
from agentrl_envs.tasks.qa import Document

MAX_CODE_CHARS = 20_000

_RUNNER = '''import ast, random, sys, traceback
random.seed(0)
src = open("cell.py", encoding="utf-8").read()
try:
    tree = ast.parse(src, "<cell>")
except SyntaxError:
    traceback.print_exc(limit=0)
    sys.exit(1)
last = None
if tree.body and isinstance(tree.body[-1], ast.Expr):
    last = ast.Expression(tree.body.pop().value)
env = {"__name__": "__main__"}
try:
    exec(compile(tree, "<cell>", "exec"), env)
    if last is not None:
        value = eval(compile(last, "<cell>", "eval"), env)
        if value is not None:
            print(repr(value))
except SystemExit:
    raise
except BaseException as e:
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f for f in tb if f.filename == "<cell>"]
    line = f"line {frames[-1].lineno}: " if frames else ""
    print(f"{line}{type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
'''


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


class PythonTool:
    """Runs code cells in a bubblewrap sandbox (raises RuntimeError at construction if there is none)."""

    def __init__(self, wall_s: float = 10.0, memory_mb: int = 512, max_output_chars: int = 2000):
        self.max_output_chars = int(max_output_chars)
        self._base = Path(tempfile.mkdtemp(prefix="agentrl-toolreason-"))
        self._finalizer = weakref.finalize(self, _rmtree, self._base)
        self.workspace = self._base / "work"
        self.workspace.mkdir()
        runtime = self._base / "runtime"
        runtime.mkdir()
        (runtime / "cell_runner.py").write_text(_RUNNER)
        for p in (runtime, runtime / "cell_runner.py"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        self.sandbox = Sandbox(self.workspace, runtime, Limits(wall_s=wall_s, cpu_s=max(1, int(wall_s) + 1),
                                                               memory_mb=memory_mb, output_bytes=16384))
        self.sandbox.give(self._base)

    def run(self, code: str) -> str:
        """Output of one cell (stdout and stderr merged), clipped; never raises on user code."""
        if len(code) > MAX_CODE_CHARS:
            return f"Error: code longer than {MAX_CODE_CHARS} characters."
        for p in self.workspace.iterdir():
            _rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        cell = self.workspace / "cell.py"
        cell.write_text(code)
        self.sandbox.give(cell)
        res = self.sandbox.run([JAIL_PYTHON, "-I", f"{RUNTIME_MOUNT}/cell_runner.py"])
        out = res.output.strip().replace(WORKDIR + "/", "")
        if res.timed_out:
            out = (out + f"\nError: timed out after {self.sandbox.limits.wall_s:g} s.").strip()
        if len(out) > self.max_output_chars:
            half = self.max_output_chars // 2
            out = out[:half] + "\n[... output clipped ...]\n" + out[-half:]
        return out or "(no output)"

    def close(self) -> None:
        self._finalizer()


class SearchIndex:
    """bm25s over ``documents`` (title + text)."""

    def __init__(self, documents: list[Document]):
        import bm25s
        import Stemmer

        if not documents:
            raise ValueError("SearchIndex needs at least one document")
        self.documents = list(documents)
        self._stemmer = Stemmer.Stemmer("english")
        tokens = bm25s.tokenize([f"{d.title}. {d.text}" for d in self.documents], stopwords="en",
                                stemmer=self._stemmer, show_progress=False, return_ids=False)
        self._bm25 = bm25s.BM25()
        self._bm25.index(tokens, show_progress=False)
        self._vocab = set(self._bm25.vocab_dict)

    def search(self, query: str, k: int = 3) -> list[Document]:
        """Top-``k`` documents with a positive BM25 score, best first (ties: corpus order)."""
        import bm25s

        q = bm25s.tokenize([query], stopwords="en", stemmer=self._stemmer, show_progress=False,
                           return_ids=False)[0]
        q = [t for t in q if t in self._vocab]
        if not q:
            return []
        ids, scores = self._bm25.retrieve([q], k=min(k, len(self.documents)), show_progress=False,
                                          n_threads=1)
        return [self.documents[i] for i, s in zip(ids[0], scores[0], strict=True) if s > 0]


@functools.lru_cache(maxsize=8)
def kb_index(seed: int):
    """(KnowledgeBase, SearchIndex) of the generated KB ``seed``, built once per process."""
    from agentrl_envs.tasks.qa import generate_kb

    kb = generate_kb(seed)
    return kb, SearchIndex(kb.documents)


def format_hits(hits: list[Document], max_chars: int) -> str:
    """Search results as the model sees them."""
    if not hits:
        return "No results."
    text = "\n".join(f"[{i}] {d.title}: {d.text}" for i, d in enumerate(hits, 1))
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."
