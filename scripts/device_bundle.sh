#!/usr/bin/env bash
# Packs this tree's Release build (build/, configured with CUDA) for the GPU machine:
# .device/prebuilt.tar.gz holds the stripped `reforge` and `reforge_tests` and the commit they were
# built from; `scripts/device_test.sh --prebuilt` runs them there instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
grep -q '^REFORGE_CUDA:BOOL=ON' "$B/CMakeCache.txt" || { echo "device_bundle: $B is not a CUDA build" >&2; exit 1; }
cmake --build "$B" --target reforge reforge_tests
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >>.git/info/exclude
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strip -o "$tmp/reforge" "$B/reforge"
strip -o "$tmp/reforge_tests" "$B/reforge_tests"
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')" >"$tmp/COMMIT"
mkdir -p .device
tar -C "$tmp" -czf .device/prebuilt.tar.gz.part reforge reforge_tests COMMIT
mv .device/prebuilt.tar.gz.part .device/prebuilt.tar.gz
du -h .device/prebuilt.tar.gz
