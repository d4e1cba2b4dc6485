#!/usr/bin/env bash
# The main job on the bundled default model (a tiny Llama-style decoder exported by PyTorch's
# dynamo exporter): build a stripped, refittable plan from weights A, refit it from the
# re-export with weights B (fast, verified against a fresh build, and slow) and from the
# safetensors checkpoint B, run it and compare with PyTorch's outputs for B. Run
# scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
R=build/reforge
M=models/llama/dynamo
IN=models/llama/inputs/b1_s7/input_ids.npy
REF_A=models/llama/reference/A/b1_s7/logits.npy
REF_B=models/llama/reference/B/b1_s7/logits.npy
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
now() { date +%s%N; }
ms() { echo $(( ($2 - $1) / 1000000 )); }

echo "== 1. run the ONNX model (weights A) and compare with PyTorch"
$R run $M/A/model.onnx --input input_ids=$IN --expect logits=$REF_A

echo "== 2. build: full and stripped refittable plans from weights A"
t0=$(now); $R build $M/A/model.onnx -o "$OUT/full.plan" --refit; t1=$(now)
$R build $M/A/model.onnx -o "$OUT/stripped.plan" --refit --strip-weights
echo "plan sizes: full $(stat -c %s "$OUT/full.plan") bytes, stripped $(stat -c %s "$OUT/stripped.plan") bytes"

echo "== 3. a stripped plan refuses to run until refit"
if $R run "$OUT/stripped.plan" --input input_ids=$IN 2>&1 | head -3; then :; fi

echo "== 4. fast refit from the re-export with weights B (verified bit for bit against a fresh build)"
t2=$(now); $R refit "$OUT/stripped.plan" --weights $M/B/model.onnx -o "$OUT/B_fast.plan" --full --verify; t3=$(now)
echo "== 5. slow refit (re-import and rebuild)"
t4=$(now); $R refit "$OUT/stripped.plan" --weights $M/B/model.onnx -o "$OUT/B_slow.plan" --full --slow; t5=$(now)
cmp "$OUT/B_fast.plan" "$OUT/B_slow.plan" && echo "fast and slow refit wrote identical plans"

echo "== 6. run the refit plan and compare with PyTorch's outputs for weights B"
$R run "$OUT/B_fast.plan" --input input_ids=$IN --expect logits=$REF_B

echo "== 7. refit straight from a framework checkpoint: bind to checkpoint A at build, refit from checkpoint B"
$R build $M/A/model.onnx -o "$OUT/bound.plan" --refit --strip-weights --checkpoint models/llama/checkpoint_A.safetensors
t6=$(now); $R refit "$OUT/bound.plan" --weights models/llama/checkpoint_B.safetensors -o "$OUT/B_ckpt.plan" --full; t7=$(now)
$R run "$OUT/B_ckpt.plan" --input input_ids=$IN --expect logits=$REF_B
echo "times (whole commands, ms): build $(ms $t0 $t1), fast refit + verify $(ms $t2 $t3), slow refit $(ms $t4 $t5), checkpoint refit $(ms $t6 $t7)"
