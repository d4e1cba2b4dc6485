#!/usr/bin/env python3
"""reforge vs ONNX Runtime latency on the models/ exports, interleaved. Run via compare_ort.sh.

For each model and thread count, every round runs `reforge bench` (a fresh process: import,
build, warm-up, timed runs) and then ONNX Runtime (a fresh session: all graph optimizations,
intra_op_num_threads=N, inter_op_num_threads=1, same warm-up and timed runs), so slow drifts of
the machine hit both alike. Each side's figure is the median over rounds of the per-round
median. ORT's session is dropped after each round so its spinning threads never overlap with
reforge's run.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(ROOT, "models")


def default_models():
    """models/ dynamo and torch113 dynamic exports (weights A), each on its first input set."""
    with open(os.path.join(MODELS_DIR, "manifest.json")) as f:
        manifest = json.load(f)
    picked = []
    for e in manifest["exports"]:
        if e["weights"] == "A" and (e["export"] == "dynamo" or
                                    (e["export"].startswith("torch113") and e["dynamic"])):
            picked.append(e)
    return picked


def lookup(paths):
    """Manifest entries for explicit model paths (relative to models/ or absolute)."""
    with open(os.path.join(MODELS_DIR, "manifest.json")) as f:
        manifest = json.load(f)
    by_path = {os.path.realpath(os.path.join(MODELS_DIR, e["path"])): e for e in manifest["exports"]}
    out = []
    for p in paths:
        full = os.path.realpath(p if os.path.isabs(p) or os.path.exists(p) else os.path.join(MODELS_DIR, p))
        if full not in by_path:
            sys.exit("bench: %s is not in models/manifest.json" % p)
        out.append(by_path[full])
    return out


def run_reforge(binary, model, inputs, threads, iterations, warmup):
    cmd = [binary, "bench", model]
    for name, path in inputs.items():
        cmd += ["--input", "%s=%s" % (name, path)]
    cmd += ["--threads", str(threads), "--iterations", str(iterations), "--warmup", str(warmup)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in p.stdout.strip().splitlines() if l.strip()]
    if p.returncode != 0 or not lines:
        raise RuntimeError("reforge bench failed (rc %d): %s" % (p.returncode, (p.stderr or p.stdout)[-400:]))
    return json.loads(lines[-1])["median_ms"]


def run_ort(model, feeds, threads, iterations, warmup):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    del sess
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="exports (paths under models/); default: dynamo and "
                    "torch113 dynamic exports, weights A")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reforge", default=os.path.join(ROOT, "build", "reforge"))
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()
    import onnxruntime as ort

    entries = lookup(args.models) if args.models else default_models()
    threads = [int(t) for t in args.threads.split(",") if t]
    print("onnxruntime %s, reforge %s, %d rounds x %d iterations (warm-up %d)" % (
        ort.__version__, args.reforge, args.rounds, args.iterations, args.warmup), file=sys.stderr)
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > 0.5 * cores:
        print("warning: load average %.1f on %d cores: other work is running; multi-thread "
              "timings (OpenMP's spin-waiting especially) will be noisy" % (load, cores),
              file=sys.stderr)
    rows = []
    for e in entries:
        model = os.path.join(MODELS_DIR, e["path"])
        s = e["input_sets"][0]
        inputs = {n: os.path.join(MODELS_DIR, p) for n, p in s["inputs"].items()}
        feeds = {n: np.load(p) for n, p in inputs.items()}
        for n in threads:
            ort_ms, ref_ms, error = [], [], ""
            for _ in range(args.rounds):
                try:
                    ref_ms.append(run_reforge(args.reforge, model, inputs, n, args.iterations, args.warmup))
                except Exception as ex:
                    error = str(ex).strip().splitlines()[-1][:120] if str(ex).strip() else repr(ex)
                ort_ms.append(run_ort(model, feeds, n, args.iterations, args.warmup))
            row = {"model": e["path"], "input_set": s["name"], "threads": n,
                   "ort_ms": statistics.median(ort_ms),
                   "reforge_ms": statistics.median(ref_ms) if ref_ms and not error else None,
                   "error": error}
            row["ratio"] = row["reforge_ms"] / row["ort_ms"] if row["reforge_ms"] else None
            rows.append(row)
            print("  %s t=%d done" % (e["path"], n), file=sys.stderr, flush=True)

    w = max(len(r["model"]) for r in rows) if rows else 10
    print("%-*s  %7s  %12s  %16s  %14s" % (w, "model", "threads", "ORT median", "reforge median",
                                            "reforge/ORT"))
    for r in rows:
        ref = "%13.3f ms" % r["reforge_ms"] if r["reforge_ms"] is not None else "%16s" % "error"
        ratio = "%14.2f" % r["ratio"] if r["ratio"] is not None else "%14s" % "-"
        print("%-*s  %7d  %9.3f ms  %16s  %s" % (w, r["model"], r["threads"], r["ort_ms"], ref, ratio))
        if r["error"]:
            print("    reforge: %s" % r["error"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"onnxruntime": ort.__version__, "rounds": args.rounds,
                       "iterations": args.iterations, "warmup": args.warmup, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
