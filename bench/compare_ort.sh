#!/usr/bin/env bash
# reforge vs ONNX Runtime: latency, peak memory, build time (see compare_ort.py for the method).
#
#   bench/compare_ort.sh [--suite tiny|large|all] [--models-dir build-bench/models]
#                        [--only llama_s1,bert] [--batches 1,8] [--threads 1,2] [--rounds 5]
#                        [--iterations auto|N] [--refit] [--bf16] [--bf16-act] [--fp16] [--reforge build/reforge]
#                        [--json out.json] [models/...onnx ...]
#
# The large suite's models are written by /usr/bin/python3 scripts/models/bench_models.py.
# Creates a virtual environment with onnxruntime and numpy from PyPI on first use. It lives under
# build-bench/ (ignored by git: a venv inside the tree would otherwise be sent along with every
# copy of the working tree); set BENCH_VENV to put it elsewhere. Build reforge first
# (cmake -S . -B build -G Ninja && ninja -C build reforge).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${BENCH_VENV:-build-bench/venv}"

if [ ! -x "$venv/bin/python" ]; then
  made=""
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -m venv "$venv" 2>/dev/null; then made="$py"; break; fi
    rm -rf "$venv"
  done
  [ -n "$made" ] || { echo "compare_ort: no python3 with the venv module" >&2; exit 1; }
fi
if ! "$venv/bin/python" -c "import onnxruntime, numpy" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q onnxruntime numpy
fi
exec "$venv/bin/python" bench/compare_ort.py "$@"
