"""ONNX Runtime's time for one Linear product, the peer of build/reforge_linear_bench.

    build-bench/venv/bin/python bench/ort_linear.py M K N [--threads 1]

Builds a model of four MatMuls, each with its own [K, N] float32 initializer (ORT prepacks
them), runs it on an [M, K] input and prints the median CPU time per product and its GFLOPS.
CPU time (time.process_time) so that one-thread figures hold while other work loads the machine;
`--clock wall` times wall-clock instead (the figure to compare at 2+ threads, where CPU time adds
up the threads).
Not a test.
"""
import argparse
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ap = argparse.ArgumentParser()
ap.add_argument("M", type=int)
ap.add_argument("K", type=int)
ap.add_argument("N", type=int)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--repeat", type=int, default=11)
ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
a = ap.parse_args()
M, K, N, L = a.M, a.K, a.N, 4
rng = np.random.default_rng(0)
nodes, inits = [], []
for l in range(L):
    inits.append(numpy_helper.from_array(rng.uniform(-1, 1, (K, N)).astype(np.float32), f"w{l}"))
    nodes.append(helper.make_node("MatMul", ["x", f"w{l}"], [f"y{l}"]))
g = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
                      [helper.make_tensor_value_info(f"y{l}", TensorProto.FLOAT, [M, N]) for l in range(L)], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
so = ort.SessionOptions()
so.intra_op_num_threads = a.threads
so.inter_op_num_threads = 1
s = ort.InferenceSession(m.SerializeToString(), so)
x = rng.uniform(-1, 1, (M, K)).astype(np.float32)
for _ in range(3):
    s.run(None, {"x": x})
ts = []
for _ in range(a.repeat):
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    t = clock()
    s.run(None, {"x": x})
    ts.append((clock() - t) / L * 1e3)
med = sorted(ts)[len(ts) // 2]
print(f"ORT M={M} K={K} N={N} threads={a.threads} ({a.clock}): {med:.3f} ms per product, {2 * M * K * N / med / 1e6:.1f} GFLOPS")
