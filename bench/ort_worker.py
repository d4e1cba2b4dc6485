#!/usr/bin/env python3
"""ONNX Runtime side of compare_ort.py, run as its own process so that its peak resident memory
is measured the same way as reforge's (compare_ort.py's run_child).

    ort_worker.py MODEL.onnx --input NAME=FILE.npy ... --threads N --iterations N --warmup N

Session options: all graph optimizations, intra_op_num_threads=N, inter_op_num_threads=1,
sequential execution, CPU provider. The last stdout line is JSON:
{"median_ms", "min_ms", "max_ms", "iterations", "create_ms", "rss_before_session_kb"}
(create_ms: InferenceSession construction, i.e. load + optimize; rss_before_session_kb: this
process's peak RSS after importing onnxruntime and loading the inputs, before the session).
"""

import argparse
import json
import resource
import statistics
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--iterations", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    import onnxruntime as ort

    feeds = {}
    for spec in args.input:
        name, sep, path = spec.partition("=")
        if not sep:
            sys.exit("ort_worker: --input expects NAME=FILE.npy, got %r" % spec)
        feeds[name] = np.load(path)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    t0 = time.perf_counter()
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    create_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(args.warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times),
                      "max_ms": max(times), "iterations": len(times), "create_ms": create_ms,
                      "rss_before_session_kb": rss_before}))


if __name__ == "__main__":
    main()
