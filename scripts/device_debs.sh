#!/usr/bin/env bash
# Fetches (here, on a Debian 12 machine) the Debian packages that the GPU machine lacks into
# .device/debs/, which .git/info/exclude keeps out of the repository; the device tool carries that
# folder (carry: [".device"]) and scripts/device_test.sh unpacks it there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >>.git/info/exclude
mkdir -p .device/debs
cd .device/debs
apt-get download libdnnl-dev libdnnl2 libopenblas-openmp-dev libopenblas0-openmp libopenblas-dev libgfortran5 \
  libquadmath0 nlohmann-json3-dev libxxhash-dev libxxhash0 libcli11-dev libgtest-dev libgmock-dev protobuf-compiler \
  libprotoc32 libprotobuf-dev libprotobuf32 libprotobuf-lite32 libsentencepiece-dev libsentencepiece0 libzip-dev libzip4
cd ../..
# The ONNX node suite travels too (../shared is not part of the working tree).
mkdir -p .device/onnx-node-suite
cp ../shared/onnx-node-suite/node*.tar.xz ../shared/onnx-node-suite/required-*.txt .device/onnx-node-suite/
du -sh .device
