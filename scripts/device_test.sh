#!/usr/bin/env bash
# Builds reforge from a clean tree on the GPU machine and runs the CUDA tests there: the CUDA
# unit tests (tests/cuda_*_test.cc), the ONNX node conformance required list on the GPU
# (`reforge conformance --device cuda`), then with --bench the GPU benchmarks against PyTorch
# (bench/gpu_bench.py), with --generate-bench text generation against PyTorch eager and
# torch.compile (bench/generate_gpu.py), with --refit-bench refit against the copy floors and
# PyTorch's weight loading (bench/refit_gpu.py), with --oracle the refit oracle on CUDA plans
# (scripts/device_oracle.sh), with --pytest the Python tests (python/tests: torch CUDA tensors in and
# out, reforge.torch.compile on the GPU) against the extension built or bundled for this machine's
# python3 (PYTEST_ARGS: more pytest flags).
# Ends with the test runner's summary lines.
#
# The GPU machine (Ubuntu, CUDA toolkit, no network) lacks some of reforge's Debian packages:
# scripts/device_debs.sh fetches them on a Debian machine into .device/, which the device tool
# carries; they are unpacked into a private prefix here, never into /.
#   here:  scripts/device_debs.sh
#   there: scripts/device_test.sh [--bench] [--generate-bench] [--refit-bench] [--keep-build] [--prebuilt] [--no-conformance] [--oracle] [--pytest]
#   (GPU_BENCH_ARGS, GENERATE_BENCH_ARGS, REFIT_BENCH_ARGS: more flags of the benchmarks; CUDA_TEST_ARGS: more
#   flags of the unit tests binary, e.g. --gtest_also_run_disabled_tests; CUDA_TEST_FILTER: the unit tests to run,
#   '*Cuda*' by default, '-' for none; ORACLE_ARGS: the oracle's flags)
# --prebuilt skips the build: it runs the binaries that scripts/device_bundle.sh packed here into
# .device/prebuilt.tar.xz (a Release build of this tree with CUDA; the GPU machine's CUDA
# libraries and the carried packages serve them), which saves the build's minutes of device time;
# it needs only the runtime packages, so the device tool carries
# [".device/prebuilt.tar.xz", ".device/runtime-debs", ".device/onnx-node-suite"]. REFORGE_PREBUILT
# names another bundle (device_bundle.sh --out FILE: one with the Python extension beside one
# with the tests).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
deps=/opt/reforge-deps
B=${REFORGE_DEVICE_BUILD:-/tmp/reforge-device-build}
bench=0 generate_bench=0 refit_bench=0 keep=0 prebuilt=0 conformance=1 oracle=0 pytest=0
for a in "$@"; do
  case $a in
    --bench) bench=1 ;;
    --generate-bench) generate_bench=1 ;;
    --refit-bench) refit_bench=1 ;;
    --keep-build) keep=1 ;;
    --prebuilt) prebuilt=1 ;;
    --no-conformance) conformance=0 ;;
    --oracle) oracle=1 ;;
    --pytest) pytest=1 ;;
    *) echo "usage: scripts/device_test.sh [--bench] [--generate-bench] [--refit-bench] [--keep-build] [--prebuilt] [--no-conformance] [--oracle] [--pytest]" >&2; exit 2 ;;
  esac
done
# The packages: .device/debs (to build here), else for --prebuilt .device/runtime-debs, or
# .device/runtime-min (device_bundle.sh --min-libs: their shared libraries alone, one archive,
# where the carried tree must be smaller).
debs=.device/debs
[ $prebuilt = 1 ] && [ ! -d $debs ] && debs=.device/runtime-debs
[ $prebuilt = 1 ] && [ ! -d $debs ] && debs=.device/runtime-min
[ -d $debs ] || { echo "device_test: $debs missing (run scripts/device_debs.sh, for --prebuilt device_bundle.sh, here first)" >&2; exit 1; }
mkdir -p $deps
for f in $debs/*.deb; do [ -e "$f" ] && dpkg -x "$f" $deps; done
for f in $debs/*.tar.xz; do [ -e "$f" ] && tar -xJf "$f" -C $deps; done
arch=x86_64-linux-gnu
system_ld=${LD_LIBRARY_PATH:-}
export PATH=$deps/usr/bin:$PATH
export CPATH=$deps/usr/include:$deps/usr/include/$arch${CPATH:+:$CPATH}
export LIBRARY_PATH=$deps/usr/lib/$arch${LIBRARY_PATH:+:$LIBRARY_PATH}
export LD_LIBRARY_PATH=$deps/usr/lib/$arch:$deps/usr/lib/$arch/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# cuDNN: the system's, else the one PyTorch's wheels bring (nvidia-cudnn).
cudnn_root=""
if ! ls /usr/include/cudnn.h /usr/local/cuda/include/cudnn.h >/dev/null 2>&1; then
  cudnn_root=$(python3 -c 'import nvidia.cudnn as c; print(list(c.__path__)[0])' 2>/dev/null || true)
  [ -n "$cudnn_root" ] && export LD_LIBRARY_PATH=$cudnn_root/lib:$LD_LIBRARY_PATH
fi
echo "device_test: cuDNN from ${cudnn_root:-the system}"
filter=${CUDA_TEST_FILTER:-*Cuda*}
targets=(reforge reforge_tests)
[ $refit_bench = 1 ] && targets+=(reforge_refit_gpu_bench)
python_args=(-DREFORGE_PYTHON=OFF)
if [ $oracle = 1 ] || [ $pytest = 1 ]; then
  # The oracle drives the library through Python: the extension is built here for this machine's
  # python3 (one built elsewhere is for another Python). nanobind comes from .device/wheels where
  # carried (the version the tree is built with elsewhere), else from python3's own packages.
  if ls .device/wheels/nanobind-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/reforge-nanobind .device/wheels/nanobind-*.whl &&
      export PYTHONPATH=/tmp/reforge-nanobind${PYTHONPATH:+:$PYTHONPATH}
  fi
  python_args=(-DREFORGE_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)")
  targets=(reforge _reforge)
  [ "$filter" != - ] && targets+=(reforge_tests)
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvcc --version | tail -1
if [ $prebuilt = 1 ]; then
  # Where the tests were built to find the CLI (REFORGE_CLI_PATH): this tree's build/.
  B=$root/build
  bundle=${REFORGE_PREBUILT:-.device/prebuilt.tar.xz}
  [ -f "$bundle" ] || { echo "device_test: $bundle missing (scripts/device_bundle.sh)" >&2; exit 1; }
  rm -rf "$B" && mkdir -p "$B" && tar -xJf "$bundle" -C "$B"
  echo "device_test: prebuilt binaries of $(cat "$B/COMMIT")"
  if { [ $oracle = 1 ] || [ $pytest = 1 ]; } && ! ls "$B"/python/reforge/_reforge*.so >/dev/null 2>&1; then
    echo "device_test: --oracle and --pytest need the Python extension in the bundle (the oracle-prebuilt.tar.xz of an --oracle build)" >&2
    exit 1
  fi
else
  [ $keep = 1 ] || rm -rf "$B"
  t0=$SECONDS
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREFORGE_CUDA=ON "${python_args[@]}" \
    -DREFORGE_DEPS_PREFIX=$deps -DCMAKE_PREFIX_PATH=$deps/usr -DCMAKE_CUDA_ARCHITECTURES=90 ${cudnn_root:+-DCUDNN_ROOT=$cudnn_root} >"$B.configure.log" 2>&1 ||
    { tail -30 "$B.configure.log"; exit 1; }
  cmake --build "$B" -j"$(nproc)" --target "${targets[@]}" >"$B.build.log" 2>&1 ||
    { grep -E "error|FAILED" "$B.build.log" | head -40; exit 1; }
  echo "device_test: built in $((SECONDS - t0)) s"
  if [ $oracle = 1 ] && [ -n "${OUT:-}" ]; then
    # The CLI and the extension, as a bundle that a later `--prebuilt --oracle` run takes as
    # .device/prebuilt.tar.xz (with .device/runtime-debs) instead of building again.
    tmp=$(mktemp -d)
    mkdir -p "$tmp/python/reforge"
    strip -o "$tmp/reforge" "$B/reforge"
    for f in "$B"/python/reforge/_reforge*.so; do strip -o "$tmp/python/reforge/${f##*/}" "$f"; done
    cat .device/COMMIT >"$tmp/COMMIT" 2>/dev/null || echo unknown >"$tmp/COMMIT"
    tar -C "$tmp" -cf - reforge python COMMIT | xz -T0 -6 >"$OUT/oracle-prebuilt.tar.xz"
    rm -rf "$tmp"
  fi
fi

suite=/tmp/reforge-onnx-node-suite
if [ $conformance = 1 ] && [ ! -f $suite/.unpacked ]; then
  mkdir -p $suite
  for f in .device/onnx-node-suite/node*.tar.xz; do tar -xJf "$f" -C $suite; done
  touch $suite/.unpacked
fi
status=0
if [ "$filter" != - ]; then
  echo "== CUDA unit tests ($filter)"
  "$B/reforge_tests" --gtest_filter="$filter" --gtest_print_time=0 ${CUDA_TEST_ARGS:-} >"$B.unit.log" 2>&1 || status=1
  [ -n "${OUT:-}" ] && cp "$B.unit.log" "$OUT/unit.log"
  grep -E "FAILED|Failure|^\[  (PASSED|SKIPPED) |tests ran" "$B.unit.log" | tail -40
  # A crash ends the binary without a summary: name the test it was in.
  [ $status = 0 ] || { echo "last test started: $(grep '^\[ RUN' "$B.unit.log" | tail -1)"; tail -3 "$B.unit.log"; }
fi
if [ $conformance = 1 ]; then
  echo "== ONNX node conformance on the GPU (required list)"
  "$B/reforge" conformance $suite/node --list tests/conformance/required-standard-types.txt --device cuda \
    >"$B.conformance.log" 2>&1 || status=1
  # Which ops the failures are about, most frequent first, then the first failures in full.
  grep -oE "\(([A-Za-z0-9_:]+)\), opset [0-9]+: no kernel on backend 'cuda'" "$B.conformance.log" |
    sed -E 's/\(([^)]*)\).*/\1/' | sort | uniq -c | sort -rn | head -40
  grep -E "^FAIL" "$B.conformance.log" | grep -v "no kernel on backend 'cuda'" | head -40
  tail -1 "$B.conformance.log"
fi
if [ $oracle = 1 ]; then
  echo "== refit oracle on the GPU (--device cuda ${ORACLE_ARGS:-})"
  regs=tests/refit_oracle/regressions
  ls $regs >"$B.regressions-before"
  limit=()
  # ORACLE_DEADLINE (epoch seconds, scripts/device_oracle.sh): no case starts in its last 30 s
  [ -n "${ORACLE_DEADLINE:-}" ] && limit=(--time-limit $((ORACLE_DEADLINE - $(date +%s) - 30 > 30 ? ORACLE_DEADLINE - $(date +%s) - 30 : 30)))
  REFORGE_PYTHON=python3 REFORGE_BUILD_DIR=$B PYTHONUNBUFFERED=1 \
    scripts/oracle.sh --device cuda ${ORACLE_ARGS:-} "${limit[@]}" 2>&1 | tee "$B.oracle.log"
  rc=${PIPESTATUS[0]}
  echo "device_test: the oracle exited $rc"
  [ "$rc" = 0 ] || status=1
  # Violations found here are saved as regression cases in this copy of the tree: they come back.
  new=$(ls $regs | comm -13 "$B.regressions-before" -)
  if [ -n "$new" ] && [ -n "${OUT:-}" ]; then
    (cd $regs && tar -czf "$OUT/oracle-regressions.tar.gz" $new)
    echo "device_test: new regression cases (in oracle-regressions.tar.gz):" $new
  fi
fi
if [ $pytest = 1 ]; then
  echo "== Python tests on the GPU (${PYTEST_ARGS:-all})"
  REFORGE_CLI=$B/reforge PYTHONPATH=$root/python:$B/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 \
    python3 -m pytest -q -rs python/tests ${PYTEST_ARGS:-} >"$B.pytest.log" 2>&1 || status=1
  grep -E "passed|failed|^FAILED|^ERROR|^SKIPPED" "$B.pytest.log" | tail -40
fi
[ -n "${OUT:-}" ] && cp "$B".*.log "$OUT/" 2>/dev/null
if [ $bench = 1 ]; then
  echo "== GPU benchmarks"
  # PyTorch runs with the system's libraries; reforge, its subprocess, with the unpacked packages.
  REFORGE_LD_LIBRARY_PATH=$LD_LIBRARY_PATH LD_LIBRARY_PATH=$system_ld python3 bench/gpu_bench.py \
    --reforge "$B/reforge" --out "${OUT:-$B}" ${GPU_BENCH_ARGS:-} || status=1
fi
if [ $generate_bench = 1 ]; then
  echo "== text generation against PyTorch"
  REFORGE_LD_LIBRARY_PATH=$LD_LIBRARY_PATH LD_LIBRARY_PATH=$system_ld python3 bench/generate_gpu.py \
    --reforge "$B/reforge" --out "${OUT:-$B}" ${GENERATE_BENCH_ARGS:-} || status=1
fi
if [ $refit_bench = 1 ]; then
  echo "== refit against the copy floors and PyTorch"
  if [ -x "$B/reforge_refit_gpu_bench" ]; then
    REFORGE_LD_LIBRARY_PATH=$LD_LIBRARY_PATH LD_LIBRARY_PATH=$system_ld python3 bench/refit_gpu.py \
      --reforge "$B/reforge" --bench "$B/reforge_refit_gpu_bench" --out "${OUT:-$B}" ${REFIT_BENCH_ARGS:-} || status=1
  else
    echo "device_test: $B/reforge_refit_gpu_bench missing (a --prebuilt bundle without it)" >&2
    status=1
  fi
fi
exit $status
