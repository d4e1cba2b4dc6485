"""How an export's ONNX initializers are made from one checkpoint tensor, found by exact value.

A changed checkpoint tensor describes the ONNX model whose initializers derived from it are
changed the same way. Which initializers those are, and which of their elements come from which
element of the tensor, is found here without the code under test (reforge's binder): for every
float initializer of the A export, each structural relation to A's checkpoint tensor is tried
(identity, a reshape, a 2-D transpose, a contiguous slice along one axis, a broadcast/expand, the
tensor as a contiguous block of a concatenation or stack with other tensors; failing those, a
gather: every element is one element of the tensor, found by its pair of values in A and B),
and kept only where it holds bit for bit for both pairs: checkpoint A with the A export and
checkpoint B with the B export (same initializer name and shape). A relation is an index map:
for each element of the initializer, the flat index of the checkpoint element it holds, or -1
for an element made from something else.

No relation is claimed (None) where it cannot be established: a tensor whose values are all
equal, no initializer related, two relations that give one element two different sources (a
symmetric matrix, a repeated row), a relation that covers only equal values, or a tensor whose
first row also shows up in an initializer no relation explains (a fold): its effect is then
unknown here.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

Relation = Dict[str, np.ndarray]  # initializer name -> index map (int64, the initializer's shape)


def _squeezed(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def _candidates(c_shape: Tuple[int, ...], o_shape: Tuple[int, ...]) -> Iterator[np.ndarray]:
    """Index maps of shape squeezed(o_shape) that a structural relation could give; -1: not from
    the tensor. Size-1 axes are dropped first: they carry no layout."""
    c, o = _squeezed(c_shape), _squeezed(o_shape)
    if not c:
        return
    idx = np.arange(int(np.prod(c)), dtype=np.int64).reshape(c)
    views = [idx] + ([np.ascontiguousarray(idx.T)] if len(c) == 2 and c[0] != 1 and c[1] != 1 else [])
    for v in views:
        vs = v.shape
        if vs == o:
            yield v
        if len(vs) == len(o):
            diff = [k for k in range(len(o)) if vs[k] != o[k]]
            if len(diff) == 1:
                k = diff[0]
                if o[k] < vs[k]:  # a slice of the tensor
                    for s in range(vs[k] - o[k] + 1):
                        yield np.take(v, range(s, s + o[k]), axis=k)
                else:  # the tensor as one block of a concatenation
                    for s in range(o[k] - vs[k] + 1):
                        m = np.full(o, -1, dtype=np.int64)
                        sl = [slice(None)] * len(o)
                        sl[k] = slice(s, s + vs[k])
                        m[tuple(sl)] = v
                        yield m
        if len(o) == len(vs) + 1:  # one block of a stack along a new axis
            for p in range(len(o)):
                if o[:p] + o[p + 1 :] == vs:
                    for s in range(o[p]):
                        m = np.full(o, -1, dtype=np.int64)
                        sl = [slice(None)] * len(o)
                        sl[p] = s
                        m[tuple(sl)] = v
                        yield m
        if len(o) > len(vs):  # broadcast (expand), aligned at the end or at the start
            for shape in (vs, vs + (1,) * (len(o) - len(vs))):
                try:
                    yield np.ascontiguousarray(np.broadcast_to(v.reshape(shape), o))
                except ValueError:
                    pass


def _holds(m: np.ndarray, c: np.ndarray, o: np.ndarray) -> bool:
    used = m >= 0
    mf, of = m.reshape(-1), o.reshape(-1).view(np.uint32)
    cf = c.reshape(-1).view(np.uint32)
    u = used.reshape(-1)
    return bool(np.array_equal(of[u], cf[mf[u]]))


def _gathered(c_a: np.ndarray, oa: np.ndarray, c_b: np.ndarray, ob: np.ndarray):
    """An initializer every element of which is some element of the tensor, the same one in both
    pairs (a gather by constant indices, as T5's relative position bias made from its bucket
    table): its index map; None when it is not one; False when an element could come from two
    elements of the tensor (equal there in A and in B), so which one drives it is unknown."""
    ka = c_a.reshape(-1).view(np.uint32).astype(np.uint64) << np.uint64(32)
    keys = ka | c_b.reshape(-1).view(np.uint32).astype(np.uint64)
    want = (oa.reshape(-1).view(np.uint32).astype(np.uint64) << np.uint64(32)) | ob.reshape(-1).view(np.uint32).astype(np.uint64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    pos = np.searchsorted(sk, want)
    if np.any(pos >= sk.size) or not np.array_equal(sk[np.minimum(pos, sk.size - 1)], want):
        return None
    m = order[pos].reshape(oa.shape).astype(np.int64)
    vals = c_a.reshape(-1)[m.reshape(-1)]
    if np.all(vals == vals[0]):
        return None
    last = np.searchsorted(sk, want, side="right")
    if np.any(last - pos > 1):
        return False
    return m


def find(c_a: np.ndarray, onnx_a: Dict[str, np.ndarray], c_b: np.ndarray, onnx_b: Dict[str, np.ndarray]) -> Optional[Relation]:
    """The initializers made from the checkpoint tensor (c_a in A's checkpoint, c_b in B's), each
    with its index map, holding for both pairs; None where that cannot be established."""
    if c_a.dtype != np.float32 or c_b.dtype != np.float32 or c_a.shape != c_b.shape or c_a.size < 2:
        return None
    if np.all(c_a == c_a.reshape(-1)[0]):
        return None  # all equal: any initializer of that value would match
    out: Relation = {}
    unexplained: List[str] = []
    for n, oa in onnx_a.items():
        ob = onnx_b.get(n)
        if oa.dtype != np.float32 or ob is None or ob.dtype != np.float32 or ob.shape != oa.shape:
            continue
        # every relation that holds is true of the initializer: a block of a stack and the
        # broadcast that covers it agree, and together say where each element comes from
        merged: Optional[np.ndarray] = None
        for m in _candidates(c_a.shape, oa.shape):
            m = m.reshape(oa.shape)
            if not (_holds(m, c_a, oa) and _holds(m, c_b, ob)):
                continue
            vals = c_a.reshape(-1)[m[m >= 0]]
            if vals.size == 0 or np.all(vals == vals[0]):
                continue  # only equal values: no evidence of where they came from
            if merged is None:
                merged = m.copy()
                continue
            both = (merged >= 0) & (m >= 0)
            if not np.array_equal(merged[both], m[both]):
                return None  # two sources for one element (a symmetric matrix): ambiguous
            merged[m >= 0] = m[m >= 0]
        if merged is None:
            merged = _gathered(c_a, oa, c_b, ob)
            if merged is False:
                return None
        if merged is not None:
            out[n] = merged
        else:
            unexplained.append(n)
    if not out:
        return None
    row = np.ascontiguousarray(c_a.reshape(c_a.shape[0], -1)[0] if c_a.ndim > 1 else c_a[: max(2, c_a.size // 2)])
    if row.size > 1 and not np.all(row == row[0]):
        for n in unexplained:
            if row.tobytes() in onnx_a[n].tobytes():
                return None  # also used in a way no relation here explains
    return out


def apply(rel: Relation, new: np.ndarray, onnx_b: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """B's initializers that change when the checkpoint tensor takes the values `new` (float32,
    its shape): each related element takes the new value of the element it is made from."""
    nf = new.astype(np.float32).reshape(-1)
    out = {}
    for n, m in rel.items():
        v = onnx_b[n].copy()
        used = m >= 0
        v[used] = nf[m[used]]
        if not np.array_equal(v.view(np.uint32), onnx_b[n].view(np.uint32)):
            out[n] = v
    return out
