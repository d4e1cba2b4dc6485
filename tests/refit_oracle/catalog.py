"""Every bundled export the oracle draws from: models/manifest.json (llama, gpt2, bert, cnn; each
export family with weights A and B and the family's checkpoints), models/hf/* (real transformers
exports) and models/quant/* (quantized by ONNX Runtime's tools), with their input sets.

A Model pairs an A export with its B export of the same family (same exporter, same structure)
where there is one, and with the checkpoints A and B its ONNX files were exported from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.path.join(ROOT, "models")


@dataclass
class Model:
    id: str  # e.g. "gpt2/dynamo", "hf/bert", "quant/llama_nbits"
    family: str  # the checkpoint family: models of one family share checkpoints
    a: str  # ONNX weights A
    b: Optional[str]  # ONNX weights B, same structure (None: only A exists)
    ckpt_a: Optional[str]
    ckpt_b: Optional[str]
    inputs: Dict[str, str]  # input name -> .npy (one input set)
    size: int = 0  # bytes of the A model: the shrinker prefers small ones
    others: List[str] = field(default_factory=list)  # other exports of B of the same family


def _p(rel: str) -> str:
    return os.path.join(MODELS, rel)


def load() -> Dict[str, Model]:
    out: Dict[str, Model] = {}
    with open(_p("manifest.json")) as f:
        man = json.load(f)
    by: Dict[str, Dict[str, dict]] = {}
    for e in man["exports"]:
        by.setdefault("%s/%s" % (e["model"], e["export"]), {})[e["weights"]] = e
    for mid, ab in sorted(by.items()):
        a, b = ab["A"], ab.get("B")
        out[mid] = Model(
            id=mid,
            family=a["model"],
            a=_p(a["path"]),
            b=_p(b["path"]) if b else None,
            ckpt_a=_p(a["checkpoint"]) if a.get("checkpoint") else None,
            ckpt_b=_p(b["checkpoint"]) if b and b.get("checkpoint") else None,
            inputs={k: _p(v) for k, v in a["input_sets"][0]["inputs"].items()},
        )
    for name in sorted(os.listdir(_p("hf"))):
        d = "hf/" + name
        with open(_p(d + "/export.json")) as f:
            ex = json.load(f)
        out[d] = Model(
            id=d,
            family=d,
            a=_p(d + "/A/model.onnx"),
            b=_p(d + "/B/model.onnx"),
            ckpt_a=_p(d + "/checkpoint_A.safetensors"),
            ckpt_b=_p(d + "/checkpoint_B.safetensors"),
            inputs={k: _p("%s/inputs/%s.npy" % (d, k)) for k in ex["inputs"]},
        )
    with open(_p("quant/manifest.json")) as f:
        qm = json.load(f)
    variants = {v["name"]: v for v in qm["variants"]}
    for name, v in sorted(variants.items()):
        if v["weights"] != "A":
            continue
        base = name[:-2] if name.endswith("_A") else name
        bv = variants.get(base + "_B")
        fam = v["model"]
        # A float checkpoint binds only ONNX Runtime's asymmetric 4-bit weights (docs/refit.md);
        # the others are offered it too, and must refuse it at build.
        out["quant/" + base] = Model(
            id="quant/" + base,
            family=fam,
            a=_p(v["path"]),
            b=_p(bv["path"]) if bv else None,
            ckpt_a=_p("%s/checkpoint_A.safetensors" % fam),
            ckpt_b=_p("%s/checkpoint_B.safetensors" % fam),
            inputs={k: _p(p) for k, p in v["input_sets"][0]["inputs"].items()},
        )
    # the B exports of every other family member: a source from another exporter
    for m in out.values():
        m.size = os.path.getsize(m.a)
        if not m.id.startswith(("hf/", "quant/")):
            m.others = sorted(o.b for o in out.values() if o.family == m.family and o.id != m.id and o.b and not o.id.startswith("quant/"))
    return out
