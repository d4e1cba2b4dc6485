#!/usr/bin/env python3
"""Single-token decoding with quantized weights: reforge fp32 / int8 / int4 against ONNX Runtime fp32,
ONNX Runtime's own int8 (quantize_dynamic) and int4 (MatMulNBitsQuantizer), in one run.

    python bench/quant_decode.py [--model M.onnx --input NAME=FILE.npy ...] [--threads 1]
                                 [--rounds 5] [--iterations 50] [--block-size 32] [--dir DIR]

Needs the `onnx` package beside onnxruntime for ONNX Runtime's quantizers (bench/requirements.txt:
`.venv/bin/pip install -r bench/requirements.txt`, or a scratch venv made with
`python3 -m venv --system-site-packages`).

Without --model, the model is a Llama-style decoder of llama_s1's class (hidden 1024, ffn 2816,
8 layers, vocab 32000; sequence 1: one token), written by `build/reforge_refit_bench
--write-models` (tests/support/synthetic_llama.h) into --dir, with the token [[5]].

Each variant is timed in its own process (reforge bench on a plan built with --precision; the ORT
sessions through bench/ort_worker.py: all graph optimizations, intra_op_num_threads = --threads),
every round running each variant once in rotated order; a variant's latency is the median over
rounds of its per-round median. Ratios are to ORT fp32. Error: max |logits - logits_fp32| /
max |logits_fp32| against ORT's fp32 logits of the float model (reforge's own fp32 row shows the
float32 rounding floor). On the default model, whose int4 weights reforge and ORT's quantizer make
byte for byte alike, the relative max difference of the two int4 logits follows: the kernels' own
float32 rounding, apart from the quantization that both share.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_ort import ROOT, Reforge, run_child, run_ort, input_args  # noqa: E402


def write_default_model(d):
    model = os.path.join(d, "model_a.onnx")
    if not os.path.exists(model):
        tool = os.path.join(ROOT, "build", "reforge_refit_bench")
        if not os.access(tool, os.X_OK):
            sys.exit("quant_decode: %s not found (ninja -C build reforge_refit_bench)" % tool)
        rc, out, err, _ = run_child([tool, "--write-models", d, "--hidden", "1024", "--ffn", "2816",
                                     "--layers", "8", "--vocab", "32000", "--seq", "1"])
        if rc != 0:
            sys.exit("quant_decode: writing the model failed: " + (err or out)[-300:])
    ids = os.path.join(d, "input_ids.npy")
    np.save(ids, np.array([[5]], dtype=np.int64))
    return model, {"input_ids": ids}


def ort_quantized(model, d, block_size):
    """ONNX Runtime's int8 (quantize_dynamic, its defaults) and int4 (MatMulNBits) models."""
    import logging

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    int8 = os.path.join(d, "ort_int8.onnx")
    if not os.path.exists(int8):
        quantize_dynamic(model, int8, weight_type=QuantType.QInt8)
    int4 = os.path.join(d, "ort_int4.onnx")
    logging.getLogger().setLevel(logging.WARNING)  # the quantizers log every node at INFO
    if not os.path.exists(int4):
        q = MatMulNBitsQuantizer(onnx.load(model), block_size=block_size, is_symmetric=False)
        q.process()
        q.model.save_model_to_file(int4, use_external_data_format=False)
    return int8, int4


def ort_logits(model, inputs):
    import onnxruntime as ort

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: np.load(p) for n, p in inputs.items()})[0].astype(np.float64)


def reforge_logits(reforge, plan, inputs, threads, tmp):
    d = tempfile.mkdtemp(dir=tmp)
    try:
        rc, out, err, _ = run_child([reforge.binary, "run", plan] + input_args(inputs) +
                                    ["-o", d, "--threads", str(threads)])
        if rc != 0:
            raise RuntimeError("reforge run failed: " + (err or out)[-300:])
        outs = sorted(f for f in os.listdir(d) if f.endswith(".npy"))
        return np.load(os.path.join(d, outs[0])).astype(np.float64)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--dir", default=os.path.join(ROOT, "build-bench", "quant_decode"))
    ap.add_argument("--reforge", default=os.path.join(ROOT, "build", "reforge"))
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    if args.model:
        model = args.model
        inputs = dict(s.split("=", 1) for s in args.input)
    else:
        model, inputs = write_default_model(args.dir)
    reforge = Reforge(args.reforge)
    ort_int8, ort_int4 = ort_quantized(model, args.dir, args.block_size)

    plans = {}
    for prec in ("fp32", "int8", "int4"):
        plan = os.path.join(args.dir, "reforge_%s.plan" % prec)
        extra = [] if prec == "fp32" else ["--precision", prec]
        if prec == "int4":
            extra += ["--block-size", str(args.block_size)]
        reforge.build(model, plan, extra, args.threads)
        plans[prec] = plan
    variants = [("ORT fp32", "ort", model), ("ORT int8 (quantize_dynamic)", "ort", ort_int8),
                ("ORT int4 (MatMulNBits)", "ort", ort_int4), ("reforge fp32", "reforge", plans["fp32"]),
                ("reforge int8", "reforge", plans["int8"]), ("reforge int4", "reforge", plans["int4"])]

    times = {v[0]: [] for v in variants}
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for name, side, path in order:
            if side == "ort":
                res = run_ort(sys.executable, path, inputs, args.threads, args.iterations, 3)
            else:
                res = reforge.bench(path, [], inputs, args.threads, args.iterations, 3)
            times[name].append(res["median_ms"])

    ref = ort_logits(model, inputs)
    scale = max(np.abs(ref).max(), 1e-30)
    errors, logits = {}, {}
    for name, side, path in variants:
        got = ort_logits(path, inputs) if side == "ort" else reforge_logits(reforge, path, inputs, args.threads,
                                                                            args.dir)
        logits[name] = got
        errors[name] = float(np.abs(got - ref).max() / scale)

    base = statistics.median(times["ORT fp32"])
    print("model %s, %d thread(s), %d rounds x %d iterations, int4 block %d" % (
        model, args.threads, args.rounds, args.iterations, args.block_size))
    print("%-30s %10s %10s %14s" % ("variant", "ms", "/ORT fp32", "rel max err"))
    for name, _, _ in variants:
        ms = statistics.median(times[name])
        print("%-30s %10.3f %10.2f %14.2e" % (name, ms, ms / base, errors[name]))
    if args.model is None:  # reforge's int4 weights equal ORT's MatMulNBits ones byte for byte on this model
        a, b = logits["reforge int4"], logits["ORT int4 (MatMulNBits)"]
        print("reforge int4 against ORT int4 (the same quantized weights): rel max diff %.2e"
              % (np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))


if __name__ == "__main__":
    main()
