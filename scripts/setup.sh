#!/usr/bin/env bash
# Installs every Debian package reforge needs (when missing), then configures and builds into
# build/. Safe to run again: it only installs what is missing and rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build pkg-config xz-utils
      libprotobuf-dev protobuf-compiler
      libdnnl-dev ocl-icd-opencl-dev libopenblas-openmp-dev
      nlohmann-json3-dev libxxhash-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev)
. scripts/apt_install.sh
apt_install_missing setup "${PKGS[@]}"

BUILD_TYPE=${REFORGE_BUILD_TYPE:-Release}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" ${REFORGE_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
echo "setup: built build/reforge"
