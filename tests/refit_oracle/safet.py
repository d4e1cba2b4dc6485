"""safetensors read and written by hand, so the oracle can make files the format forbids (a
duplicate key, a truncated or padded data section) as well as correct ones, independently of
the reader under test."""

from __future__ import annotations

import json
import struct
from typing import Dict, List, Tuple

import numpy as np

_DT = {
    "F32": np.float32,
    "F64": np.float64,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
_NAME = {np.dtype(v): k for k, v in _DT.items()}


def read(path: str) -> Dict[str, np.ndarray]:
    """A well-formed file's tensors (the bundled checkpoints; bf16 tensors are not read)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype=_DT[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def header_and_body(entries: List[Tuple[str, np.ndarray]]) -> Tuple[str, bytes]:
    """The JSON header text and the data section for `entries`, in order (names may repeat: the
    header then holds a duplicate key, as a fuzzed file can)."""
    parts = []
    body = bytearray()
    for name, arr in entries:
        arr = np.asarray(arr, order="C")  # keeps a scalar's shape ()
        start = len(body)
        body += arr.tobytes()
        info = {"dtype": _NAME[arr.dtype], "shape": list(arr.shape), "data_offsets": [start, len(body)]}
        parts.append("%s:%s" % (json.dumps(name), json.dumps(info)))
    return "{" + ",".join(parts) + "}", bytes(body)


def encode(entries: List[Tuple[str, np.ndarray]]) -> bytes:
    text, body = header_and_body(entries)
    raw = text.encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header with spaces to 8 bytes
    return struct.pack("<Q", len(raw)) + raw + body


def write(path: str, tensors: Dict[str, np.ndarray]) -> None:
    with open(path, "wb") as f:
        f.write(encode(list(tensors.items())))
