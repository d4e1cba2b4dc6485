#!/usr/bin/env bash
# Installs every Debian package reforge needs (when missing), then configures build/ and builds
# what the main job runs: the CLI build/reforge (with the CUDA backend only where an NVIDIA GPU is
# visible, or REFORGE_CUDA=ON asks; REFORGE_CUDA=OFF leaves it out). Safe to run again: it only
# installs what is missing and rebuilds what changed. scripts/test.sh builds the rest (tests,
# benchmarks, the CUDA backend wherever the toolkit is).
# The Python package: a virtual environment .venv/ (python/requirements.txt from PyPI, fetched
# while the CLI compiles), the extension built in the same build/ as the CLI (the library compiles
# once), and .venv pointed at python/ and build/python/ so that `.venv/bin/python -c 'import
# reforge'` works.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build pkg-config xz-utils ccache
      libprotobuf-dev protobuf-compiler
      libdnnl-dev ocl-icd-opencl-dev libopenblas-openmp-dev
      nlohmann-json3-dev libxxhash-dev libcli11-dev libsentencepiece-dev libzip-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      python3 python3-venv python3-dev)
. scripts/apt_install.sh
apt_install_missing setup "${PKGS[@]}"
. scripts/configure.sh

# The virtual environment is made in the background: its downloads overlap the compile.
mkdir -p build
(
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r python/requirements.txt
) >build/setup-venv.log 2>&1 &
venv=$!

# The extension waits for the environment (nanobind): first the CLI, without it.
configure build -DREFORGE_PYTHON=OFF
cmake --build build --target reforge -j"$(nproc)"
wait $venv || { cat build/setup-venv.log >&2; echo "setup: making .venv failed (above)" >&2; exit 1; }
configure build -DREFORGE_PYTHON=ON -DPython_EXECUTABLE="$root/.venv/bin/python"
cmake --build build --target _reforge -j"$(nproc)"
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n%s\n' "$root/python" "$root/build/python" >"$site/reforge-dev.pth"
echo "setup: built build/reforge ($(cuda_state build)) and the Python package (.venv/bin/python -c 'import reforge')"
