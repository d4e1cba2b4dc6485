#!/usr/bin/env python3
"""Two reforge binaries on the same GPU, side by side in one run: did a change move GPU speed?

For each model of bench/gpu_bench.py (exported once, as there), each binary builds its own CUDA
plan and times it with `reforge bench --device cuda --device-io` (inputs and outputs on the GPU),
with recorded replay (`--device-replay`) and without (`--no-device-replay`: every kernel launched
from the host each run). The binaries are timed in turn, ROUNDS times each, and each figure is the
median of its rounds' medians (one process after another on a GPU drifts by a few per cent, so
neither binary always goes first). Every process of a model shares one timing cache, so both
binaries run the convolution algorithms the first process timed, and a difference is the
runtime's, not the autotuner's.

    python3 bench/gpu_compare_binaries.py OLD NEW [--models bert,resnet50] [--rounds 3]

Prints one table (new/old per row) and writes OUT/gpu_compare.json.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--models", default="bert,resnet50")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    binaries = {"old": a.old, "new": a.new}
    work = tempfile.mkdtemp(prefix="gpu_compare_")
    rows = []
    for name in a.models.split(","):
        model, make_inputs, out_names = gpu_bench.MODELS[name]()
        for batch in gpu_bench.BATCHES.get(name, [int(b) for b in a.batches.split(",")]):
            d = os.path.join(work, f"{name}_b{batch}")
            os.makedirs(os.path.join(d, "in"), exist_ok=True)
            feeds = make_inputs(batch)
            onnx_path = os.path.join(d, "model.onnx")
            gpu_bench.export(model, feeds, out_names, onnx_path, external=name in gpu_bench.DTYPE,
                             dynamic=gpu_bench.DYNAMIC.get(name))
            inputs = []
            for k, v in feeds.items():
                path = os.path.join(d, "in", k + ".npy")
                import numpy as np

                np.save(path, v.numpy())
                inputs += ["-i", f"{k}={path}"]
            plans = {}
            for side, exe in binaries.items():
                plans[side] = os.path.join(d, f"{side}.plan")
                gpu_bench.run([exe, "build", onnx_path, "-o", plans[side], "--device", "cuda", "--quiet"])
            medians = {(side, mode): [] for side in binaries for mode in ("replay", "eager")}
            for r in range(a.rounds):
                order = list(binaries) if r % 2 == 0 else list(reversed(list(binaries)))
                for side in order:
                    for mode, flag in (("replay", "--device-replay"), ("eager", "--no-device-replay")):
                        out = gpu_bench.run([binaries[side], "bench", plans[side], flag, "--device", "cuda",
                                             "--timing-cache", os.path.join(d, "timing.cache"), "--device-io",
                                             "--warmup", str(a.warmup), "--iterations", str(a.iterations)] + inputs)
                        medians[(side, mode)].append(json.loads(out.strip().splitlines()[-1])["median_ms"])
            row = {"model": name, "batch": batch}
            for (side, mode), ms in medians.items():
                row[f"{side}_{mode}_ms"] = round(statistics.median(ms), 3)
            for mode in ("replay", "eager"):
                row[f"{mode}_new_over_old"] = round(row[f"new_{mode}_ms"] / row[f"old_{mode}_ms"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'model':10} {'batch':>5} {'old ms':>9} {'new ms':>9} {'new/old':>8} {'old eager':>10} "
          f"{'new eager':>10} {'new/old':>8}")
    for r in rows:
        print(f"{r['model']:10} {r['batch']:>5} {r['old_replay_ms']:>9.3f} {r['new_replay_ms']:>9.3f} "
              f"{r['replay_new_over_old']:>8.3f} {r['old_eager_ms']:>10.3f} {r['new_eager_ms']:>10.3f} "
              f"{r['eager_new_over_old']:>8.3f}")
    with open(os.path.join(a.out, "gpu_compare.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
