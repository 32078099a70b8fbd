"""The SWE env's grading harness: runs the task's tests and writes the verdict where only it can.

Installed read-only in the jail's runtime as ``pytest/_grade.py`` and run as
``python3 -I _grade.py --result-fd N TEST_FILE...`` in a fresh jail whose /testbed is a read-only
copy of the pristine tests plus the submission's source files (grading.py).

This process never imports the repository: each test file is collected, and each test is run,
in a child forked for it, which first closes the result fd N (a pipe to the host). A child sends
its outcome back over a pipe of its own; this process counts the outcomes (a test id counts
once) and writes ``passed=P failed=F errors=E`` to fd N, the only thing the host reads as the
verdict. It is made non-dumpable, so that a child (same uid) cannot reach fd N through
/proc/PID/fd or ptrace. A child that dies or exits without a well-formed report is an error.

What this does not stop: the submission's code runs inside each test's child, so it decides how
that one test's run ends, as in any pytest run (returning objects that compare equal to anything,
or speaking the child's report protocol itself). It cannot edit the runner, the tests or the
result channel, or change another test's outcome.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pytest as shim  # noqa: E402 - our runner, from the read-only runtime

_MAX_REPORT = 1 << 16  # bytes of one child's report kept (outcome + failure text)
_PR_SET_DUMPABLE = 4


def _in_child(result_fd, fn, *args):
    """Run ``fn(*args)`` in a forked child; (kind, text) of its report, or ("error", why)."""
    # Everything the child needs after the repository's code has run is bound here, before the
    # fork: patching os, the shim or this module from inside the child changes none of it.
    write, exit_, close, flush = os.write, os._exit, os.close, sys.stdout.flush
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        close(r)
        close(result_fd)
        try:
            kind, text = fn(*args)
        except BaseException as e:  # noqa: BLE001 - a broken test file or SystemExit
            kind, text = "error", shim._format_failure(e)
        data = f"{kind}\n{text}".encode("utf-8", "replace")[:_MAX_REPORT]
        try:
            while data:
                data = data[write(w, data):]
        finally:
            try:
                flush()  # what the test printed (python -I ignores PYTHONUNBUFFERED)
            finally:
                exit_(0)
    os.close(w)
    chunks, size = [], 0
    while size <= _MAX_REPORT:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    kind, _, text = b"".join(chunks).decode("utf-8", "replace").partition("\n")
    if kind not in ("ids", "pass", "fail", "skip", "error") or status != 0:
        return "error", f"the test process ended without a report (status {os.waitstatus_to_exitcode(status)})"
    return kind, text


def _collect(path, _import=shim._import, _collect=shim._collect):
    """Child: the test ids of one file. (The shim's functions are bound as defaults: the test
    file's imports run the repository's code, which may rebind the shim's names.)"""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    mod = _import(path)
    return "ids", "\n".join(tid for tid, *_ in _collect(mod))


def _run_one(path, tid, _import=shim._import, _collect=shim._collect, skipped=shim.Skipped):
    """Child: run the test ``tid`` of ``path``; its outcome and, on failure, the report."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for full, cls, obj, kw in _collect(_import(path)):
        if full == tid:
            fn = getattr(cls(), obj) if cls is not None else obj
            try:
                fn(**kw)
            except skipped:
                return "skip", ""
            except Exception as e:  # noqa: BLE001 - a failing test
                return "fail", shim._format_failure(e)
            return "pass", ""
    return "error", f"test {tid} not found"


def main(argv):
    fd_at = argv.index("--result-fd")
    result_fd = int(argv[fd_at + 1])
    paths = argv[:fd_at] + argv[fd_at + 2:]
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    counts = {"pass": 0, "fail": 0, "skip": 0, "error": 0}
    reports = []
    for path in sorted({f for p in paths if not p.startswith("-") for f in shim._find_files(p)}):
        rel = os.path.relpath(path)
        kind, text = _in_child(result_fd, _collect, path)
        if kind != "ids":
            counts["error"] += 1
            reports.append(f"ERROR collecting {rel}\n{text}")
            continue
        print(rel + " ", end="", flush=True)
        for tid in dict.fromkeys(t for t in text.split("\n") if t):  # each id once, in order
            kind, report = _in_child(result_fd, _run_one, path, tid)
            counts[kind] += 1
            print({"pass": ".", "fail": "F", "skip": "s"}.get(kind, "E"), end="", flush=True)
            if kind in ("fail", "error"):
                reports.append(f"{'_' * 10} {tid} {'_' * 10}\n{report}")
        print()
    if reports:
        print("=" * 30 + " FAILURES " + "=" * 30)
        print("\n".join(reports))
    print(f"{counts['fail']} failed, {counts['pass']} passed, {counts['error']} errors")
    line = f"passed={counts['pass']} failed={counts['fail']} errors={counts['error']}\n".encode()
    os.write(result_fd, line)
    return 0 if counts["pass"] and not (counts["fail"] or counts["error"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
