#!/usr/bin/python3
"""Writes the large benchmark models (issue 5), their inputs and PyTorch references.

Run with Debian's interpreter (PyTorch 1.13, onnx 1.12), not the pyenv python3 first on PATH:

    /usr/bin/python3 scripts/models/bench_models.py [--out build-bench/models] [--models ...]

Models (ONNX opset 17, TorchScript exporter, constant folding on, seeded, no downloads):

  llama_s1, llama_s128  Llama-style decoder (tiny_models.Llama): hidden 1024, 8 layers, 16 heads,
                        4 kv heads (GQA), intermediate 2816, vocab 32000; sequence 1 and 128
  bert                  BERT-base-sized encoder (tiny_models.Bert): hidden 768, 12 layers,
                        12 heads, intermediate 3072, vocab 30522, sequence 128, attention mask
  resnet50              ResNet-50 (bottleneck v1.5, BatchNorm, 224x224, 1000 classes), below

Every export has a dynamic batch axis ("batch") and static other dimensions; inputs exist for
batch 1 and batch 8. The references are PyTorch's fp32 outputs on the batch-1 inputs.

Weights are seeded "fine-tuned-like": tiny_models' initialisation (weight set A) and then every
tensor that A leaves constant (norm scales, biases) gets small seeded noise, so no two
initializers are equal and an exporter or engine cannot merge or special-case them.

Layout of --out (paths in manifest.json are relative to it):

  <model>/model.onnx
  <model>/inputs/b<batch>/<input>.npy
  <model>/reference/b1/<output>.npy
  manifest.json
"""

import argparse
import inspect
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import common  # noqa: E402
import tiny_models as tm  # noqa: E402

OPSET = 17
BATCHES = (1, 8)
REFERENCE_BATCH = 1
DEFAULT_OUT = os.path.join(os.path.dirname(common.MODELS_DIR), "build-bench", "models")
PROTOBUF_LIMIT = 2 ** 31 - 1


# ------------------------------------------------------------------------------------------------
# ResNet-50 (torchvision's layout: stride on the 3x3 conv of each bottleneck, "v1.5")
# ------------------------------------------------------------------------------------------------


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + identity)


class ResNet50(nn.Module):
    def __init__(self, classes=1000, layers=(3, 4, 6, 3)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        stages, cin = [], 64
        for i, (blocks, width) in enumerate(zip(layers, (64, 128, 256, 512))):
            stage = []
            for b in range(blocks):
                stage.append(Bottleneck(cin, width, 2 if (b == 0 and i > 0) else 1))
                cin = width * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(cin, classes)

    def forward(self, pixel_values):
        x = F.relu(self.bn1(self.conv1(pixel_values)))
        x = F.max_pool2d(x, 3, stride=2, padding=1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


# ------------------------------------------------------------------------------------------------
# Specs
# ------------------------------------------------------------------------------------------------

LLAMA = dict(vocab=32000, hidden=1024, layers=8, heads=16, kv_heads=4, intermediate=2816)
BERT = dict(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512)


def llama_inputs(seq):
    def make(batch, rng):
        return {"input_ids": rng.randint(0, LLAMA["vocab"], size=(batch, seq)).astype(np.int64)}
    return make


def bert_inputs(seq):
    def make(batch, rng):
        ids = rng.randint(0, BERT["vocab"], size=(batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        # Padded sequences, as a real batch has: row r keeps seq - 12*r tokens (row 0 is full;
        # at batch 1 the mask is all ones except that the mask input is still read).
        for r in range(batch):
            mask[r, seq - 12 * r:] = 0
        return {"input_ids": ids, "attention_mask": mask}
    return make


def image_inputs(batch, rng):
    return {"pixel_values": rng.randn(batch, 3, 224, 224).astype(np.float32)}


SPECS = {
    "llama_s1": {"build": lambda: tm.Llama(**LLAMA), "seed": 2001, "seq": 1,
                 "inputs": ["input_ids"], "outputs": ["logits"], "make_inputs": llama_inputs(1)},
    "llama_s128": {"build": lambda: tm.Llama(**LLAMA), "seed": 2001, "seq": 128,
                   "inputs": ["input_ids"], "outputs": ["logits"], "make_inputs": llama_inputs(128)},
    "bert": {"build": lambda: tm.Bert(**BERT), "seed": 2003, "seq": 128,
             "inputs": ["input_ids", "attention_mask"],
             "outputs": ["last_hidden_state", "pooler_output"], "make_inputs": bert_inputs(128)},
    "resnet50": {"build": ResNet50, "seed": 2004, "seq": None,
                 "inputs": ["pixel_values"], "outputs": ["logits"], "make_inputs": image_inputs},
}
MODELS = list(SPECS)


def build_model(name):
    spec = SPECS[name]
    torch.manual_seed(0)
    model = spec["build"]()
    tm.init_weights_a(model, spec["seed"])
    g = torch.Generator().manual_seed(spec["seed"] + 500)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):  # He init: keeps ReLU nets' activations O(1)
                m.weight.copy_(torch.randn(m.weight.shape, generator=g)
                               * (2.0 / m.weight[0].numel()) ** 0.5)
        for pname, t in model.state_dict().items():
            if t.dtype != torch.float32 or "running_" in pname:
                continue
            if pname.endswith("weight") and t.dim() == 1:  # norm scales (all ones in set A)
                t.mul_(1.0 + 0.1 * torch.randn(t.shape, generator=g))
            elif pname.endswith("bias"):  # all zeros in set A
                t.add_(0.02 * torch.randn(t.shape, generator=g))
        for m in model.modules():
            if isinstance(m, Bottleneck):  # damped residual branches: logits stay O(1..10)
                m.bn3.weight.mul_(0.2)
    return model.eval()


def export(model, spec, example, path):
    args = tuple(torch.from_numpy(example[n].copy()) for n in spec["inputs"])
    axes = {n: {0: "batch"} for n in spec["inputs"] + spec["outputs"]}
    tmp = path + ".tmp"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Newer PyTorch defaults to its dynamo exporter; these models are the TorchScript one's.
        legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
        torch.onnx.export(model, args, tmp, opset_version=OPSET, do_constant_folding=True,
                          input_names=spec["inputs"], output_names=spec["outputs"],
                          dynamic_axes=axes, **legacy)
    size = os.path.getsize(tmp)
    if size > PROTOBUF_LIMIT:
        os.remove(tmp)
        raise RuntimeError("%s: %d bytes exceeds protobuf's 2 GB limit" % (path, size))
    os.replace(tmp, path)
    return size


def make_one(name, root, check):
    spec = SPECS[name]
    t0 = time.time()
    model = build_model(name)
    params = sum(p.numel() for p in model.state_dict().values() if p.dtype == torch.float32)
    rng = np.random.RandomState(spec["seed"])
    entry = {"name": name, "path": name + "/model.onnx", "seq": spec["seq"],
             "batches": list(BATCHES), "dynamic_axes": {"batch": 0},
             "inputs": {}, "outputs": spec["outputs"], "reference": {}, "float_params": params}
    feeds = {}
    for b in BATCHES:
        feeds[b] = spec["make_inputs"](b, rng)
        entry["inputs"][str(b)] = {}
        for n in spec["inputs"]:
            rel = "%s/inputs/b%d/%s.npy" % (name, b, n)
            common.save_npy(os.path.join(root, rel), feeds[b][n])
            entry["inputs"][str(b)][n] = rel
    with torch.no_grad():
        out = model(*[torch.from_numpy(feeds[REFERENCE_BATCH][n].copy()) for n in spec["inputs"]])
    out = (out,) if isinstance(out, torch.Tensor) else out
    entry["reference"][str(REFERENCE_BATCH)] = {}
    for oname, o in zip(spec["outputs"], out):
        rel = "%s/reference/b%d/%s.npy" % (name, REFERENCE_BATCH, oname)
        common.save_npy(os.path.join(root, rel), o.numpy().astype(np.float32))
        entry["reference"][str(REFERENCE_BATCH)][oname] = rel
    # Traced at batch 8 so nothing specialises to batch 1.
    entry["onnx_bytes"] = export(model, spec, feeds[BATCHES[-1]], os.path.join(root, entry["path"]))
    if check:
        common.check_onnx_self_contained(os.path.join(root, entry["path"]))
    print("  %-10s %6.1f M params, %5.0f MB onnx, %.0f s" % (
        name, params / 1e6, entry["onnx_bytes"] / 1e6, time.time() - t0), flush=True)
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output folder (default %(default)s)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of "
                    + ",".join(MODELS))
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        sys.exit("bench_models: unknown model(s) %s; known: %s" % (unknown, ", ".join(MODELS)))
    if not torch.__version__.startswith("1.13"):
        print("warning: expected PyTorch 1.13 (/usr/bin/python3), running %s" % torch.__version__)
    try:
        import onnx  # noqa: F401
        check = True
    except ImportError:
        check = False
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    manifest_path = os.path.join(args.out, "manifest.json")
    entries = {}
    if os.path.exists(manifest_path):  # keep entries of models not regenerated this time
        with open(manifest_path) as f:
            entries = {e["name"]: e for e in json.load(f).get("models", [])}
    print("writing %s to %s" % (", ".join(names), args.out), flush=True)
    for n in names:
        entries[n] = make_one(n, args.out, check)
        common.write_json(manifest_path, {
            "generator": "scripts/models/bench_models.py", "torch": torch.__version__,
            "opset": OPSET, "reference_batch": REFERENCE_BATCH,
            "models": [entries[m] for m in MODELS if m in entries]})
    print("wrote %s" % manifest_path)


if __name__ == "__main__":
    main()
