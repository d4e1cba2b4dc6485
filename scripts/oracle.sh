#!/usr/bin/env bash
# The refit oracle (tests/refit_oracle, docs/reliability.md "Refit oracle"): draws refit cases from a
# seed, judges each against a fresh build, re-runs the saved regression cases, exits 1 on a violation.
#   scripts/oracle.sh --cases N --seed S [--device cuda] [--jobs J] [--time-limit SECONDS]
#   scripts/oracle.sh --case '<json>'        one case, as printed by a run
#   scripts/oracle.sh --self-test            the oracle's own tests: it must catch a broken refit
# Run scripts/setup.sh first (build/reforge and the Python package in .venv). Elsewhere (the GPU
# machine, scripts/device_oracle.sh) REFORGE_PYTHON names the interpreter, which then finds the
# package in python/ and in REFORGE_BUILD_DIR/python (default build/), the CLI in REFORGE_BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${REFORGE_PYTHON:-.venv/bin/python}
command -v "$py" >/dev/null || { echo "oracle: error: no Python interpreter '$py' (REFORGE_PYTHON; run scripts/setup.sh for .venv)" >&2; exit 2; }
path="$(pwd)/tests"
# .venv finds build/'s package through its .pth (scripts/setup.sh); another interpreter, or another
# build folder, through the path, which comes first.
if [ -n "${REFORGE_PYTHON:-}${REFORGE_BUILD_DIR:-}" ]; then
  b=${REFORGE_BUILD_DIR:-build}
  case $b in /*) ;; *) b=$(pwd)/$b ;; esac
  export REFORGE_BUILD_DIR=$b
  path="$path:$(pwd)/python:$b/python"
fi
PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m refit_oracle "$@"
