#!/usr/bin/env python3
"""Quantized variants of the bundled tiny models, made by ONNX Runtime's own quantization tools.

Writes models/quant/: for each variant its model.onnx, ONNX Runtime's outputs on the committed
inputs of the float model (ort/<input set>/<output>.npy), and models/quant/manifest.json.

Variants (all from the dynamo exports, opset 18):
  bert_dynamic, cnn_dynamic   quantize_dynamic, int8 weights: DynamicQuantizeLinear,
                              MatMulInteger, ConvInteger
  bert_static, cnn_static     quantize_static, QDQ format (uint8 activations, int8 weights,
                              per-channel weights), calibrated on the committed inputs
  cnn_static_B, cnn_static_B2 the same from the float model with weights B, and with weights B
                              scaled elementwise by 0.5 .. 1.0 (float reference: ORT's run of that float model,
                              float/<input set>/); a QDQ plan built from cnn_static_B refits from
                              cnn_static_B2 by position (A's exporter merged its zero biases, so
                              ORT quantizes A's biases otherwise: another structure)
  cnn_static_qop              quantize_static, QOperator format, convolutions only: QLinearConv
  bert_qop, cnn_qop           quantize_static, QOperator format, every op ORT quantizes: QLinearMatMul,
                              QLinearConv and ORT's com.microsoft QGemm, QLinearAdd, QLinearMul,
                              QLinearSoftmax
  llama_nbits_A, llama_nbits_B
                              MatMulNBitsQuantizer, 4 bits, block 32, asymmetric (zero points),
                              from the float model with weights A and with weights B; the two
                              have the same structure, so B refits a plan built from A
  llama_qdq4_A, llama_qdq4_B  the same quantizer writing QDQ format (opset 21): DequantizeLinear of
                              uint4 codes with uint4 zero points, block 32 along K, before MatMul;
                              B refits a plan built from A
  llama_qdq4_sym_A            the same, symmetric: int4 codes without zero points

The float reference of each variant is the bundled framework reference (models/<model>/reference/
<weights>/...), PyTorch's float32 output; the script checks that ONNX Runtime's float run agrees
with it within 1e-4 before using it.

Tolerances written to the manifest, per variant, as max |a - b| over every output element:
  vs_float:  what reforge's output may differ from the float reference. It is the error ONNX
             Runtime's own quantized run reaches against the float reference (`ort_vs_float`),
             times 1.5 plus 1e-3: quantized kernels that round differently (an activation's
             quantized code off by one step where x / scale lands on a tie) move an output by
             about a quantization step, which is the size of ORT's error itself.
  vs_ort:    what reforge's output may differ from ONNX Runtime's quantized output. Tight: both
             run the same integer arithmetic on the same codes, so the outputs differ only by
             float32 accumulation order (MatMulNBits, the float ops between quantized ones) and by
             ties in requantization; `vs_ort` is a few float32 ulps of the output's magnitude
             plus one quantization step of the output where the model requantizes its output.

Requirements (kept out of the project's .venv):
  python3 -m venv --system-site-packages /tmp/qvenv
  /tmp/qvenv/bin/pip install onnx onnx_ir onnxruntime==1.32.0 numpy
  /tmp/qvenv/bin/python scripts/models/make_quant_models.py [NAME ...]

With names, only those variants are made again; the manifest keeps the others' entries as they are.
"""
import json
import os
import shutil
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                      quantize_static)
from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
OUT = os.path.join(MODELS, "quant")
EXPORT = "dynamo"


def float_entry(model, weights):
    manifest = json.load(open(os.path.join(MODELS, "manifest.json")))
    for e in manifest["exports"]:
        if e["model"] == model and e["export"] == EXPORT and e["weights"] == weights:
            return e
    sys.exit(f"no {model}/{EXPORT}/{weights} in models/manifest.json")


def load_inputs(entry):
    sets = []
    for s in entry["input_sets"]:
        feeds = {k: np.load(os.path.join(MODELS, p)) for k, p in s["inputs"].items()}
        refs = {k: np.load(os.path.join(MODELS, p)) for k, p in s["reference"].items()}
        sets.append((s, feeds, refs))
    return sets


def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    # ORT's graph optimizations fuse and reorder; the reference is the model as written.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


class Reader(CalibrationDataReader):
    def __init__(self, sets):
        self.feeds = [f for _, f, _ in sets]
        self.i = 0

    def get_next(self):
        if self.i >= len(self.feeds):
            return None
        self.i += 1
        return self.feeds[self.i - 1]

    def rewind(self):
        self.i = 0


def scaled_float_model(src, dst, factor):
    """The float model with every float initializer of rank >= 1 multiplied elementwise by factors
    spread over [factor - 0.25, factor + 0.25) (element i: factor - 0.25 + 0.5 * frac(0.618 i)):
    other weights and other quantized codes, the same structure (scalars are the model's constants
    and stay)."""
    m = onnx.load(src)
    for t in m.graph.initializer:
        a = onnx.numpy_helper.to_array(t)
        if a.dtype == np.float32 and a.ndim >= 1:
            f = factor - 0.25 + 0.5 * np.modf(np.arange(a.size, dtype=np.float64) * 0.618)[0]
            b = (a.astype(np.float64) * f.reshape(a.shape)).astype(np.float32)
            t.CopyFrom(onnx.numpy_helper.from_array(b, t.name))
    onnx.save(m, dst)


def make(name, model, weights, kind, quantize, scale_weights=None):
    entry = float_entry(model, weights)
    src = os.path.join(MODELS, entry["path"])
    sets = load_inputs(entry)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    dst = os.path.join(d, "model.onnx")
    float_ref = None
    if scale_weights is not None:
        # No framework reference exists for these weights: the float reference is ORT's run of the
        # scaled float model (not committed; the script remakes it), stored next to the variant.
        scaled = os.path.join(d, "float_model.onnx")
        scaled_float_model(src, scaled, scale_weights)
        fs = session(scaled)
        float_ref = {}
        for i, (s, feeds, _) in enumerate(sets):
            refs = {}
            for o, v in zip(entry["outputs"], fs.run(None, feeds)):
                rel = f"quant/{name}/float/{s['name']}/{o}.npy"
                os.makedirs(os.path.dirname(os.path.join(MODELS, rel)), exist_ok=True)
                np.save(os.path.join(MODELS, rel), v)
                refs[o] = v
                s = dict(s, reference=dict(s["reference"], **{o: rel}))
            sets[i] = (s, feeds, refs)
        src = scaled
    else:
        # The float model must reproduce the framework reference under ORT before it is quantized.
        fs = session(src)
        for s, feeds, refs in sets:
            outs = fs.run(None, feeds)
            for o, v in zip(entry["outputs"], outs):
                err = float(np.max(np.abs(v - refs[o])))
                assert err < 1e-4, f"{name}: ORT float run of {src} differs from the reference by {err}"
    quantize(src, dst, sets)
    if scale_weights is not None:
        os.remove(src)
    m = onnx.load(dst)
    onnx.checker.check_model(m)
    ops = sorted({(n.domain or "ai.onnx") + "::" + n.op_type for n in m.graph.node})
    qs = session(dst)
    rec_sets, worst_float, worst_ulp = [], 0.0, 0.0
    for s, feeds, refs in sets:
        outs = qs.run(None, feeds)
        rec = {"name": s["name"], "inputs": s["inputs"], "float_reference": s["reference"], "ort_reference": {}}
        for o, v in zip(entry["outputs"], outs):
            rel = f"quant/{name}/ort/{s['name']}/{o}.npy"
            os.makedirs(os.path.dirname(os.path.join(MODELS, rel)), exist_ok=True)
            np.save(os.path.join(MODELS, rel), v)
            rec["ort_reference"][o] = rel
            err = float(np.max(np.abs(v.astype(np.float64) - refs[o].astype(np.float64))))
            rec.setdefault("ort_vs_float", {})[o] = err
            worst_float = max(worst_float, err)
            worst_ulp = max(worst_ulp, float(np.max(np.abs(v))) * 2.0**-23)
        rec_sets.append(rec)
    return {
        "name": name,
        "model": model,
        "weights": weights,
        "from": entry["path"] + ("" if scale_weights is None else
                                 f" with float weights scaled elementwise by {scale_weights} +- 0.25"),
        "kind": kind,
        "path": f"quant/{name}/model.onnx",
        "ops": ops,
        "inputs": entry["inputs"],
        "outputs": entry["outputs"],
        "input_sets": rec_sets,
        "ort_vs_float": worst_float,
        "tolerance": {
            "vs_float": worst_float * 1.5 + 1e-3,
            "vs_ort": max(64 * worst_ulp, 1e-5),
        },
    }


def dynamic(src, dst, sets):
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=False)


def dynamic_u8(src, dst, sets):
    # ORT's CPU ConvInteger takes uint8 weights only.
    quantize_dynamic(src, dst, weight_type=QuantType.QUInt8, per_channel=False)


def static_qdq(src, dst, sets):
    quantize_static(src, dst, Reader(sets), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True)


def static_qop(src, dst, sets):
    # Conv only: in QOperator format ORT writes its Gemm and Add as com.microsoft QGemm / QLinearAdd.
    quantize_static(src, dst, Reader(sets), quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["Conv"])


def static_qop_all(src, dst, sets):
    quantize_static(src, dst, Reader(sets), quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True)


def nbits(src, dst, sets):
    q = MatMulNBitsQuantizer(onnx.load(src), block_size=32, is_symmetric=False, accuracy_level=None)
    q.process()
    q.model.save_model_to_file(dst, use_external_data_format=False)


def nbits_qdq(symmetric):
    def quantize(src, dst, sets):
        cfg = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=symmetric, accuracy_level=None,
                                           quant_format=QuantFormat.QDQ)
        q = MatMulNBitsQuantizer(onnx.load(src), algo_config=cfg)
        q.process()
        q.model.save_model_to_file(dst, use_external_data_format=False)
    return quantize


VARIANTS = [
    ("bert_dynamic", "bert", "A", "quantize_dynamic int8", dynamic),
    ("cnn_dynamic", "cnn", "A", "quantize_dynamic uint8 (ORT's ConvInteger takes uint8 weights)",
     dynamic_u8),
    ("bert_static", "bert", "A", "quantize_static QDQ per-channel", static_qdq),
    ("cnn_static", "cnn", "A", "quantize_static QDQ per-channel", static_qdq),
    ("cnn_static_B", "cnn", "B", "quantize_static QDQ per-channel", static_qdq),
    ("cnn_static_B2", "cnn", "B", "quantize_static QDQ per-channel", static_qdq, {"scale_weights": 0.75}),
    ("cnn_static_qop", "cnn", "A", "quantize_static QOperator per-channel, Conv only", static_qop),
    ("bert_qop", "bert", "A", "quantize_static QOperator per-channel", static_qop_all),
    ("cnn_qop", "cnn", "A", "quantize_static QOperator per-channel", static_qop_all),
    ("llama_nbits_A", "llama", "A", "MatMulNBitsQuantizer bits 4 block 32 asymmetric", nbits),
    ("llama_nbits_B", "llama", "B", "MatMulNBitsQuantizer bits 4 block 32 asymmetric", nbits),
    ("llama_qdq4_A", "llama", "A", "MatMulNBitsQuantizer QDQ uint4 block 32 asymmetric", nbits_qdq(False)),
    ("llama_qdq4_B", "llama", "B", "MatMulNBitsQuantizer QDQ uint4 block 32 asymmetric", nbits_qdq(False)),
    ("llama_qdq4_sym_A", "llama", "A", "MatMulNBitsQuantizer QDQ int4 block 32 symmetric", nbits_qdq(True)),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[1:])
    unknown = only - {v[0] for v in VARIANTS}
    if unknown:
        sys.exit(f"unknown variants: {sorted(unknown)}")
    old = {}
    if only:
        with open(os.path.join(OUT, "manifest.json")) as f:
            old = {v["name"]: v for v in json.load(f)["variants"]}
    variants = []
    for v in VARIANTS:
        if only and v[0] not in only:
            if v[0] not in old:
                sys.exit(f"{v[0]} is not in the manifest yet: make it too")
            variants.append(old[v[0]])
            continue
        name, model, weights, kind, quantize = v[:5]
        variants.append(make(name, model, weights, kind, quantize, **(v[5] if len(v) > 5 else {})))
    manifest = {
        "description": ("Quantized variants of the bundled models made by ONNX Runtime " + ort.__version__ +
                        "'s quantization tools; regenerate with scripts/models/make_quant_models.py. Paths are "
                        "relative to models/. ort_reference: ONNX Runtime's output of the quantized model "
                        "(CPU, graph optimizations off); float_reference: the float model's framework output."),
        "onnxruntime": ort.__version__,
        "tolerance_note": ("max |a - b| over every element. vs_float = 1.5 * ort_vs_float + 1e-3: reforge may be "
                           "as far from the float model as ORT is, with a margin for a quantization step that "
                           "rounds the other way. vs_ort = max(64 float32 ulps of the largest output, 1e-5): both "
                           "runtimes run the same integer arithmetic on the same codes, so they differ only by "
                           "float accumulation order."),
        "variants": variants,
    }
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    for v in variants:
        print(f"{v['name']:16s} ops={v['ops']} ort_vs_float={v['ort_vs_float']:.4g} tol={v['tolerance']}")


if __name__ == "__main__":
    main()
