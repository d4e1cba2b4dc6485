"""File layout of models/ and the manifest, shared by the export and check scripts.

models/<model>/inputs/<set>/<input>.npy
models/<model>/reference/<weights>/<set>/<output>.npy
models/<model>/checkpoint_<weights>.safetensors
models/<model>/<export>/<weights>/model.onnx      (+ export.json describing how it was made)
models/manifest.json
"""

import json
import os

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS_DIR = os.path.join(REPO, "models")
TOLERANCE = 1e-4  # max abs diff against the framework reference


def model_dir(root, model):
    return os.path.join(root, model)


def export_dir(root, model, export, weights):
    return os.path.join(root, model, export, weights)


def save_npy(path, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, array)


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def check_onnx_self_contained(path):
    """Raises if the model at `path` refers to external data. Needs the onnx package."""
    import onnx

    m = onnx.load(path, load_external_data=False)
    ext = [t.name for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if ext:
        raise RuntimeError("%s: %d initializers use external data (%s...)" % (path, len(ext), ext[0]))
    return m


def build_manifest(root=MODELS_DIR):
    """Scans root for export.json files and writes root/manifest.json. Returns the manifest."""
    from tiny_models import MODELS, SPECS  # noqa: imported late: needs torch

    exports = []
    for model in MODELS:
        mdir = os.path.join(root, model)
        if not os.path.isdir(mdir):
            continue
        spec = SPECS[model]
        for export in sorted(os.listdir(mdir)):
            for weights in ("A", "B"):
                meta_path = os.path.join(mdir, export, weights, "export.json")
                if not os.path.exists(meta_path):
                    continue
                with open(meta_path) as f:
                    meta = json.load(f)
                sets = []
                for s in meta["input_sets"]:
                    sets.append({
                        "name": s,
                        "inputs": {n: "%s/inputs/%s/%s.npy" % (model, s, n) for n in spec["inputs"]},
                        "reference": {n: "%s/reference/%s/%s/%s.npy" % (model, weights, s, n)
                                      for n in spec["outputs"]},
                    })
                    for p in list(sets[-1]["inputs"].values()) + list(sets[-1]["reference"].values()):
                        if not os.path.exists(os.path.join(root, p)):
                            raise RuntimeError("manifest: missing " + p)
                exports.append({
                    "model": model,
                    "export": export,
                    "weights": weights,
                    "path": "%s/%s/%s/model.onnx" % (model, export, weights),
                    "checkpoint": "%s/checkpoint_%s.safetensors" % (model, weights),
                    "exporter": meta["exporter"],
                    "torch_version": meta["torch_version"],
                    "opset": meta["opset"],
                    "dynamic": meta["dynamic"],
                    "constant_folding": meta["constant_folding"],
                    "inputs": spec["inputs"],
                    "outputs": spec["outputs"],
                    "input_sets": sets,
                    "tolerance": {"max_abs_diff": TOLERANCE},
                })
    manifest = {
        "description": "Tiny real exported models with framework (PyTorch eval, float32) "
                       "reference outputs; regenerate with scripts/models/README.md. Paths are "
                       "relative to this folder.",
        "tolerance": {"max_abs_diff": TOLERANCE},
        "exports": exports,
    }
    write_json(os.path.join(root, "manifest.json"), manifest)
    return manifest
