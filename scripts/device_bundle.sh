#!/usr/bin/env bash
# Packs this tree's Release build (build/, configured with CUDA) for the GPU machine:
# .device/prebuilt.tar.xz holds the stripped `reforge`, `reforge_tests` and
# `reforge_refit_gpu_bench` (device_test.sh --refit-bench) and the commit they were built from;
# `scripts/device_test.sh --prebuilt` runs them there instead of building.
#   scripts/device_bundle.sh [BUILD] [--python PY] [--min-libs] [--out FILE]
# --python PY packs, instead of reforge_tests, the Python extension for PY (the GPU machine's
# Python 3.12, for `scripts/device_oracle.sh --prebuilt`; PY needs nanobind): nanobind and
# python/src/module.cc compile for PY in BUILD-python, and link with BUILD's libraries by BUILD's
# own link line for its extension, so the library is compiled once. --min-libs also packs the
# runtime packages' shared libraries alone into .device/runtime-min (smaller than the packages:
# for a run near the carry limit). --out FILE writes the bundle there instead of
# .device/prebuilt.tar.xz (device_test.sh takes it as REFORGE_PREBUILT=FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
B=build py="" min=0 out=.device/prebuilt.tar.xz
while [ $# -gt 0 ]; do
  case $1 in
    --python) py=${2:?--python needs an interpreter}; shift 2 ;;
    --min-libs) min=1; shift ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    *) B=$1; shift ;;
  esac
done
grep -q '^REFORGE_CUDA:BOOL=ON' "$B/CMakeCache.txt" || { echo "device_bundle: $B is not a CUDA build" >&2; exit 1; }
if [ -n "$py" ]; then
  grep -q '^REFORGE_PYTHON:BOOL=ON' "$B/CMakeCache.txt" || { echo "device_bundle: $B has no Python extension to take the link line from" >&2; exit 1; }
  "$py" -m nanobind --cmake_dir >/dev/null || { echo "device_bundle: $py has no nanobind" >&2; exit 1; }
  cmake --build "$B" --target reforge _reforge
  P=$B-python
  cmake -S . -B "$P" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREFORGE_CUDA=ON -DREFORGE_PYTHON=ON -DPython_EXECUTABLE="$py" >/dev/null
  cmake --build "$P" --target nanobind-static CMakeFiles/_reforge.dir/python/src/module.cc.o
  ext=$("$py" -c 'import sysconfig; print("_reforge" + sysconfig.get_config_var("EXT_SUFFIX"))')
  link=$(cd "$B" && ninja -t commands _reforge | tail -1)
  link=${link#*: && }
  link=${link% && :}
  own=$(cd "$B" && ls python/reforge/_reforge*.so)
  mkdir -p "$P/python/reforge"
  link=${link/" -o $own "/" -o $(pwd)/$P/python/reforge/$ext "}
  link=${link/" CMakeFiles/_reforge.dir/python/src/module.cc.o "/" $(pwd)/$P/CMakeFiles/_reforge.dir/python/src/module.cc.o "}
  link=${link/" libnanobind-static.a "/" $(pwd)/$P/libnanobind-static.a "}
  (cd "$B" && eval "$link")
else
  cmake --build "$B" --target reforge reforge_tests reforge_refit_gpu_bench
fi
exclude="$(git rev-parse --git-common-dir)/info/exclude"  # a worktree's .git is a file
mkdir -p "$(dirname "$exclude")"
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >>"$exclude"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strip -o "$tmp/reforge" "$B/reforge"
strip -o "$tmp/libreforge_sentencepiece.so" "$B/libreforge_sentencepiece.so"  # --tokenizer's plugin
if [ -n "$py" ]; then
  mkdir -p "$tmp/python/reforge"
  strip -o "$tmp/python/reforge/$ext" "$P/python/reforge/$ext"
  files=(reforge libreforge_sentencepiece.so python COMMIT)
else
  strip -o "$tmp/reforge_tests" "$B/reforge_tests"
  strip -o "$tmp/reforge_refit_gpu_bench" "$B/reforge_refit_gpu_bench"
  files=(reforge libreforge_sentencepiece.so reforge_tests reforge_refit_gpu_bench COMMIT)
fi
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')" >"$tmp/COMMIT"
mkdir -p "$(dirname "$out")"
tar -C "$tmp" -cf - "${files[@]}" | xz -T0 -9 >"$out.part"
mv "$out.part" "$out"

# What the binaries need there besides the GPU machine's CUDA libraries: the runtime packages of
# scripts/device_debs.sh, so that a run carries .device/runtime-debs, not the build's -dev packages.
# (libprotobuf-lite32: libsentencepiece0 needs it, for --tokenizer's plugin; libzip4: --input FILE.npz)
mkdir -p .device/runtime-debs
for p in libdnnl2 libopenblas0-openmp libgfortran5 libquadmath0 libxxhash0 libprotobuf32 libsentencepiece0 libprotobuf-lite32 libzip4; do
  ln -f .device/debs/${p}_*.deb .device/runtime-debs/
done
if [ $min = 1 ]; then
  # The same packages' shared libraries alone (no documentation, no LAPACK, no sentencepiece
  # trainer), one archive: .device/runtime-min, which device_test.sh --prebuilt takes where
  # .device/runtime-debs is not carried (a run whose tree must be smaller).
  libs=$(mktemp -d)
  for f in .device/runtime-debs/*.deb; do dpkg -x "$f" "$libs"; done
  rm -rf "$libs/usr/share" "$libs"/usr/lib/x86_64-linux-gnu/libsentencepiece_train* \
    "$libs"/usr/lib/x86_64-linux-gnu/openblas-openmp/liblapack*
  mkdir -p .device/runtime-min
  tar -C "$libs" -cf - . | xz -T0 -9e >.device/runtime-min/runtime-libs.tar.xz
  rm -rf "$libs"
  du -sh .device/runtime-min
fi
du -sh .device/prebuilt.tar.xz .device/runtime-debs
