#!/usr/bin/python3
"""Writes checkpoints, inputs, references and the PyTorch 1.13 (TorchScript) exports.

Run with Debian's interpreter, which has python3-torch 1.13 (see README.md):
    /usr/bin/python3 scripts/models/export_torch113.py [--models llama,gpt2,bert,cnn]

For each model and weight set A/B: the safetensors checkpoint, the reference outputs for every
input set, and four exports at opset 17: do_constant_folding True/False x static/dynamic axes.
Static exports are traced with (and only valid for) the first input set. Finally writes
models/manifest.json from every export.json found (dynamo exports included, if unpacked).
"""

import argparse
import io
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import common  # noqa: E402
from tiny_models import (MODELS, SPECS, WEIGHT_SETS, build_model, run_reference,  # noqa: E402
                         state_dict_numpy, write_safetensors)

VARIANTS = [("torch113_fold_static", True, False), ("torch113_fold_dynamic", True, True),
            ("torch113_nofold_static", False, False), ("torch113_nofold_dynamic", False, True)]
OPSET = 17


def export_one(model, name, inputs, path, fold, dynamic):
    spec = SPECS[name]
    args = tuple(torch.from_numpy(inputs[n].copy()) for n in spec["inputs"])
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, buf, opset_version=OPSET, do_constant_folding=fold,
                          input_names=spec["inputs"], output_names=spec["outputs"],
                          dynamic_axes=spec["dynamic_axes"] if dynamic else None)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", default=common.MODELS_DIR)
    args = ap.parse_args()
    root = args.out
    if not torch.__version__.startswith("1.13"):
        print("warning: expected PyTorch 1.13, running %s" % torch.__version__)
    try:
        import onnx
    except ImportError:
        onnx = None

    for name in args.models.split(","):
        spec = SPECS[name]
        sets = spec["input_sets"]()
        set_names = list(sets)
        for s, inputs in sets.items():
            for n, a in inputs.items():
                common.save_npy(os.path.join(root, name, "inputs", s, n + ".npy"), a)
        for w in WEIGHT_SETS:
            model = build_model(name, w)
            write_safetensors(os.path.join(root, name, "checkpoint_%s.safetensors" % w),
                              state_dict_numpy(model),
                              {"model": name, "weights": w, "format": "pt"})
            for s, inputs in sets.items():
                for out_name, a in zip(spec["outputs"], run_reference(model, name, inputs)):
                    common.save_npy(os.path.join(root, name, "reference", w, s, out_name + ".npy"), a)
            for export, fold, dynamic in VARIANTS:
                d = common.export_dir(root, name, export, w)
                example = sets[set_names[1]] if dynamic else sets[set_names[0]]
                path = os.path.join(d, "model.onnx")
                export_one(model, name, example, path, fold, dynamic)
                if onnx is not None:
                    m = common.check_onnx_self_contained(path)
                    onnx.checker.check_model(m)
                    got_in = [i.name for i in m.graph.input
                              if i.name not in {t.name for t in m.graph.initializer}]
                    got_out = [o.name for o in m.graph.output]
                    assert got_in == spec["inputs"], (path, got_in)
                    assert got_out == spec["outputs"], (path, got_out)
                common.write_json(os.path.join(d, "export.json"), {
                    "exporter": "torch.onnx.export (TorchScript)",
                    "torch_version": torch.__version__,
                    "opset": OPSET,
                    "dynamic": dynamic,
                    "constant_folding": fold,
                    "input_sets": set_names if dynamic else [set_names[0]],
                })
                print("%-6s %-24s %s %7.1f KB" % (name, export, w, os.path.getsize(path) / 1024))
    m = common.build_manifest(root)
    print("manifest: %d exports" % len(m["exports"]))


if __name__ == "__main__":
    main()
