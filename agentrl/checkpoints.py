"""Checkpoints that appear only when complete, and which one a resume takes.

HF's Trainer resumes from the highest-numbered ``checkpoint-*`` folder, complete or not, so a run
killed during a save fails to resume. Here every checkpoint is written under
``output_dir/.partial/checkpoint-N`` (every rank writes its share there), flushed, and renamed to
``output_dir/checkpoint-N`` by the main process: a rename within one file system is atomic, so a
``checkpoint-N`` folder is complete or absent. ``newest_complete`` also checks folders from older
versions or copied by hand and says which it skipped and why. Failure modes: docs/training.md.

What agentrl adds to a checkpoint is a list of parts behind one interface (``Checkpointed``: a file
name and its state), written and read by one loop (``save_parts`` / ``load_parts``).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

PREFIX = "checkpoint-"
STAGING = ".partial"
"""Folder in output_dir where checkpoints are written before they are renamed into place."""
_PAYLOAD = (".pt", ".pth", ".bin", ".safetensors")


def step_of(path: Path) -> int | None:
    tail = path.name[len(PREFIX):] if path.name.startswith(PREFIX) else ""
    return int(tail) if tail.isdigit() else None


def incomplete_reason(ck: Path) -> str | None:
    """Why ``ck`` cannot be resumed from, or None if it can."""
    state = ck / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json"
    try:
        step = json.loads(state.read_text()).get("global_step")
    except (OSError, ValueError):
        return "trainer_state.json is not valid JSON"
    if step != step_of(ck):
        return f"trainer_state.json is for step {step}"
    for f in sorted(ck.rglob("*")):
        if f.is_file() and f.suffix in _PAYLOAD and f.stat().st_size == 0:
            return f"{f.relative_to(ck)} is empty"
    return None


def newest_complete(output_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest resumable ``checkpoint-N`` in ``output_dir`` and the newer ones skipped, with why."""
    out = Path(output_dir)
    cks = sorted((p for p in out.glob(PREFIX + "*") if p.is_dir() and step_of(p) is not None),
                 key=step_of, reverse=True) if out.is_dir() else []
    skipped = []
    for ck in cks:
        why = incomplete_reason(ck)
        if why is None:
            return ck, skipped
        skipped.append((ck, why))
    return None, skipped


def _fsync_tree(folder: Path) -> None:
    """Flush a folder's files and its directory entries to disk (a node that loses power after
    the rename must not show a complete-looking folder of unwritten pages)."""
    for root, _, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(staged: Path, final: Path) -> None:
    """Rename a fully written checkpoint into place (replacing an older folder of the same name)."""
    _fsync_tree(staged)
    if final.exists():  # a folder for this step from before a resume: move it aside first
        old = staged.parent / (final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(staged, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, final)
    _fsync_dir(final.parent)


def clear_staging(output_dir: str | Path) -> list[str]:
    """Remove checkpoints a killed run left half-written; returns their names."""
    staging = Path(output_dir) / STAGING
    if not staging.is_dir():
        return []
    names = sorted(p.name for p in staging.iterdir())
    shutil.rmtree(staging, ignore_errors=True)
    return names


def install_atomic_saves(trainer) -> None:
    """Make ``trainer`` (any HF Trainer) write each checkpoint under ``output_dir/.partial`` and
    rename it into place once every rank has written its share."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    assert PREFIX_CHECKPOINT_DIR + "-" == PREFIX  # the folder name Trainer gives a checkpoint
    save = trainer._save_checkpoint  # bound: the class chain's own (TRL's model card included)

    def _save_checkpoint(model, trial):
        from transformers.trainer_utils import rotate_checkpoints

        run_dir = Path(type(trainer)._get_output_dir(trainer, trial=trial))
        staging = run_dir / STAGING
        name = f"{PREFIX}{trainer.state.global_step}"
        if trainer.args.should_save:
            shutil.rmtree(staging / name, ignore_errors=True)  # a leftover of an earlier attempt
        trainer.accelerator.wait_for_everyone()
        # Trainer builds the folder from _get_output_dir(): point it at the staging folder for
        # this save (its own rotation then sees one checkpoint there and removes nothing)
        trainer._get_output_dir = lambda trial=None: str(staging)
        try:
            save(model, trial)
        finally:
            del trainer._get_output_dir
        trainer.accelerator.wait_for_everyone()  # every rank's RNG state / ZeRO shards are written
        if trainer.args.should_save:
            publish(staging / name, run_dir / name)
            try:
                staging.rmdir()  # empty unless another save is under way
            except OSError:
                pass
            if trainer.state.best_model_checkpoint:
                trainer.state.best_model_checkpoint = trainer.state.best_model_checkpoint.replace(
                    str(staging), str(run_dir))
            rotate_checkpoints(output_dir=str(run_dir), save_total_limit=trainer.args.save_total_limit,
                               best_model_checkpoint=trainer.state.best_model_checkpoint, use_mtime=False)
        trainer.accelerator.wait_for_everyone()

    trainer._save_checkpoint = _save_checkpoint


IDENTITY_FILE = "agentrl_checkpoint.json"
"""What a checkpoint is of: the layout version, the number of processes and the recipe keys it is
tied to (``agentrl.recipe_keys.identity_keys``), written into every checkpoint."""
LAYOUT = 2
"""The checkpoint layout agentrl writes and reads: 2 since the update's own loss (the guard's
counts, the update runner's files); 1 (no identity file) before."""


def write_identity(folder: str | Path, identity: dict) -> None:
    (Path(folder) / IDENTITY_FILE).write_text(json.dumps({"layout": LAYOUT, **identity}, indent=1, sort_keys=True))


def identity_mismatch(folder: str | Path, identity: dict) -> str | None:
    """Why the checkpoint ``folder`` cannot be resumed by a run of ``identity`` (one line), or None."""
    p = Path(folder) / IDENTITY_FILE
    try:
        saved = json.loads(p.read_text())
    except (OSError, ValueError):
        return (f"{Path(folder).name} was written by an older agentrl (checkpoint layout 1, without {IDENTITY_FILE}); "
                f"this version reads layout {LAYOUT}: start the run again in a new output_dir")
    if saved.get("layout") != LAYOUT:
        return f"{Path(folder).name} has checkpoint layout {saved.get('layout')}; this agentrl reads layout {LAYOUT}"
    if saved.get("processes") != identity.get("processes"):
        return (f"{Path(folder).name} was written by {saved.get('processes')} process(es), this run has "
                f"{identity.get('processes')}: resume with the same number of processes")
    for k, v in identity.get("keys", {}).items():
        old = saved.get("keys", {}).get(k)
        if old != v:
            return (f"{Path(folder).name} is a checkpoint of a run with {k} {old!r}, this recipe has {v!r}: "
                    "resume with the checkpoint's recipe, or start a new output_dir")
    return None


# ---------------------------------------------------------------------- the parts agentrl adds
@runtime_checkable
class Checkpointed(Protocol):
    """A part of a checkpoint: its file in the checkpoint folder and its state. ``{rank}`` in the
    file name: every rank writes its own; else the main process writes the one file. The suffix says
    the format: ``.json``, ``.pt`` (``torch.save``, read back with ``weights_only``) or ``.pkl``.
    Optional attributes: ``required`` (why a checkpoint without the file cannot be resumed; without
    it a missing file leaves the part as it is, as for a checkpoint from before the part was kept)
    and ``map_location`` (where ``.pt`` tensors are loaded; default the CPU). ``load_state_dict``
    refuses a checkpoint of another kind of run with a one-line ``ValueError``."""

    file: str

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


@dataclass
class Part:
    """A ``Checkpointed`` over an object with ``state_dict`` / ``load_state_dict`` of its own."""

    file: str
    of: Any
    required: str | None = None
    map_location: Any = "cpu"

    def state_dict(self) -> Any:
        return self.of.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.of.load_state_dict(state)


def _write_part(path: Path, state: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps(state))
    elif path.suffix == ".pt":
        import torch

        torch.save(state, path)
    else:
        with open(path, "wb") as f:
            pickle.dump(state, f)


def _read_part(path: Path, map_location: Any) -> Any:
    if path.suffix == ".json":
        return json.loads(path.read_text())
    if path.suffix == ".pt":
        import torch

        return torch.load(path, map_location=map_location, weights_only=True)
    with open(path, "rb") as f:
        return pickle.load(f)  # noqa: S301  (our own checkpoint file)


def save_parts(parts: Iterable[Checkpointed], folder: str | Path, rank: int, main: bool) -> None:
    """Every part's state into its file in ``folder`` (a part of every rank on every rank, the
    others on the main process only)."""
    for part in parts:
        if "{rank}" in part.file or main:
            _write_part(Path(folder) / part.file.format(rank=rank), part.state_dict())


def load_parts(parts: Iterable[Checkpointed], folder: str | Path, rank: int) -> None:
    """Every part's state from its file in ``folder``, in order; a missing file leaves the part as it
    is unless the part is ``required`` (then one line: why the checkpoint cannot be resumed)."""
    from agentrl.recipe_file import RecipeError

    for part in parts:
        name = part.file.format(rank=rank)
        path = Path(folder) / name
        if path.is_file():
            try:
                part.load_state_dict(_read_part(path, getattr(part, "map_location", "cpu")))
            except ValueError as e:  # a part refuses a checkpoint of another run with a one-line ValueError
                raise RecipeError(str(e)) from None
        elif getattr(part, "required", None):
            raise RecipeError(f"{folder} has no {name}: {part.required}")
