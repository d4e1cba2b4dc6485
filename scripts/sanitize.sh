#!/usr/bin/env bash
# scripts/sanitize.sh [asan] [tsan]   (no argument: both)
# The sanitizer job, run by .ci/run after the test suite. Run scripts/setup.sh first (it installs
# the packages; gcc's sanitizer runtimes come with it).
#   asan: configures and builds build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer,
#         -fno-sanitize-recover=undefined, so a UB report ends the process with an error), then
#         runs the unit and model tests and the ONNX node conformance required list there (the
#         three ways scripts/test.sh runs it: baked, and refit with weights / all as initializers).
#   tsan: configures and builds build-tsan/ (ThreadSanitizer) and runs the concurrency tests
#         (tests/refit_concurrency_test.cc, refit_load_test.cc, thread_pool_test.cc and
#         state_test.cc, built alone as reforge_concurrency_tests).
# Any sanitizer report fails the job. Suppressions, each with its reason: tests/sanitizers/.
# Each part prints its build and run minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(asan tsan)
for p in "${parts[@]}"; do
  case $p in asan | tsan) ;; *) echo "usage: scripts/sanitize.sh [asan] [tsan]" >&2; exit 2 ;; esac
done

# -O1 with reduced debug info: readable, symbolized reports at a fraction of a -O2 -g build's
# compile time. The Python extension is not built here (see docs/reliability.md).
configure() {  # configure DIR OPTION
  [ -f "$1/build.ninja" ] && return 0
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g1" -D"$2"=ON -DREFORGE_PYTHON=OFF \
    ${REFORGE_CMAKE_ARGS:-} >/dev/null
}
minutes() { awk -v s="$1" 'BEGIN { printf "%.1f", s / 60 }'; }
status=0

if [[ " ${parts[*]} " == *" asan "* ]]; then
  t0=$SECONDS
  configure build-asan REFORGE_ASAN
  cmake --build build-asan --target reforge reforge_tests -j"$(nproc)"
  t1=$SECONDS
  export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:check_initialization_order=1"
  export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  echo "== ASan+UBSan: unit and model tests"
  ./build-asan/reforge_tests --gtest_brief=1 || status=1
  # The node suite is unpacked by scripts/test.sh (build/onnx-node-suite); unpack it here if not.
  suite="$root/build/onnx-node-suite"
  if [ ! -f "$suite/.unpacked" ]; then
    src=""
    for d in "${REFORGE_ONNX_SUITE:-}" "$root/../shared/onnx-node-suite"; do
      if [ -n "$d" ] && ls "$d"/node*.tar.xz >/dev/null 2>&1; then src="$d"; break; fi
    done
    [ -n "$src" ] || {
      echo "sanitize: the ONNX 1.23.1 node suite's archives (node*.tar.xz) are not in" \
        "${REFORGE_ONNX_SUITE:-$root/../shared/onnx-node-suite}: set REFORGE_ONNX_SUITE to the folder holding them" >&2
      exit 1
    }
    rm -rf "$suite" && mkdir -p "$suite"
    for f in "$src"/node*.tar.xz; do tar -xJf "$f" -C "$suite"; done
    touch "$suite/.unpacked"
  fi
  echo "== ASan+UBSan: ONNX node conformance (required list)"
  ./build-asan/reforge conformance "$suite/node" --list tests/conformance/required-standard-types.txt || status=1
  echo "== ASan+UBSan: ONNX node conformance (required list, refittable plans, stripped and refit)"
  for init in weights all; do
    ./build-asan/reforge conformance "$suite/node" --list tests/conformance/required-standard-types.txt \
      --mode refit --initializers "$init" --strip || status=1
  done
  t2=$SECONDS
  echo "sanitize asan: build $(minutes $((t1 - t0))) min, tests $(minutes $((t2 - t1))) min"
fi

if [[ " ${parts[*]} " == *" tsan "* ]]; then
  t0=$SECONDS
  configure build-tsan REFORGE_TSAN
  cmake --build build-tsan --target reforge_concurrency_tests -j"$(nproc)"
  t1=$SECONDS
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp"
  echo "== TSan: concurrency tests"
  ./build-tsan/reforge_concurrency_tests --gtest_brief=1 || status=1
  t2=$SECONDS
  echo "sanitize tsan: build $(minutes $((t1 - t0))) min, tests $(minutes $((t2 - t1))) min"
fi
exit $status
