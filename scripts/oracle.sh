#!/usr/bin/env bash
# The refit oracle (tests/refit_oracle, docs/reliability.md "Refit oracle"): draws refit cases from a
# seed, judges each against a fresh build, re-runs the saved regression cases, exits 1 on a violation.
#   scripts/oracle.sh --cases N --seed S [--device cuda] [--jobs J]
#   scripts/oracle.sh --case '<json>'        one case, as printed by a run
#   scripts/oracle.sh --self-test            the oracle's own tests: it must catch a broken refit
# Run scripts/setup.sh first (build/reforge and the Python package in .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH="$(pwd)/tests${PYTHONPATH:+:$PYTHONPATH}" exec .venv/bin/python -m refit_oracle "$@"
