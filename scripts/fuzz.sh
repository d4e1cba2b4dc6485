#!/usr/bin/env bash
# scripts/fuzz.sh TARGET SECONDS [LIBFUZZER_FLAG...]
# Runs one libFuzzer target (tests/fuzz/targets/TARGET_fuzz.cc) for SECONDS under ASan+UBSan.
# Installs clang and its libFuzzer/OpenMP runtimes when missing, configures and builds
# build-fuzz/ (REFORGE_FUZZ=ON) when needed. The committed seeds (tests/fuzz/corpus/TARGET/) are
# read, never written; inputs that add coverage collect in build-fuzz/corpus/TARGET/. A crash,
# leak, timeout or out-of-memory input is saved to tests/fuzz/regressions/TARGET/ (commit it with
# the fix: the test suite replays it). Prints executions and coverage at the end.
# Targets: onnx plan safetensors shard_index npy bind_file.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS="onnx plan safetensors shard_index npy bind_file"
if [ $# -lt 2 ] || ! [[ " $TARGETS " == *" $1 "* ]] || ! [[ "$2" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags]; TARGET one of: $TARGETS" >&2
  exit 2
fi
T=$1 SECS=$2
shift 2

. scripts/apt_install.sh
apt_install_missing fuzz clang libclang-rt-14-dev libomp-14-dev

B=build-fuzz
if [ ! -f $B/build.ninja ]; then
  # -O1 with line tables: symbolized reports at a fraction of a -O2 -g build's compile time.
  CC=clang CXX=clang++ cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" -DREFORGE_FUZZ=ON \
    -DREFORGE_TESTS=OFF ${REFORGE_CMAKE_ARGS:-}
fi
cmake --build $B --target "${T}_fuzz" -j"${REFORGE_FUZZ_JOBS:-$(nproc)}"

mkdir -p "$B/corpus/$T" "tests/fuzz/regressions/$T"
LOG="$B/fuzz-$T.log"
set +e
# -rss_limit_mb: a malformed size field must be refused, not allocated; 2 GiB is far above any
# seed's needs. -timeout: one input taking 10 s is a hang.
"$B/fuzz/${T}_fuzz" "$B/corpus/$T" "tests/fuzz/corpus/$T" -max_total_time="$SECS" \
  -artifact_prefix="tests/fuzz/regressions/$T/" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
  -detect_leaks=1 "$@" >"$LOG" 2>&1
rc=$?
set -e
grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::|ERROR|SUMMARY|Test unit written|artifact_prefix" "$LOG" | tail -20
echo "fuzz: $T ran ${SECS}s, exit $rc, log $LOG, corpus $(ls "$B/corpus/$T" | wc -l) new inputs"
exit $rc
