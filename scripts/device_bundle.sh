#!/usr/bin/env bash
# Packs this tree's Release build (build/, configured with CUDA) for the GPU machine:
# .device/prebuilt.tar.xz holds the stripped `reforge` and `reforge_tests` and the commit they were
# built from; `scripts/device_test.sh --prebuilt` runs them there instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
grep -q '^REFORGE_CUDA:BOOL=ON' "$B/CMakeCache.txt" || { echo "device_bundle: $B is not a CUDA build" >&2; exit 1; }
cmake --build "$B" --target reforge reforge_tests
exclude="$(git rev-parse --git-common-dir)/info/exclude"  # a worktree's .git is a file
mkdir -p "$(dirname "$exclude")"
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >>"$exclude"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strip -o "$tmp/reforge" "$B/reforge"
strip -o "$tmp/reforge_tests" "$B/reforge_tests"
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')" >"$tmp/COMMIT"
mkdir -p .device
tar -C "$tmp" -cf - reforge reforge_tests COMMIT | xz -T0 -9 >.device/prebuilt.tar.xz.part
mv .device/prebuilt.tar.xz.part .device/prebuilt.tar.xz
# What the binaries need there besides the GPU machine's CUDA libraries: the runtime packages of
# scripts/device_debs.sh, so that a run carries .device/runtime-debs, not the build's -dev packages.
mkdir -p .device/runtime-debs
for p in libdnnl2 libopenblas0-openmp libgfortran5 libquadmath0 libxxhash0 libprotobuf32; do
  ln -f .device/debs/${p}_*.deb .device/runtime-debs/
done
du -sh .device/prebuilt.tar.xz .device/runtime-debs
