#!/usr/bin/env bash
# The refit oracle on the GPU machine (docs/reliability.md "Refit oracle"): cases drawn as
# `scripts/oracle.sh --device cuda` draws them, every plan built for the CUDA backend, the saved
# regression cases first. The machine has no .venv and another Python: scripts/device_test.sh
# --oracle builds the CLI and the Python extension there for its python3 (minutes of the run), or
# with --prebuilt runs .device/prebuilt.tar.xz: the oracle-prebuilt.tar.xz an earlier build there
# left in $OUT, or `scripts/device_bundle.sh build --python python3.12` here (with
# .device/runtime-debs); the bundle must be of the commit packed.
#
#   here:  scripts/device_debs.sh               once: .device/debs (the Debian packages it lacks)
#          scripts/device_oracle.sh --pack      .device/tree.tar.xz: the files of HEAD, less models/
#   there: scripts/device_oracle.sh [--prebuilt] [oracle flags, default --cases 2000 --seed 7 --jobs 8]
#          (the device tool carries [".device/debs", ".device/wheels", ".device/tree.tar.xz",
#          ".device/COMMIT"]; with --prebuilt [".device/runtime-debs", ".device/prebuilt.tar.xz",
#          ".device/tree.tar.xz", ".device/COMMIT"])
#
# The run tests HEAD as packed, not the working tree the tool copies (others' edits in progress):
# the packed tree is unpacked into /tmp and takes models/ from the copy, which --pack checked to
# be HEAD's. ORACLE_BUDGET (seconds, default 540) bounds the whole run: the oracle starts no case
# after what the build left of it (--time-limit), so its counts come back within one call.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --pack ]; then
  set -e
  if ! git diff --quiet HEAD -- models || [ -n "$(git ls-files -o --exclude-standard models)" ]; then
    echo "device_oracle: models/ differs from HEAD here; the packed tree takes the copy's models/" >&2
    exit 1
  fi
  mkdir -p .device
  git archive --format=tar HEAD -- . ':!models' | xz -T0 -6 >.device/tree.tar.xz.part
  mv .device/tree.tar.xz.part .device/tree.tar.xz
  git rev-parse --short HEAD >.device/COMMIT
  echo "device_oracle: packed $(cat .device/COMMIT) ($(du -h .device/tree.tar.xz | cut -f1))"
  exit 0
fi
start=$SECONDS
prebuilt=()
[ "${1:-}" = --prebuilt ] && { prebuilt=(--prebuilt); shift; }
args=("$@")
[ ${#args[@]} = 0 ] && args=(--cases 2000 --seed 7 --jobs 8)
tree=/tmp/reforge-oracle-tree
if [ -f .device/tree.tar.xz ]; then
  rm -rf $tree && mkdir -p $tree
  tar -xJf .device/tree.tar.xz -C $tree
  ln -s "$(pwd)/models" $tree/models
  ln -s "$(pwd)/.device" $tree/.device
  echo "device_oracle: the packed tree of $(cat .device/COMMIT 2>/dev/null || echo '?')"
  cd $tree
else
  echo "device_oracle: no .device/tree.tar.xz: the working tree as copied"
fi
# What the build leaves of the budget goes to the oracle (device_test.sh turns ORACLE_DEADLINE
# into its --time-limit).
export CUDA_TEST_FILTER=-
export ORACLE_DEADLINE=$(($(date +%s) + ${ORACLE_BUDGET:-540} - (SECONDS - start)))
export ORACLE_ARGS="${args[*]}"
exec scripts/device_test.sh --no-conformance --oracle "${prebuilt[@]}"
