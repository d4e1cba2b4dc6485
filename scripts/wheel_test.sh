#!/usr/bin/env bash
# Builds the Python package's wheel as a user's `pip install .` does (scikit-build-core, in an
# isolated build environment; CMake's build folder build-wheel/, the wheel in build-wheel/dist/),
# installs it with its test and torch extras in a fresh virtual environment (build-wheel/venv/,
# packages from PyPI) and runs the Python tests
# there against the installed package, not the source tree. Run by .ci/run after scripts/test.sh
# (the tests that run the CLI use build/reforge; its compile is reused through ccache).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/configure.sh
W=build-wheel
rm -rf "$W"
mkdir -p "$W"
t0=$SECONDS
# The build folder sits beside build/ (same depth in the source root) and the compiler is build/'s
# (scikit-build-core would take Python's, g++ where CMake finds c++), so that ccache
# (scripts/configure.sh) finds build/'s objects for the library's sources.
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' build/CMakeCache.txt 2>/dev/null)
.venv/bin/python -m pip wheel . --no-deps --quiet --disable-pip-version-check -w "$W/dist" \
  -Cbuild-dir="$W" ${cxx:+-Ccmake.define.CMAKE_CXX_COMPILER="$cxx"} \
  -Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER="$reforge_launcher" \
  -Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER="$reforge_launcher"
wheel=$(ls "$W"/dist/reforge-*.whl)
t1=$SECONDS
python3 -m venv "$W/venv"
"$W/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel[test,torch]"
# The package under test is the installed one (python/tests puts only itself on sys.path).
where=$("$W/venv/bin/python" -c 'import reforge, os; print(os.path.dirname(reforge.__file__))')
case $where in
  "$root/$W/venv/"*) ;;
  *) echo "wheel_test: reforge imported from $where, not from the wheel" >&2; exit 1 ;;
esac
echo "wheel_test: built $(basename "$wheel") in $((t1 - t0)) s; installed in $W/venv with [test,torch]"
"$W/venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
