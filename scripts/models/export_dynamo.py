#!/usr/bin/env python3
"""Dynamo (torch.export-based) ONNX exports with current PyTorch, opset 18, dynamic shapes.

Needs PyTorch 2.x with onnx and onnxscript (the GPU machine's python3 has them). Reads the
checkpoints that export_torch113.py wrote, so both exporters see bit-identical weights:
    python3 scripts/models/export_dynamo.py [--models-dir models] [--tar out.tar]

For each model and weight set: checks that eager PyTorch 2.x reproduces the stored reference,
exports with torch.onnx.export(..., dynamo=True), saves with ONNXProgram.save and checks the
file is self-contained (no external data). Writes models/<model>/dynamo/<w>/{model.onnx,
export.json}, refreshes the manifest, and with --tar packs the dynamo folders into one tar
(paths relative to models/) so a remote run returns a single file.
"""

import argparse
import json
import os
import sys
import tarfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import common  # noqa: E402
from tiny_models import MODELS, SPECS, WEIGHT_SETS, load_model, run_reference  # noqa: E402

OPSET = 18
EXPORT = "dynamo"


def dynamic_shapes_for(name, style):
    """Per forward-argument dynamic shapes: batch (and seq) dynamic."""
    from torch.export import Dim

    spec = SPECS[name]
    if style == "dim":
        batch = Dim("batch", min=1, max=64)
        seq = Dim("seq", min=1, max=16)
    elif style == "auto":
        batch = seq = Dim.AUTO
    else:
        raise ValueError(style)
    shapes = {}
    for n in spec["inputs"]:
        axes = spec["dynamic_axes"][n]
        shapes[n] = {a: (batch if axes[a] == "batch" else seq) for a in axes}
    return shapes


def export(model, name, example, path, log):
    spec = SPECS[name]
    args = tuple(torch.from_numpy(example[n].copy()) for n in spec["inputs"])
    attempts = [
        ("dynamic_shapes=Dim", dict(dynamic_shapes=dynamic_shapes_for(name, "dim"))),
        ("dynamic_shapes=Dim.AUTO", dict(dynamic_shapes=dynamic_shapes_for(name, "auto"))),
        ("dynamic_axes", dict(dynamic_axes=spec["dynamic_axes"])),
    ]
    import inspect

    accepted = set(inspect.signature(torch.onnx.export).parameters)
    last = None
    for label, kw in attempts:
        kw = dict(kw, dynamo=True, opset_version=OPSET, input_names=spec["inputs"],
                  output_names=spec["outputs"], fallback=False)
        dropped = sorted(k for k in kw if k not in accepted)
        if dropped:
            log.append("torch.onnx.export does not take %s; dropped" % dropped)
        kw = {k: v for k, v in kw.items() if k in accepted}
        try:
            t0 = time.time()
            program = torch.onnx.export(model, args, **kw)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            program.save(path)
            log.append("%s: exported with %s in %.1fs" % (path, label, time.time() - t0))
            return label
        except Exception as ex:
            last = ex
            log.append("%s: %s failed: %s" % (path, label, traceback.format_exc()[-3000:]))
    raise RuntimeError("all export attempts failed for %s: %s" % (path, last))


def check_export(path, name):
    import onnx

    spec = SPECS[name]
    folder = os.path.dirname(path)
    extra = sorted(f for f in os.listdir(folder) if f not in ("model.onnx", "export.json"))
    m = onnx.load(path, load_external_data=False)
    ext = [t.name for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    onnx.checker.check_model(path)
    inits = {t.name for t in m.graph.initializer}
    got_in = [i.name for i in m.graph.input if i.name not in inits]
    got_out = [o.name for o in m.graph.output]
    opsets = {o.domain: o.version for o in m.opset_import}
    if got_in != spec["inputs"] or got_out != spec["outputs"]:
        raise RuntimeError("%s: graph inputs %s outputs %s, expected %s %s"
                           % (path, got_in, got_out, spec["inputs"], spec["outputs"]))
    return {"external_initializers": len(ext), "extra_files": extra, "ir_version": m.ir_version,
            "opsets": opsets, "nodes": len(m.graph.node), "initializers": len(m.graph.initializer),
            "bytes": os.path.getsize(path)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", default=common.MODELS_DIR)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tar", default="")
    ap.add_argument("--report", default="")
    args = ap.parse_args()
    root = args.models_dir
    import onnx
    try:
        import onnxscript
    except ImportError:  # torch.onnx.export(dynamo=True) will say so itself
        onnxscript = None

    report = {"torch": torch.__version__, "onnx": onnx.__version__,
              "onnxscript": getattr(onnxscript, "__version__", "?"), "log": [], "exports": {},
              "eager_vs_reference": {}}
    log = report["log"]
    done = []
    for name in args.models.split(","):
        spec = SPECS[name]
        set_names = list(spec["input_sets"]())
        sets = {s: {n: np.load(os.path.join(root, name, "inputs", s, n + ".npy"))
                    for n in spec["inputs"]} for s in set_names}
        for w in WEIGHT_SETS:
            key = "%s/%s" % (name, w)
            try:
                model = load_model(name, os.path.join(root, name, "checkpoint_%s.safetensors" % w))
                worst = 0.0
                for s in set_names:
                    for out_name, got in zip(spec["outputs"], run_reference(model, name, sets[s])):
                        ref = np.load(os.path.join(root, name, "reference", w, s, out_name + ".npy"))
                        worst = max(worst, float(np.max(np.abs(got - ref))))
                report["eager_vs_reference"][key] = worst
                d = common.export_dir(root, name, EXPORT, w)
                path = os.path.join(d, "model.onnx")
                label = export(model, name, sets[set_names[1]], path, log)
                info = check_export(path, name)
                info["dynamic_via"] = label
                report["exports"][key] = info
                common.write_json(os.path.join(d, "export.json"), {
                    "exporter": "torch.onnx.export(dynamo=True)",
                    "torch_version": torch.__version__,
                    "opset": OPSET,
                    "dynamic": True,
                    "constant_folding": True,
                    "input_sets": set_names,
                })
                done.append(d)
                print("%s: ok %s" % (key, json.dumps(info)), flush=True)
            except Exception:
                report["exports"][key] = {"error": traceback.format_exc()[-4000:]}
                print("%s: FAILED\n%s" % (key, traceback.format_exc()), flush=True)
    common.build_manifest(root)
    if args.tar:
        with tarfile.open(args.tar, "w") as tf:
            for d in done:
                for f in sorted(os.listdir(d)):
                    full = os.path.join(d, f)
                    tf.add(full, arcname=os.path.relpath(full, root))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "log"}, indent=1)[:6000])


if __name__ == "__main__":
    main()
