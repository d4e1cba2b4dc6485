#!/usr/bin/env bash
# Installs every Debian package reforge needs (when missing), then configures and builds into
# build/. Safe to run again: it only installs what is missing and rebuilds what changed.
# The Python package: a virtual environment .venv/ (python/requirements.txt from PyPI), the
# extension built in the same build/ as the CLI (the library compiles once), and .venv pointed at
# python/ and build/python/ so that `.venv/bin/python -c 'import reforge'` works.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build pkg-config xz-utils
      libprotobuf-dev protobuf-compiler
      libdnnl-dev ocl-icd-opencl-dev libopenblas-openmp-dev
      nlohmann-json3-dev libxxhash-dev libcli11-dev libsentencepiece-dev libzip-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      python3 python3-venv python3-dev)
. scripts/apt_install.sh
apt_install_missing setup "${PKGS[@]}"

root=$(pwd)
# The CUDA backend is built where the CUDA toolkit is (CMake looks for nvcc on PATH).
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r python/requirements.txt

BUILD_TYPE=${REFORGE_BUILD_TYPE:-Release}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DREFORGE_PYTHON=ON \
  -DPython_EXECUTABLE="$root/.venv/bin/python" ${REFORGE_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n%s\n' "$root/python" "$root/build/python" >"$site/reforge-dev.pth"
echo "setup: built build/reforge and the Python package (.venv/bin/python -c 'import reforge')"
