"""A minimal reader and writer of the ONNX protobuf wire format, enough to list, change, delete and
rename a model's top-level initializers.

The oracle makes its ONNX sources itself ("B with one tensor changed", "a partial B") and must not
depend on the code under test to do it, nor on the `onnx` package (not in the project's
environment, and not reachable on the GPU machine). Fields it does not touch are copied through as
the bytes they were, so an untouched model re-encodes to the same bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

# TensorProto.DataType -> numpy dtype (the types exporters write as raw_data)
DTYPES = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    4: np.uint16,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
    12: np.uint32,
    13: np.uint64,
}
CODES = {np.dtype(v): k for k, v in DTYPES.items()}


def _varint(buf: bytes, pos: int) -> Tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _enc_varint(v: int) -> bytes:
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


Field = Tuple[int, int, object]  # (number, wire type, int or bytes)


def parse(buf: bytes) -> List[Field]:
    """The fields of one message, in order: varints as ints, everything else as its bytes."""
    fields: List[Field] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _varint(buf, pos)
        elif wt == 1:
            v, pos = buf[pos : pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            v, pos = buf[pos : pos + n], pos + n
        elif wt == 5:
            v, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError("unsupported protobuf wire type %d" % wt)
        fields.append((num, wt, v))
    return fields


def encode(fields: List[Field]) -> bytes:
    out = bytearray()
    for num, wt, v in fields:
        out += _enc_varint(num << 3 | wt)
        if wt == 0:
            out += _enc_varint(v)  # type: ignore[arg-type]
        elif wt == 2:
            out += _enc_varint(len(v)) + v  # type: ignore[arg-type]
        else:
            out += v  # type: ignore[operator]
    return bytes(out)


@dataclass
class Initializer:
    name: str
    dtype: int
    dims: List[int]
    fields: List[Field]

    def array(self) -> Optional[np.ndarray]:
        """The tensor's value (raw_data or float_data), or None for types or layouts not read here."""
        if self.dtype not in DTYPES:
            return None
        dt = np.dtype(DTYPES[self.dtype])
        for num, wt, v in self.fields:
            if num == 9:
                return np.frombuffer(v, dtype=dt).reshape(self.dims).copy()  # type: ignore[arg-type]
        if self.dtype == 1:
            vals: List[float] = []
            for num, wt, v in self.fields:
                if num == 4 and wt == 2:
                    vals += list(struct.unpack("<%df" % (len(v) // 4), v))  # type: ignore[arg-type]
                elif num == 4 and wt == 5:
                    vals.append(struct.unpack("<f", v)[0])  # type: ignore[arg-type]
            return np.array(vals, dtype=np.float32).reshape(self.dims)
        return None


def _tensor(buf: bytes) -> Initializer:
    fields = parse(buf)
    name, dtype, dims = "", 0, []
    for num, wt, v in fields:
        if num == 8:
            name = v.decode()  # type: ignore[union-attr]
        elif num == 2:
            dtype = v  # type: ignore[assignment]
        elif num == 1 and wt == 0:
            dims.append(v)
        elif num == 1 and wt == 2:
            p = 0
            while p < len(v):  # type: ignore[arg-type]
                d, p = _varint(v, p)  # type: ignore[arg-type]
                dims.append(d)
    return Initializer(name, dtype, dims, fields)


def _tensor_fields(name: str, arr: np.ndarray) -> List[Field]:
    arr = np.asarray(arr, order="C")  # (np.ascontiguousarray would make a scalar [1])
    f: List[Field] = [(1, 0, int(d)) for d in arr.shape]
    f.append((2, 0, CODES[arr.dtype]))
    f.append((8, 2, name.encode()))
    f.append((9, 2, arr.tobytes()))
    return f


class Model:
    """An ONNX model's bytes with its top-level initializers made editable."""

    def __init__(self, data: bytes):
        self.top = parse(data)
        gi = [i for i, f in enumerate(self.top) if f[0] == 7]
        if len(gi) != 1:
            raise ValueError("not an ONNX model (no single graph field)")
        self.graph_index = gi[0]
        self.graph = parse(self.top[self.graph_index][2])  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: str) -> "Model":
        with open(path, "rb") as f:
            return cls(f.read())

    def initializers(self) -> List[Initializer]:
        return [_tensor(v) for num, wt, v in self.graph if num == 5]  # type: ignore[arg-type]

    def arrays(self) -> Dict[str, np.ndarray]:
        out = {}
        for t in self.initializers():
            a = t.array()
            if a is not None:
                out[t.name] = a
        return out

    def set(self, name: str, arr: np.ndarray) -> None:
        """Replaces initializer `name` by `arr` (raw_data; its dtype and shape as given)."""
        for i, (num, wt, v) in enumerate(self.graph):
            if num == 5 and _tensor(v).name == name:  # type: ignore[arg-type]
                self.graph[i] = (5, 2, encode(_tensor_fields(name, arr)))
                return
        raise KeyError(name)

    def delete(self, name: str) -> None:
        n = len(self.graph)
        self.graph = [f for f in self.graph if not (f[0] == 5 and _tensor(f[2]).name == name)]  # type: ignore[arg-type]
        if len(self.graph) == n:
            raise KeyError(name)

    def to_bytes(self) -> bytes:
        top = list(self.top)
        top[self.graph_index] = (7, 2, encode(self.graph))
        return encode(top)

    def save(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(self.to_bytes())


def rename(model: Model, old: str, new: str) -> None:
    """Renames initializer `old` and every top-level node input that reads it (a valid model whose
    initializer has another name; a refit by position must not care)."""
    t = [x for x in model.initializers() if x.name == old]
    if not t:
        raise KeyError(old)
    fields = [(n, w, new.encode() if n == 8 else v) for n, w, v in t[0].fields]
    for i, (num, wt, v) in enumerate(model.graph):
        if num == 5 and _tensor(v).name == old:  # type: ignore[arg-type]
            model.graph[i] = (5, 2, encode(fields))
        elif num == 1:  # NodeProto: input = 1
            node = parse(v)  # type: ignore[arg-type]
            if any(n == 1 and x == old.encode() for n, w, x in node):
                node = [(n, w, new.encode() if n == 1 and x == old.encode() else x) for n, w, x in node]
                model.graph[i] = (1, 2, encode(node))
