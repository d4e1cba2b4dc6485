#!/usr/bin/env python3
"""Runs on a shared machine: a plan's run loop with one core kept busy, and inside a PyTorch process.

    .venv/bin/python bench/busy_bench.py [--model models/llama/dynamo/A/model.onnx] [--seq 100]
        [--threads 2] [--runs 300] [--nice 19] [--torch]

Every figure is a mean over --runs runs (a median hides the stalls this measures), in one process:

  quiet        reforge.build(model, threads=T), then plan.run in a loop, nothing else running
  busy         the same while another process (nice --nice) spins on one core
  ort busy     ONNX Runtime with T intra-op threads, same model and input, while it spins
  cli busy     `reforge bench --threads T` on the same plan while it spins (its mean)

and the ratios busy / quiet (goal: <= 1.5) and busy / ort busy. With --torch (PyTorch must be
importable: Debian's python3-torch, see bench/py_refit.py), a PyTorch matrix product loop is timed
before reforge runs anything and again right after a reforge run loop, in the same process: the
ratio (goal: <= 1.0 within noise) shows whether reforge's threads take cores from PyTorch's work.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def mean_ms(fn, runs):
    for _ in range(10):
        fn()
    t = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - t) * 1e3 / runs


class Busy:
    """One process spinning on one core, niced."""

    def __init__(self, nice):
        self.nice = nice

    def __enter__(self):
        self.p = subprocess.Popen(["nice", "-n", str(self.nice), sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)
        return self

    def __exit__(self, *a):
        self.p.kill()
        self.p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/llama/dynamo/A/model.onnx")
    ap.add_argument("--seq", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--nice", type=int, default=19)
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--cli", default="build/reforge")
    a = ap.parse_args()

    torch = None
    if a.torch:
        import torch  # noqa: F401  (before reforge: PyTorch's thread team exists first)

        x = torch.randn(256, 256)

        def torch_work():
            for _ in range(20):
                torch.mm(x, x)

        torch_before = mean_ms(torch_work, 50)

    import reforge

    ids = (np.arange(a.seq, dtype=np.int64) % 97).reshape(1, a.seq)
    feed = {"input_ids": ids}
    rows = []
    plan1 = reforge.build(a.model, threads=1)
    plan = reforge.build(a.model, threads=a.threads)
    quiet1 = mean_ms(lambda: plan1.run(feed), a.runs)
    quiet = mean_ms(lambda: plan.run(feed), a.runs)
    if torch is not None:
        torch_after = mean_ms(torch_work, 50)
    with Busy(a.nice):
        busy1 = mean_ms(lambda: plan1.run(feed), a.runs)
        busy = mean_ms(lambda: plan.run(feed), a.runs)
    rows.append(("reforge python, 1 thread", quiet1, busy1))
    rows.append((f"reforge python, {a.threads} threads", quiet, busy))

    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
        oq = mean_ms(lambda: sess.run(None, feed), a.runs)
        with Busy(a.nice):
            ob = mean_ms(lambda: sess.run(None, feed), a.runs)
        rows.append((f"onnxruntime, {a.threads} threads", oq, ob))
    except ImportError:
        pass

    if os.path.exists(a.cli):
        with tempfile.TemporaryDirectory() as d:
            pf = os.path.join(d, "m.plan")
            inp = os.path.join(d, "ids.npy")
            np.save(inp, ids)
            subprocess.run([a.cli, "build", a.model, "-o", pf], check=True, capture_output=True)

            def cli_mean():
                out = subprocess.run([a.cli, "bench", pf, "--threads", str(a.threads), "--input", f"input_ids={inp}",
                                      "--iterations", str(a.runs)], check=True, capture_output=True, text=True)
                import json

                return json.loads(out.stdout)["mean_ms"]

            try:
                cq = cli_mean()
                with Busy(a.nice):
                    cb = cli_mean()
                rows.append((f"reforge bench (CLI), {a.threads} threads", cq, cb))
            except (subprocess.CalledProcessError, KeyError, ValueError) as e:
                print(f"(CLI bench skipped: {e})")

    print(f"model {a.model}, seq {a.seq}, {a.runs} runs, busy = one process at nice {a.nice}; mean ms per run")
    print(f"{'':40s} {'quiet':>8s} {'busy':>8s} {'busy/quiet':>11s}")
    for name, q, b in rows:
        print(f"{name:40s} {q:8.3f} {b:8.3f} {b / q:11.2f}")
    if torch is not None:
        print(f"PyTorch mm loop in this process: {torch_before:.3f} ms before reforge ran, {torch_after:.3f} ms after "
              f"({torch_after / torch_before:.2f}x)")


if __name__ == "__main__":
    main()
