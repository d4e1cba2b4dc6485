"""Draws one oracle case from a seed: model x build options x source x refit path.

A case is plain JSON: `scripts/oracle.sh --case '<json>'` replays it exactly. Its generator (the
name counts are kept under) is the source's kind.
"""

from __future__ import annotations

import random
from typing import Dict, List

from . import sources
from .catalog import Model

ONNX_KINDS = ["A", "B", "other", "onnx-delta", "onnx-partial", "onnx-nan", "onnx-transpose", "onnx-dtype", "onnx-shape", "onnx-rename"]
CKPT_KINDS = ["ckpt", "ckpt-other", "ckpt-delta", "ckpt-partial", "ckpt-rename", "ckpt-transpose", "ckpt-dtype", "ckpt-shape", "ckpt-nan", "ckpt-dupkey", "ckpt-truncate", "ckpt-insert8"]
DICT_KINDS = ["dict-onnx", "dict-onnx-incr", "dict-ckpt", "dict-ckpt-delta", "dict-ckpt-partial"]


def generator(case: dict) -> str:
    return case["source"]["k"]


def _source(r: random.Random, m: Model, bound: bool) -> dict:
    kinds: List[str] = list(ONNX_KINDS) + ["dict-onnx", "dict-onnx-incr"]
    if not m.b:
        kinds = [k for k in kinds if k not in ("B", "other")]
    if not m.others:
        kinds = [k for k in kinds if k != "other"]
    if m.ckpt_b:
        # a checkpoint source is drawn for unbound plans too: it must then be refused
        kinds += CKPT_KINDS if bound else ["ckpt", "ckpt-delta", "ckpt-other"]
        if bound:
            kinds += ["dict-ckpt", "dict-ckpt-delta", "dict-ckpt-partial"]
    k = r.choice(kinds)
    s: Dict[str, object] = {"k": k}
    if k == "other":
        s["i"] = r.randrange(8)
    if k == "ckpt":
        s["w"] = r.choice(["A", "B", "B"])
    if k == "ckpt-other":
        s["i"] = r.randrange(16)
    if k.startswith(("onnx-", "ckpt-", "dict-ckpt-")) and k not in ("ckpt-other", "ckpt-truncate", "ckpt-insert8"):
        s["t"] = r.randrange(64)
    if k.endswith("delta"):
        s["d"] = r.choice([1e-3, -0.25, 2.0 ** -20, 1.0])
        s["e"] = r.randrange(1 << 16)
    if k.endswith("nan"):
        s["v"] = r.choice(["nan", "inf", "-inf"])
        s["e"] = r.randrange(1 << 16)
    if k.endswith("dtype"):
        s["dt"] = r.choice(["float64", "float16"])
    if k == "ckpt-truncate":
        s["f"] = r.choice([0.0, 0.01, 0.5, 0.999])
    if k == "ckpt-insert8":
        s["f"] = r.choice([0.0, 0.3, 0.7, 1.0])
    if k.startswith("dict-onnx"):
        s["mut"] = r.choice(["none", "none", "none", "dtype", "shape", "nan", "partial", "extra"])
        s["t"] = r.randrange(64)
        if s["mut"] == "dtype":
            s["dt"] = r.choice(["float64", "float16"])
        if k == "dict-onnx-incr":
            s["every"] = r.choice([1, 2, 5])
    return s


def _build(r: random.Random, m: Model) -> dict:
    b: Dict[str, object] = {}
    b["mode"] = r.choice(["refit"] * 6 + ["identical"] * 2 + ["individual"] * 4 + ["baked"])
    if b["mode"] == "individual":
        pat = r.choice(["all", "some", "some", "none"])
        b["pat"] = pat
        names = sources.float_names(m.a)
        if pat == "all":
            b["patterns"] = ["*"]
        elif pat == "none":
            b["patterns"] = ["no.such.weight.*"]
        else:
            n = names[r.randrange(len(names))]
            # a module prefix (several sources) or one exact name
            b["patterns"] = [n.rsplit(".", 1)[0] + ".*"] if "." in n and r.random() < 0.6 else [n]
    if b["mode"] != "baked" and r.random() < 0.3:
        b["strip"] = True
    if r.random() < 0.35 and not m.id.startswith("quant/"):
        b["precision"] = r.choice(["bf16", "fp16", "int8", "int4"])
        if b["precision"] == "int4":
            b["block"] = r.choice([16, 32, 32, 64])
    if m.ckpt_a and b["mode"] != "baked" and r.random() < 0.3:
        b["ckpt"] = r.choice(["A", "A", "A", "A-partial", "B", "other"])
        if b["ckpt"] in ("A-partial", "other"):
            b["ckpt_t"] = r.randrange(64)
    if r.random() < 0.08 and m.b:
        # a float initializer of A and B of the same name, declared structure
        a_names = set(sources.float_names(m.a)) & set(sources.float_names(m.b))
        if a_names:
            b["literals"] = [sorted(a_names)[r.randrange(len(a_names))]]
    return b


def _path(r: random.Random, source: dict) -> dict:
    k = source["k"]
    if k.startswith("dict"):
        return {"via": "py"}
    p: Dict[str, object] = {"via": "cli" if r.random() < 0.3 else "py"}
    if k in ONNX_KINDS:
        p["mode"] = r.choice(["fast", "fast", "slow", "verify"])
    if p["via"] == "cli":
        p["out"] = r.random() < 0.7
    return p


def draw(seed: int, models: Dict[str, Model]) -> dict:
    r = random.Random(seed)
    ids = sorted(models)
    m = models[ids[r.randrange(len(ids))]]
    b = _build(r, m)
    s = _source(r, m, bool(b.get("ckpt")))
    return {"seed": seed, "model": m.id, "build": b, "source": s, "path": _path(r, s)}
