"""The SWE env's expert: replay the task's reference patch, run the tests once, then finish.

It reads the workspace as it is now, so it recovers from the agent's own edits: a file at one of
the patch's intermediate states gets the next edit, any other content is replaced whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentrl_envs.swe.tasks import Task


def expert_action(task: Task, repo: Path, validated: bool) -> str | None:
    """The next tool call (JSON) towards the fixed repository; ``validated``: the tests ran
    since the last modification."""
    seen = []
    for edit in task.patch:
        if edit["path"] in seen:
            continue
        seen.append(edit["path"])
        call = _fix_file(task, repo, edit["path"])
        if call is not None:
            return json.dumps(call)
    if not validated:
        return json.dumps({"tool": "bash", "command": "pytest -q"})
    return json.dumps({"tool": "finish"})


def _fix_file(task: Task, repo: Path, path: str) -> dict | None:
    """The call that brings ``path`` one step closer to its patched text (None: it is there)."""
    states = task.patch_states(path)
    host = repo / path
    current = None
    if host.is_file() and not host.is_symlink():
        current = host.read_bytes().decode("utf-8", "replace")
    if current == states[-1]:
        return None
    if current is None:
        if os.path.lexists(host):
            return {"tool": "bash", "command": f"rm -rf {path}"}
        return {"tool": "file_editor", "command": "create", "path": path, "file_text": states[-1]}
    if current in states[:-1]:
        step = [e for e in task.patch if e["path"] == path][states.index(current)]
        return {"tool": "file_editor", "command": "str_replace", "path": path,
                "old_str": step["old"], "new_str": step["new"]}
    if current == "":
        return {"tool": "file_editor", "command": "insert", "path": path, "insert_line": 0,
                "new_str": states[-1]}
    return {"tool": "file_editor", "command": "str_replace", "path": path, "old_str": current,
            "new_str": states[-1]}
