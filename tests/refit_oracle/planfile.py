"""Reads a plan file's engine weights and literals straight from its bytes (docs/plan-format.md):
the oracle compares what a refit stored with what a fresh build stores, without asking the code
under test to describe itself."""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Dict, Tuple

MAGIC = b"\x89RFPLAN\n"

Digest = Dict[str, Tuple[int, Tuple[int, ...], str]]


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _meta(data: bytes, path: str) -> dict:
    if data[:8] != MAGIC:
        raise ValueError("%s: not a plan file" % path)
    meta_off, meta_size = struct.unpack("<QQ", data[16:32])
    return json.loads(data[meta_off : meta_off + meta_size])


def stripped(path: str) -> bool:
    """Whether the plan file was written without its refittable weight data."""
    with open(path, "rb") as f:
        return bool(_meta(f.read(), path).get("stripped", False))


def weights(path: str) -> Digest:
    """{engine weight name: (dtype, shape, digest of its bytes or "absent")}, literals as
    "literal#i"; raises ValueError on a file that is not a plan."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != MAGIC:
        raise ValueError("%s: not a plan file" % path)
    meta_off, meta_size, data_off, data_size = struct.unpack("<QQQQ", data[16:48])
    meta = json.loads(data[meta_off : meta_off + meta_size])
    body = data[data_off : data_off + data_size]
    out: Digest = {}

    def ref(t):
        if not t or t.get("offset") is None:
            return "absent"
        return _digest(body[t["offset"] : t["offset"] + t["nbytes"]])

    for w in meta["weights"]:
        name = w["name"]["hex"] if isinstance(w["name"], dict) else w["name"]
        out[name] = (w["dtype"], tuple(w["shape"]), ref(w.get("data")))
    for i, t in enumerate(meta.get("literals") or []):
        if t is not None:
            out["literal#%d" % i] = (t["dtype"], tuple(t["shape"]), ref(t))
    return out


def outputs_digest(outs) -> Dict[str, Tuple[str, Tuple[int, ...], str]]:
    import numpy as np

    return {n: (str(a.dtype), tuple(a.shape), _digest(np.ascontiguousarray(a).tobytes())) for n, a in outs.items()}
