#!/usr/bin/env bash
# On a CUDA machine without a registry (the checkout carried there with .gpu-wheels/ from
# scripts/gpu_wheels.sh): install the wheels into a private folder, then run `agentrl bench gpu`
# with the arguments given (default plan: docs/results/gpu.md). Uses the machine's own python,
# torch and CUDA; installs nothing outside /tmp.
#   bash scripts/gpu_check.sh [agentrl bench gpu ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${AGENTRL_GPU_SITE:-/tmp/agentrl-site}
PY=${PYTHON:-python3}
ls .gpu-wheels/*.whl >/dev/null 2>&1 || { echo "gpu_check: no .gpu-wheels/ here (run scripts/gpu_wheels.sh where a registry is)" >&2; exit 2; }
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)" \
  || { echo "gpu_check: torch sees no CUDA device here" >&2; exit 2; }
[ -f "$SITE/.done" ] || { "$PY" -m pip install -q --no-index --no-deps --target "$SITE" .gpu-wheels/*.whl && touch "$SITE/.done"; }
export PYTHONPATH="$SITE:$PWD:$PWD/envs${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 WANDB_MODE=offline HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
exec "$PY" -m agentrl.benchmarks gpu "$@"
