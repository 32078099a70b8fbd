"""``accelerate launch RECIPE.yaml`` (and ``python RECIPE.yaml``) trains the recipe.

``accelerate launch SCRIPT args`` starts ``python SCRIPT args`` on every rank, and a recipe read as
Python dies on its first ``key: value`` line (an annotation naming an undefined variable). Python
reads ``.pth`` files from site-packages at start-up, after ``sys.argv`` is set and before it runs the
script: the one-line ``agentrl-recipes.pth`` (written by ``install()``, which ``make setup`` runs)
calls ``run_if_recipe()`` when ``sys.argv[0]`` ends in ``.yaml``/``.yml``. If that file is an agentrl
recipe (a YAML mapping with ``env_id``, bases resolved), the process replaces itself
(``os.execv``, same pid, same environment, so accelerate and torchrun see the same worker) with
``python -m agentrl.train RECIPE args``. Any other file runs as before.

Launch settings. A recipe names its ``accelerate_config`` (e.g. 4 processes under DeepSpeed
ZeRO-3). What this process was started as is compared with it (number of processes, DeepSpeed
stage):

- the same: train;
- different, and the launch carries no settings of the user's (``python RECIPE.yaml``, or
  ``accelerate launch RECIPE.yaml`` without flags and without a default config from
  ``accelerate config``): re-launch under the recipe's config (``accelerate launch --config_file
  CFG -m agentrl.train RECIPE args``; rank 0 does it, other ranks of the unconfigured launch exit 0);
- different, and the user chose the launch (flags, ``--config_file``, a default config, torchrun):
  train as launched, after one line on stderr naming the difference.

The same line runs in the ``accelerate launch`` process itself (``sys.argv[1] == "launch"``,
``check_launch``): the recipe (with its overrides) is validated there as ``agentrl train`` would, and
a recipe whose own launch needs GPUs this machine lacks is refused, in one line and exit 2,
before accelerate starts a worker (whose failure accelerate would report with a traceback). A
worker that still exits 2 (e.g. a reused output folder) ends the launch with exit 2 and no
traceback: its own line said why.

``AGENTRL_RECIPE_HOOK=0`` turns the hook off.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PTH_NAME = "agentrl-recipes.pth"
# One line: Python runs .pth lines that start with "import". Nothing is imported unless the script
# is a YAML file, so other programs pay one string test at start-up.
PTH_LINE = (
    "import sys; exec('try:\\n from agentrl.recipe_hook import run_if_recipe\\nexcept ImportError:\\n"
    " run_if_recipe = None\\nif run_if_recipe: run_if_recipe()') "
    "if sys.argv[0:1] and (str(sys.argv[0]).endswith(('.yaml', '.yml')) or sys.argv[1:2] == ['launch']) "
    "else None\n"
)
RELAUNCHED = "AGENTRL_RECIPE_RELAUNCHED"
# accelerate launch flags that choose how many processes run and how
_LAUNCH_FLAGS = ("config_file", "num_processes", "multi_gpu", "cpu", "use_deepspeed", "use_fsdp", "num_machines",
                 "gpu_ids", "tpu", "zero_stage", "deepspeed_config_file")


def _say(msg: str) -> None:
    print(f"agentrl: {msg}", file=sys.stderr, flush=True)


def _rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) or 0)


def _looks_like_recipe(path: str) -> bool:
    """A file that fails to read as a recipe but was meant as one (top-level env_id: or base:)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return False
    return any(line.startswith(("env_id:", "base:")) for line in text.splitlines())


def _config_path(value: str) -> Path | None:
    """A recipe's accelerate_config: relative to the working folder, else to the repo root."""
    p = Path(value)
    if p.is_file():
        return p
    repo = Path(__file__).resolve().parent.parent / value
    return repo if repo.is_file() else None


def describe(num_processes: int, zero_stage: int | None) -> str:
    procs = f"{num_processes} process{'es' if num_processes != 1 else ''}"
    return f"{procs}, DeepSpeed ZeRO-{zero_stage}" if zero_stage else f"{procs}, no DeepSpeed"


def _config(cfg_file: Path) -> dict:
    import yaml

    return yaml.safe_load(cfg_file.read_text()) or {}


def recipe_launch(cfg_file: Path) -> tuple[int, int | None]:
    """(processes, DeepSpeed ZeRO stage or None) that an accelerate config file asks for."""
    d = _config(cfg_file)
    n = int(d.get("num_processes") or 1) * int(d.get("num_machines") or 1)
    ds = str(d.get("distributed_type", "")).upper() == "DEEPSPEED"
    stage = int((d.get("deepspeed_config") or {}).get("zero_stage", 0) or 0) if ds else None
    return n, stage


def missing_gpus(cfg_file: Path) -> str | None:
    """Why this machine cannot run the config (it asks for more GPUs than are visible), or None."""
    d = _config(cfg_file)
    # a config for GPUs names them or a GPU precision (a CPU run under MULTI_GPU/DeepSpeed works)
    for_gpus = str(d.get("mixed_precision", "no")) in ("bf16", "fp16", "fp8") or d.get("gpu_ids") not in (None, "all")
    if d.get("use_cpu") or not for_gpus or int(d.get("num_machines") or 1) > 1:
        return None
    want = int(d.get("num_processes") or 1)
    try:
        import torch

        have = torch.cuda.device_count()
    except Exception:  # no torch: agentrl.train says so
        return None
    if have >= want:
        return None
    return f"{want} GPU{'s' if want != 1 else ''}, this machine has {have}"


def current_launch() -> tuple[int, int | None]:
    """(processes, DeepSpeed ZeRO stage or None) this process was started as."""
    n = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return n, int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "0") or 0) or None
    return n, None


def _parent_argv() -> list[str]:
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _default_accelerate_config() -> bool:
    home = os.path.expanduser(os.environ.get(
        "HF_HOME", os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")))
    return os.path.isfile(os.path.join(home, "accelerate", "default_config.yaml"))


def user_chose_launch(parent_argv: list[str]) -> bool:
    """Whether the user picked the launch settings: flags to ``accelerate launch`` before the
    script, a default config from ``accelerate config``, or another launcher (torchrun)."""
    launched_by_accelerate = any(Path(a).name in ("accelerate", "accelerate-launch")
                                 or a.endswith("accelerate.commands.launch")
                                 for a in parent_argv[:3])
    if not launched_by_accelerate:
        return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1  # torchrun etc.; plain python: no
    script = next((i for i, a in enumerate(parent_argv) if a.endswith((".yaml", ".yml"))), len(parent_argv))
    names = {a.lstrip("-").split("=")[0].replace("-", "_") for a in parent_argv[:script] if a.startswith("--")}
    return bool(names & set(_LAUNCH_FLAGS)) or _default_accelerate_config()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _python_argv() -> list[str]:
    """The interpreter and its flags (-u under torchrun, -X ..., -W ...), for the exec."""
    import subprocess

    flags = subprocess._args_from_interpreter_flags()
    if getattr(sys.stdout, "write_through", False) and "-u" not in flags:
        flags.append("-u")
    return [sys.executable, *flags]


def _refuse_missing_gpus(path: str, cfg_value: str, cfg_file: Path, want: tuple[int, int | None]) -> bool:
    """Say why the recipe's launch cannot run here (too few GPUs) and return True, else False."""
    short = missing_gpus(cfg_file)
    if short:
        _say(f"the recipe's accelerate_config {cfg_value} ({describe(*want)}) needs {short}: run it on such a "
             f"node, or choose the launch yourself (e.g. accelerate launch --config_file accelerate_configs/cpu.yaml "
             f"{path} ...)")
    return bool(short)


def plan(path: str, data: dict, args: list[str], parent_argv: list[str]) -> tuple[str, list[str] | None]:
    """What to do: ("train", None), ("relaunch", accelerate argv), ("exit", None) (a rank other
    than 0 of a launch being re-launched) or ("fail", None) (exit 2: the recipe's launch cannot run
    here), after any message for the user has been printed."""
    cfg_value = data.get("accelerate_config")
    if not cfg_value or os.environ.get(RELAUNCHED) or {"-h", "--help"} & set(args):
        return "train", None
    cfg_file = _config_path(str(cfg_value))
    if cfg_file is None:
        return "train", None  # agentrl.train names the missing file in its one-line error
    want, have = recipe_launch(cfg_file), current_launch()
    if want == have:
        return "train", None
    if user_chose_launch(parent_argv):
        if _rank() == 0:
            _say(f"launched as {describe(*have)}; the recipe's accelerate_config {cfg_value} asks for "
                 f"{describe(*want)}: training as launched (`agentrl launch {path}` uses the recipe's)")
        return "train", None
    if _rank() != 0:
        return "exit", None  # rank 0 re-launches the whole run
    if _refuse_missing_gpus(path, str(cfg_value), cfg_file, want):
        return "fail", None
    cmd = [*_python_argv(), "-m", "accelerate.commands.launch", "--config_file", str(cfg_file)]
    if have[0] > 1:  # the outer launch's rendezvous holds its port
        cmd += ["--main_process_port", str(_free_port())]
    _say(f"re-launching under the recipe's accelerate_config {cfg_value} ({describe(*want)})")
    return "relaunch", cmd


def check_launch(argv: list[str]) -> None:
    """In the ``accelerate launch`` process (``argv`` its ``sys.argv``) of a recipe: validate it
    (``validate_recipe``), refuse a launch this machine cannot run (``refuse_unrunnable_launch``),
    and let a worker's exit 2 end the launch without accelerate's traceback."""
    if Path(argv[0]).name not in ("accelerate", "accelerate-launch") or os.environ.get(RELAUNCHED):
        return
    at = next((i for i, a in enumerate(argv[2:], start=2) if a.endswith((".yaml", ".yml"))), None)
    if at is None or not os.path.isfile(argv[at]):
        return
    sys.excepthook = _quiet_worker_exit_2(sys.excepthook)
    refuse_unrunnable_launch(argv, argv[at])  # first: the cheap check, and the real reason
    if os.environ.get(VALIDATED) != "1":
        validate_recipe(argv[at], argv[at + 1:])


VALIDATED = "AGENTRL_RECIPE_VALIDATED"
"""Set by a launcher that has validated the recipe (``agentrl launch``, ``check_launch``)."""


def validate_recipe(path: str, overrides: list[str]) -> None:
    """The checks ``agentrl train`` runs before it loads a model; one line and exit 2 on failure."""
    from agentrl.recipe_file import RecipeError

    try:
        from agentrl.train import _load, check_output_dir

        cfg = _load(path, list(overrides))
        if not cfg.resume_from_checkpoint:  # a resume is decided by the worker (it may clear or skip)
            check_output_dir(cfg, None)
    except RecipeError as e:
        print(f"agentrl train: error: {e}", file=sys.stderr, flush=True)
        os._exit(2)
    os.environ[VALIDATED] = "1"


def _quiet_worker_exit_2(hook):
    """An excepthook that ends the launch with exit 2 when a worker exited 2 (it printed why in one
    line; accelerate would add a traceback of its own), and hands anything else to ``hook``."""
    def excepthook(kind, value, tb):
        codes = [value.returncode] if isinstance(value, __import__("subprocess").CalledProcessError) else [
            getattr(f, "exitcode", None) for f in getattr(value, "failures", {}).values()]
        if codes and all(c == 2 for c in codes):
            sys.stderr.flush()
            os._exit(2)
        hook(kind, value, tb)
    return excepthook


def refuse_unrunnable_launch(argv: list[str], path: str) -> None:
    """Exit 2 with one line when ``path`` is a recipe that the worker would re-launch under its own
    accelerate_config and that config needs GPUs this machine lacks. A launch the user chose runs
    as chosen; a recipe whose config is one plain process (e.g. single_gpu.yaml) trains as
    launched, as the worker decides."""
    if user_chose_launch([sys.executable, *argv]):
        return
    from agentrl.recipe_file import RecipeError, read_recipe_file

    try:
        data = read_recipe_file(path)
    except RecipeError:
        return  # the worker reports a broken recipe in its own one line
    cfg_file = _config_path(str(data.get("accelerate_config") or "")) if "env_id" in data else None
    if cfg_file is None:
        return
    try:
        want = recipe_launch(cfg_file)
        refuse = want != (1, None) and _refuse_missing_gpus(path, str(data["accelerate_config"]), cfg_file, want)
    except (OSError, ValueError):
        return
    if refuse:
        sys.stderr.flush()
        os._exit(2)


def run_if_recipe() -> None:
    """Called from the .pth line: train ``sys.argv[0]`` if it is an agentrl recipe, else return."""
    if os.environ.get("AGENTRL_RECIPE_HOOK", "1") == "0":
        return
    if sys.argv[1:2] == ["launch"] and not sys.argv[0].endswith((".yaml", ".yml")):
        check_launch(sys.argv)
        return
    path = sys.argv[0]
    if not os.path.isfile(path):
        return
    from agentrl.recipe_file import RecipeError, read_recipe_file

    try:
        data = read_recipe_file(path)
    except RecipeError as e:
        if _looks_like_recipe(path):
            _say(str(e))
            os._exit(2)  # SystemExit cannot leave site's start-up cleanly
        return
    if "env_id" not in data:
        return
    args = sys.argv[1:]
    try:
        action, cmd = plan(path, data, args, _parent_argv())
    except (OSError, ValueError) as e:  # an unreadable accelerate config: train, which reports it
        _say(f"cannot compare the launch with the recipe's accelerate_config ({e})")
        action, cmd = "train", None
    sys.stdout.flush()
    sys.stderr.flush()
    if action == "exit":
        os._exit(0)
    if action == "fail":
        os._exit(2)
    if action == "relaunch":
        os.environ[RELAUNCHED] = "1"
        # the outer launch's rank and rendezvous settings must not reach the inner launch's workers
        for k in [k for k in os.environ if k.startswith(("TORCHELASTIC_", "ACCELERATE_"))] + [
                "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT"]:
            os.environ.pop(k, None)
        os.execv(cmd[0], [*cmd, "-m", "agentrl.train", path, *args])
    argv = [*_python_argv(), "-m", "agentrl.train", path, *args]
    os.execv(argv[0], argv)


def install(site_dir: str | None = None) -> Path:
    """Write the .pth line into ``site_dir`` (default: this interpreter's site-packages)."""
    import sysconfig

    target = Path(site_dir or sysconfig.get_path("purelib")) / PTH_NAME
    target.write_text(PTH_LINE)
    return target


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["install"]:
        print(f"agentrl: wrote {install(argv[1] if len(argv) > 1 else None)}")
        return 0
    print("usage: python -m agentrl.recipe_hook install [SITE_DIR]   (lets `accelerate launch RECIPE.yaml` train)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
