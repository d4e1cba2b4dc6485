#!/usr/bin/env python3
"""Peak memory of a refit from an ONNX file whose weights are inside the file (protobuf
raw_data, so they are parsed into memory, not mapped), as ratios to the weights' bytes.

Writes two ONNX models of the same structure (a stack of --layers Gemm layers of --width x
--width float32 weights, two weight sets A and B, seeded) into --dir, builds a refittable plan of
A with `reforge build --refit` (stripped and not), then refits each from B.onnx with
`reforge refit PLAN --weights B.onnx -o OUT` under /usr/bin/time and prints the peak resident set
of each refit process against the weights' bytes (the process itself, before any weight, is a
few tens of MB: printed as the baseline from `reforge inspect`).

    .venv/bin/pip install -r bench/requirements.txt
    .venv/bin/python bench/refit_memory.py [--reforge build/reforge] [--layers 24] [--width 2048] [--dir DIR]
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def write_model(path, layers, width, seed):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width), dtype=np.float32) * 0.02).astype(np.float32)
        b = (rng.standard_normal(width, dtype=np.float32) * 0.02).astype(np.float32)
        inits += [numpy_helper.from_array(w, "w%d" % i), numpy_helper.from_array(b, "b%d" % i)]
        y = "h%d" % i
        nodes.append(helper.make_node("Gemm", [x, "w%d" % i, "b%d" % i], [y + "_g"], transB=1))
        nodes.append(helper.make_node("Relu", [y + "_g"], [y]))
        x = y
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", width])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return layers * (width * width + width) * 4


def peak_kb(cmd):
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return int(r.stderr.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reforge", default=os.path.join(os.path.dirname(__file__), "..", "build", "reforge"))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--dir", default="")
    a = ap.parse_args()
    d = a.dir or tempfile.mkdtemp(prefix="reforge_refit_memory_")
    os.makedirs(d, exist_ok=True)
    weights = write_model(os.path.join(d, "A.onnx"), a.layers, a.width, 1)
    write_model(os.path.join(d, "B.onnx"), a.layers, a.width, 2)
    rf = a.reforge
    p = lambda n: os.path.join(d, n)
    subprocess.run([rf, "build", p("A.onnx"), "--refit", "--strip-weights", "-o", p("stripped.plan")], check=True,
                   capture_output=True)
    subprocess.run([rf, "build", p("A.onnx"), "--refit", "-o", p("full.plan")], check=True, capture_output=True)
    base = peak_kb([rf, "inspect", p("stripped.plan")]) * 1024
    stripped = peak_kb([rf, "refit", p("stripped.plan"), "--weights", p("B.onnx"), "-o", p("out1.plan")]) * 1024
    full = peak_kb([rf, "refit", p("full.plan"), "--weights", p("B.onnx"), "-o", p("out2.plan")]) * 1024
    mb = lambda b: b / 1e6
    print("weights %.1f MB (%d Gemm layers %dx%d float32, inside the ONNX file); process baseline %.1f MB"
          % (mb(weights), a.layers, a.width, a.width, mb(base)))
    print("refit from ONNX, stripped plan:   peak %.1f MB = %.2fx the weights (%.2fx less the baseline)"
          % (mb(stripped), stripped / weights, (stripped - base) / weights))
    print("refit from ONNX, unstripped plan: peak %.1f MB = %.2fx the weights (%.2fx less the baseline; "
          "the old weights stay until the swap)" % (mb(full), full / weights, (full - base) / weights))
    if not a.dir:
        for n in os.listdir(d):
            os.remove(os.path.join(d, n))
        os.rmdir(d)


if __name__ == "__main__":
    main()
