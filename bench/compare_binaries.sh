#!/usr/bin/env bash
# Two reforge binaries side by side on the large benchmark models (scripts/models/bench_models.py):
# interleaved rounds of `reforge bench` at batch 1, the median of the rounds' medians per side,
# and their ratio. For checking that a change keeps the speed.
#   bench/compare_binaries.sh OLD_REFORGE NEW_REFORGE MODELS_DIR [models...] (default: all in the folder)
# Environment: THREADS (default "1 2"), ROUNDS (default 3).
set -euo pipefail
old=$1 new=$2 dir=$3
shift 3
models=("$@")
[ ${#models[@]} -gt 0 ] || models=($(cd "$dir" && ls -d */ | tr -d /))
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for model in "${models[@]}"; do
  ins=()
  for f in "$dir/$model"/inputs/b1/*.npy; do ins+=(--input "$(basename "$f" .npy)=$f"); done
  for t in ${THREADS:-1 2}; do
    for r in $(seq "${ROUNDS:-3}"); do
      for side in old new; do
        bin=$old
        [ $side = new ] && bin=$new
        ms=$("$bin" bench "$dir/$model/model.onnx" "${ins[@]}" --threads "$t" --iterations 10 --warmup 2 2>/dev/null |
          tail -1 | python3 -c "import json, sys; print(json.loads(sys.stdin.read())['median_ms'])")
        echo "$model $t $side $ms" >> "$log"
      done
    done
  done
done
python3 - "$log" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m, t, side, ms = line.split()
    d[(m, int(t), side)].append(float(ms))
print(f"{'model':12} {'thr':>3} {'old ms':>10} {'new ms':>10} {'new/old':>8}")
for m, t in sorted({(m, t) for m, t, _ in d}):
    o, n = statistics.median(d[(m, t, 'old')]), statistics.median(d[(m, t, 'new')])
    print(f"{m:12} {t:>3} {o:10.2f} {n:10.2f} {n / o:8.3f}")
PY
