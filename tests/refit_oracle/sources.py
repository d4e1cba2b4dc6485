"""Refit sources the oracle makes, each with the weights it describes.

A source spec is a small dict ({"k": kind, ...}) drawn from the seed; `materialize` turns it into
a file (ONNX, safetensors) or a dict of arrays, plus `described`: the path of an ONNX model holding
exactly the weights the source describes, made here without the code under test, or None when the
source describes no complete, valid set of weights (NaN, malformed file, another model's
checkpoint), in which case the only correct answer is a refusal. The rule per kind:

* ONNX files (A, B, another export of B, B with one initializer changed, deleted, renamed,
  transposed, retyped, reshaped, made NaN/Inf): the described model is the file itself when it
  holds only finite values; an invalid one (a deleted initializer) fails the reference build,
  so only a refusal is correct. NaN/Inf: None (below).
* checkpoints: checkpoint A describes A's ONNX, B B's. A tensor changed by a delta (or a square
  one transposed, or retyped to float16) describes B's ONNX with each initializer element made
  from the tensor changed to the new value of the element it is made from; how initializers are
  made from it (identity, transpose, a slice such as the position table cut to the sequence
  length, an expand such as ViT's cls_token, a block of a concatenation) is found by value in
  relations.py and must hold for both A's and B's checkpoint and export. A changed element the
  model does not use (a position past the slice) describes B unchanged. Where no relation can
  be established: every initializer that equals the tensor, or its transpose, changed the same
  way, but only where that is all the tensor derives (its first row appears in no other
  initializer); otherwise None. A tensor with a bit-identical twin in checkpoint A (a tied
  parameter saved under two names, as T5's shared.weight and encoder.embed_tokens.weight; not
  all values equal) changed while its twin is not: None, since the two copies of one parameter
  disagree. A lossless change (float64, flattened) describes B. A deleted or renamed tensor
  describes B (a refit may succeed only where the tensor was never used). Another family's
  checkpoint, a duplicate key, a truncated file, 8 bytes inserted in the data section: None.
* NaN/Inf, in an ONNX initializer or a checkpoint tensor, anywhere in it: None, even in an
  element the model never reads (a row of the position table past the slice, an unused bucket):
  a refit reads whole tensors, and the library refuses any it reads that holds NaN/Inf.
* dicts by ONNX name: A's float initializer names with B's values where B has the same name and
  shape: describes A's ONNX with those values. Incremental: A with the given subset replaced.
* dicts by checkpoint name: as the checkpoint file.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import onnxproto, relations, safet
from .catalog import Model

_model_cache: Dict[str, Dict[str, np.ndarray]] = {}


def onnx_arrays(path: str) -> Dict[str, np.ndarray]:
    if path not in _model_cache:
        _model_cache[path] = onnxproto.Model.load(path).arrays()
    return _model_cache[path]


def float_names(path: str) -> List[str]:
    """Float initializers with more than one element, by name: what a mutation may pick."""
    return sorted(n for n, a in onnx_arrays(path).items() if a.dtype == np.float32 and a.size > 1)


def ckpt_names(path: str) -> List[str]:
    return sorted(n for n, a in safet.read(path).items() if a.dtype == np.float32 and a.size > 1)


@dataclass
class Source:
    kind: str  # "onnx", "safetensors", "dict"
    path: Optional[str] = None
    tensors: Optional[Dict[str, np.ndarray]] = None
    names: str = "onnx"  # dict keys: "onnx" or "checkpoint"
    incremental: bool = False
    described: Optional[str] = None  # ONNX of the described weights; None: must be refused
    # a changed float checkpoint tensor of a quantized model describes weights only the quantizer
    # could derive: an accepted refit is counted, not judged
    unverifiable: bool = False
    note: str = ""


def _store(cache: str, tag: str, data: bytes, ext: str) -> str:
    path = os.path.join(cache, "%s-%s.%s" % (tag, hashlib.blake2b(data, digest_size=8).hexdigest(), ext))
    if not os.path.exists(path):
        tmp = path + ".tmp%d" % os.getpid()
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return path


def _pick(names: List[str], i: int) -> str:
    return names[i % len(names)]


def _mutated_onnx(base: str, name: str, value: Optional[np.ndarray], cache: str, tag: str, rename: str = "") -> str:
    m = onnxproto.Model.load(base)
    if rename:
        onnxproto.rename(m, name, rename)
    elif value is None:
        m.delete(name)
    else:
        m.set(name, value)
    return _store(cache, tag, m.to_bytes(), "onnx")


def _finite(a: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(a))) if a.dtype.kind == "f" else True


def _derive(base: Optional[str], old: np.ndarray, new: np.ndarray, cache: str, tag: str) -> Optional[str]:
    """B's ONNX with every initializer equal to `old` (or its 2-D transpose) replaced by `new` (or
    its transpose); None when `old` also shows up inside another initializer (a slice, a
    concatenation) or nowhere: then its effect cannot be derived here."""
    if base is None or old.ndim == 0:
        return None
    arrays = onnx_arrays(base)
    hits: Dict[str, np.ndarray] = {}
    row = np.ascontiguousarray(old.reshape(old.shape[0], -1)[0] if old.ndim > 1 else old[: max(2, old.size // 2)])
    rowt = np.ascontiguousarray(old.T.reshape(old.shape[-1], -1)[0]) if old.ndim == 2 else row
    for n, a in arrays.items():
        if a.dtype != old.dtype:
            continue
        if a.shape == old.shape and a.tobytes() == old.tobytes():
            hits[n] = new
        elif old.ndim == 2 and a.shape == old.T.shape and a.tobytes() == np.ascontiguousarray(old.T).tobytes():
            hits[n] = np.ascontiguousarray(new.T)
        elif row.tobytes() in a.tobytes() or rowt.tobytes() in a.tobytes():
            return None  # part of something bigger
    if not hits:
        return None
    m = onnxproto.Model.load(base)
    for n, v in hits.items():
        m.set(n, v.astype(np.float32))
    return _store(cache, tag, m.to_bytes(), "onnx")


_relations: Dict[Tuple[str, str], Optional[relations.Relation]] = {}


def _twin(model: Model, name: str) -> Optional[str]:
    """Another tensor of checkpoint A bit-identical to `name` (a tied parameter saved twice, as
    T5's shared.weight and encoder.embed_tokens.weight), where its values are not all equal
    (equal values say nothing of identity)."""
    t = safet.read(model.ckpt_a) if model.ckpt_a else {}
    a = t.get(name)
    if a is None or a.size < 2 or np.all(a == a.reshape(-1)[0]):
        return None
    for n, x in sorted(t.items()):
        if n != name and x.dtype == a.dtype and x.shape == a.shape and x.tobytes() == a.tobytes():
            return n
    return None


def _derive_ckpt(model: Model, name: str, old: np.ndarray, new: np.ndarray, cache: str, tag: str) -> Optional[str]:
    """B's ONNX as checkpoint B with tensor `name` changed from `old` to `new` (float32) describes
    it: each initializer element made from the tensor (relations.py: identity, transpose, slice,
    expand, concatenation, found by value in both export pairs) takes the new value of its
    element; B unchanged when no changed element is used. Where no relation can be established,
    today's rule (_derive)."""
    key = (model.id, name)
    if key not in _relations:
        ca = safet.read(model.ckpt_a) if model.ckpt_a else {}
        cb = safet.read(model.ckpt_b) if model.ckpt_b else {}
        rel = None
        if model.b and name in ca and name in cb:
            rel = relations.find(ca[name], onnx_arrays(model.a), cb[name], onnx_arrays(model.b))
        _relations[key] = rel
    rel = _relations[key]
    if rel is None or model.b is None:
        return _derive(model.b, old, new, cache, tag)
    changed = relations.apply(rel, new, onnx_arrays(model.b))
    if not changed:
        return model.b
    m = onnxproto.Model.load(model.b)
    for n, v in changed.items():
        m.set(n, v)
    return _store(cache, tag, m.to_bytes(), "onnx")


def _described_change(model: Model, name: str, old: np.ndarray, new: np.ndarray, cache: str, tag: str) -> Optional[str]:
    """What checkpoint B with `name` changed to `new` describes. One copy of a tied parameter
    changed while its twin keeps the old values describes no valid weights: only a refusal is
    correct (the library refuses a bound tensor whose build-time twin now differs)."""
    new32 = new.astype(np.float32)
    if new32.tobytes() != old.astype(np.float32).tobytes() and _twin(model, name):
        return None
    return _derive_ckpt(model, name, old, new32, cache, tag)


def materialize(model: Model, spec: dict, cache: str, all_models: Dict[str, Model]) -> Source:
    k = spec["k"]
    tag = hashlib.blake2b(json.dumps([model.id, spec], sort_keys=True).encode(), digest_size=6).hexdigest()
    base = model.b or model.a  # the "B" a mutation starts from
    if k == "A":
        return Source("onnx", path=model.a, described=model.a)
    if k == "B":
        return Source("onnx", path=base, described=base)
    if k == "other":
        p = _pick(model.others, spec["i"])
        return Source("onnx", path=p, described=base if model.b else None, note=os.path.relpath(p))
    if k.startswith("onnx-"):
        names = float_names(base)
        name = _pick(names, spec["t"])
        a = onnx_arrays(base)[name]
        if k == "onnx-delta":
            v = a.copy()
            v.reshape(-1)[spec.get("e", 0) % v.size] += np.float32(spec["d"])
            p = _mutated_onnx(base, name, v, cache, tag)
            return Source("onnx", path=p, described=p, note=name)
        if k == "onnx-partial":
            p = _mutated_onnx(base, name, None, cache, tag)
            return Source("onnx", path=p, described=p, note=name)
        if k == "onnx-nan":
            v = a.copy()
            v.reshape(-1)[spec.get("e", 0) % v.size] = np.float32(spec["v"])
            return Source("onnx", path=_mutated_onnx(base, name, v, cache, tag), described=None, note=name)
        if k == "onnx-transpose":
            v = np.ascontiguousarray(a.reshape(a.shape[0], -1).T) if a.ndim >= 2 else a[::-1].copy()
            p = _mutated_onnx(base, name, v, cache, tag)
            return Source("onnx", path=p, described=p, note=name)
        if k == "onnx-dtype":
            v = a.astype(spec["dt"])
            p = _mutated_onnx(base, name, v, cache, tag)
            return Source("onnx", path=p, described=p, note=name)
        if k == "onnx-shape":
            v = a.reshape(-1) if a.ndim != 1 else a.reshape(1, -1)
            p = _mutated_onnx(base, name, v, cache, tag)
            return Source("onnx", path=p, described=p, note=name)
        if k == "onnx-rename":
            p = _mutated_onnx(base, name, None, cache, tag, rename=name + ".renamed")
            return Source("onnx", path=p, described=p, note=name)
        raise ValueError("unknown source kind " + k)
    if k == "ckpt":
        w = spec["w"]
        path = model.ckpt_a if w == "A" else model.ckpt_b
        return Source("safetensors", path=path, described=model.a if w == "A" else model.b)
    if k == "ckpt-other":
        # Another family's checkpoint describes no weights of this model only when it holds none of
        # this model's checkpoint tensors by name, dtype and shape: one that does (two tiny Llamas
        # both have an lm_head.weight [128, 64]) is, by its content, a checkpoint of that tensor,
        # which a plan refitting only it takes as such (docs/refit.md: a checkpoint of only the
        # refittable tensors is accepted, other tensors reported unused).
        own = {(n, a.dtype.str, a.shape) for c in (model.ckpt_a, model.ckpt_b) if c for n, a in safet.read(c).items()}
        others = sorted({m.ckpt_b for m in all_models.values() if m.family != model.family and m.ckpt_b})
        others = [o for o in others if not own & {(n, a.dtype.str, a.shape) for n, a in safet.read(o).items()}]
        p = _pick(others, spec["i"])
        return Source("safetensors", path=p, described=None, note=os.path.relpath(p))
    if k.startswith("ckpt-") or k.startswith("dict-ckpt"):
        t = safet.read(model.ckpt_b)  # type: ignore[arg-type]
        entries = list(t.items())
        names = ckpt_names(model.ckpt_b)  # type: ignore[arg-type]
        name = _pick(names, spec.get("t", 0))
        a = t[name]
        described: Optional[str] = model.b
        mut = k.split("-", 2)[-1] if k.startswith("dict-ckpt-") else k[5:]
        if k == "dict-ckpt":
            mut = "none"
        raw: Optional[bytes] = None
        if mut == "none":
            pass
        elif mut == "delta":
            v = a.copy()
            v.reshape(-1)[spec.get("e", 0) % v.size] += np.float32(spec["d"])
            t[name] = v
            described = _described_change(model, name, a, v, cache, tag)
        elif mut == "partial":
            del t[name]
        elif mut == "rename":
            t = {(n + ".renamed" if n == name else n): x for n, x in t.items()}
        elif mut == "transpose":
            if a.ndim == 2 and a.shape[0] == a.shape[1]:
                t[name] = np.ascontiguousarray(a.T)
                described = _described_change(model, name, a, t[name], cache, tag)
            else:
                t[name] = np.ascontiguousarray(a.reshape(a.shape[0], -1).T)
        elif mut == "dtype":
            t[name] = a.astype(spec["dt"])
            if spec["dt"] != "float64":
                described = _described_change(model, name, a, t[name], cache, tag)
        elif mut == "shape":
            t[name] = a.reshape(-1) if a.ndim != 1 else a.reshape(1, -1)
        elif mut == "nan":
            v = a.copy()
            v.reshape(-1)[spec.get("e", 0) % v.size] = np.float32(spec["v"])
            t[name] = v
            described = None
        elif mut == "dupkey":
            v = a.copy()
            v.reshape(-1)[0] += np.float32(0.5)
            entries = [(n, x) for n, x in t.items()] + [(name, v)]
            raw = safet.encode(entries)
            described = None
        elif mut == "truncate":
            full = safet.encode(list(t.items()))
            raw = full[: max(9, int(len(full) * spec["f"]))]
            described = None
        elif mut == "insert8":
            full = safet.encode(list(t.items()))
            import struct

            (hn,) = struct.unpack("<Q", full[:8])
            at = 8 + hn + int((len(full) - 8 - hn) * spec["f"])
            raw = full[:at] + b"\x3f\x80\x00\x00\x3f\x80\x00\x00" + full[at:]
            described = None
        else:
            raise ValueError("unknown source kind " + k)
        unverifiable = described is None and model.id.startswith("quant/") and mut in ("delta", "transpose", "dtype")
        if k.startswith("dict-ckpt"):
            return Source("dict", tensors=t, names="checkpoint", described=described, note=name, unverifiable=unverifiable)
        if raw is None:
            raw = safet.encode(list(t.items()))
        return Source("safetensors", path=_store(cache, tag, raw, "safetensors"), described=described, note=name, unverifiable=unverifiable)
    if k.startswith("dict-onnx"):
        a_arr = onnx_arrays(model.a)
        b_arr = onnx_arrays(base)
        names = sorted(n for n, a in a_arr.items() if a.dtype == np.float32)  # scalars too: they are sources
        vals = {n: (b_arr[n] if n in b_arr and b_arr[n].shape == a_arr[n].shape else a_arr[n]) for n in names}
        incremental = k == "dict-onnx-incr"
        if incremental:
            step = max(1, spec.get("every", 2))
            vals = {n: v for i, (n, v) in enumerate(sorted(vals.items())) if i % step == 0}
        mut = spec.get("mut", "none")
        name = _pick(sorted(n for n in vals if vals[n].size > 1), spec.get("t", 0))
        if mut == "dtype":
            vals[name] = vals[name].astype(spec.get("dt", "float64"))
        elif mut == "shape":
            vals[name] = vals[name].reshape(-1) if vals[name].ndim != 1 else vals[name].reshape(1, -1)
        elif mut == "nan":
            v = vals[name].copy()
            v.reshape(-1)[0] = np.float32(spec.get("v", "nan"))
            vals[name] = v
        elif mut == "partial":
            del vals[name]
        elif mut == "extra":
            vals[name + ".extra"] = vals[name]
        m = onnxproto.Model.load(model.a)
        # A refit that succeeds was given every source, so it holds exactly these values (a
        # deleted one included: refusing it is the only other correct answer).
        for n, v in vals.items():
            if n in a_arr and v.size == a_arr[n].size and _finite(v):
                m.set(n, v.astype(np.float32).reshape(a_arr[n].shape))
        described = _store(cache, tag, m.to_bytes(), "onnx") if mut != "nan" else None
        return Source("dict", tensors=vals, names="onnx", incremental=incremental, described=described, note=name)
    raise ValueError("unknown source kind " + k)
