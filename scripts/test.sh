#!/usr/bin/env bash
# Builds everything in build/ (the tests, the benchmarks, the Python extension, and the CUDA
# backend wherever the CUDA toolkit is, GPU or not: REFORGE_CUDA=OFF leaves it out), then runs the
# whole test suite: unit and model tests (gtest), the ONNX backend node conformance tests listed in
# tests/conformance/required-standard-types.txt and extra-passing.txt, the refit oracle
# (scripts/oracle.sh) and the Python package's tests (pytest, python/tests, in .venv, with torch
# and transformers added to it so that their tests run too). Run scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/configure.sh

# torch (PyPI's build, with its CUDA libraries: about 2.8 GB to fetch) and transformers come into
# .venv while the tests compile.
(.venv/bin/python -m pip install --quiet --disable-pip-version-check -r python/requirements-torch.txt) \
  >build/test-venv.log 2>&1 &
venv=$!
if [ -z "${REFORGE_CUDA:-}" ] && command -v nvcc >/dev/null; then export REFORGE_CUDA=ON; fi
configure build
cmake --build build -j"$(nproc)"
wait $venv || { cat build/test-venv.log >&2; echo "test: adding torch to .venv failed (above)" >&2; exit 1; }
echo "test: built build/ ($(cuda_state build)) in $SECONDS s, .venv has torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"

# The ONNX 1.23.1 node suite ships as four .tar.xz parts, in the folder $REFORGE_ONNX_SUITE names
# (when unset: shared/onnx-node-suite beside the checkout); unpacked once into build/onnx-node-suite.
suite="$root/build/onnx-node-suite"
if [ ! -f "$suite/.unpacked" ]; then
  suite_src=""
  for d in "${REFORGE_ONNX_SUITE:-}" "$root/../shared/onnx-node-suite"; do
    if [ -n "$d" ] && ls "$d"/node*.tar.xz >/dev/null 2>&1; then suite_src="$d"; break; fi
  done
  if [ -z "$suite_src" ]; then
    echo "test: the ONNX 1.23.1 node suite's archives (node*.tar.xz) are not in" \
      "${REFORGE_ONNX_SUITE:-$root/../shared/onnx-node-suite}: set REFORGE_ONNX_SUITE to the folder holding them" >&2
    exit 1
  fi
  rm -rf "$suite" && mkdir -p "$suite"
  for f in "$suite_src"/node*.tar.xz; do tar -xJf "$f" -C "$suite"; done
  touch "$suite/.unpacked"
fi

status=0
echo "== unit and model tests"
./build/reforge_tests --gtest_brief=1 || status=1
# The required list, then the tests that pass beyond it (extra-passing.txt), each run the same
# three ways.
for list in tests/conformance/required-standard-types.txt tests/conformance/extra-passing.txt; do
  echo "== ONNX node conformance ($list)"
  ./build/reforge conformance "$suite/node" --list "$list" || status=1
  echo "== ONNX node conformance ($list, refittable plans, test inputs as initializers, stripped and refit)"
  for init in weights all; do
    ./build/reforge conformance "$suite/node" --list "$list" --mode refit --initializers "$init" --strip || status=1
  done
done
# The refit oracle (docs/reliability.md): its own tests (it catches a refit broken on purpose), the
# saved regression cases and 500 cases drawn from a fixed seed, each judged against a fresh build.
echo "== refit oracle"
scripts/oracle.sh --self-test || status=1
scripts/oracle.sh --cases 500 --seed 1 --no-shrink || status=1
echo "== Python package (pytest)"
.venv/bin/python -m pytest -q -p no:cacheprovider python/tests || status=1
exit $status
