#!/usr/bin/env python3
"""Binding speed: a synthetic model whose ONNX stores every Linear weight pre-transposed (as the
PyTorch dynamo exporter does), and a safetensors checkpoint of >= 1 GB holding the framework
layout; plus what the exporter folds with static shapes: a position table cut to 128 rows
([1,128,dim], found by the derived-form search) and a rotary cos table (proven by recomputation). Runs `reforge build --refit --strip-weights --checkpoint` and reports the binding time
(index + match, printed by the build) next to the time of reading the checkpoint once (`cat` of
the warm file, and a cold-ish first read). Not a test; results go to docs/benchmarks.md.

usage: bench/binding_bench.py [--layers 16] [--dim 4096] [--reforge build/reforge] [--dir /tmp/reforge_bind_bench]
"""
import argparse, json, os, re, struct, subprocess, time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_safetensors(path, tensors):
    header, off = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a).tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--reforge", default="build/reforge")
    ap.add_argument("--dir", default="/tmp/reforge_bind_bench")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng(0)
    ckpt, inits, nodes, prev = {}, [], [], "x"
    for i in range(a.layers):
        w = rng.standard_normal((a.dim, a.dim), dtype=np.float32)  # framework layout [out, in]
        ckpt[f"layers.{i}.proj.weight"] = w
        inits.append(numpy_helper.from_array(np.ascontiguousarray(w.T), f"val_{i}"))  # exporter: pre-transposed, anonymous
        nodes.append(helper.make_node("MatMul", [prev, f"val_{i}"], [f"h{i}"], name=f"node_linear_{i}"))
        prev = f"h{i}"
    seq, head = 128, 128
    pos = rng.standard_normal((2048, a.dim), dtype=np.float32)
    ckpt["pos.weight"] = pos
    inits.append(numpy_helper.from_array(np.ascontiguousarray(pos[:seq][None]), "embedding_1"))
    nodes.append(helper.make_node("Add", ["p", "embedding_1"], ["p_out"], name="node_add_pos"))
    inv = (1.0 / (10000 ** (np.arange(0, head, 2, dtype=np.int64).astype(np.float32) / head))).astype(np.float32)
    ang = np.outer(np.arange(seq, dtype=np.float32), inv).astype(np.float32)
    cos = np.cos(np.concatenate([ang, ang], axis=-1)).astype(np.float32)[None, None]
    inits.append(numpy_helper.from_array(cos, "unsqueeze_cos"))
    nodes.append(helper.make_node("Mul", ["r", "unsqueeze_cos"], ["r_out"], name="node_mul_cos"))
    g = helper.make_graph(nodes, "bind_bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, a.dim]),
                                                helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, seq, a.dim]),
                                                helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 1, seq, head])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, a.dim]),
                           helper.make_tensor_value_info("p_out", TensorProto.FLOAT, [1, seq, a.dim]),
                           helper.make_tensor_value_info("r_out", TensorProto.FLOAT, [1, 1, seq, head])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx_path, st_path = os.path.join(a.dir, "model.onnx"), os.path.join(a.dir, "checkpoint.safetensors")
    onnx.save(model, onnx_path, save_as_external_data=True, location="model.onnx.data")
    write_safetensors(st_path, ckpt)
    size = os.path.getsize(st_path)
    t = time.perf_counter()
    subprocess.run(["cat", st_path], stdout=subprocess.DEVNULL, check=True)
    cat_s = time.perf_counter() - t
    t = time.perf_counter()
    out = subprocess.run([a.reforge, "build", onnx_path, "-o", os.path.join(a.dir, "x.plan"), "--refit", "--strip-weights",
                          "--checkpoint", st_path], capture_output=True, text=True, check=True).stdout
    build_s = time.perf_counter() - t
    m = re.search(r"index ([\d.]+) ms, match ([\d.]+) ms", out)
    index_ms, match_ms = float(m.group(1)), float(m.group(2))
    print(out.strip())
    print(f"checkpoint: {size / 2**30:.2f} GiB, {a.layers} tensors of [{a.dim},{a.dim}] float32, every one bound through a "
          f"Transpose, and a [2048,{a.dim}] position table bound through a Slice; a rotary table proven constant")
    print(f"read once (cat, warm page cache): {cat_s * 1e3:.0f} ms")
    print(f"binding: index {index_ms:.1f} ms + match {match_ms:.0f} ms = {index_ms + match_ms:.0f} ms "
          f"({(index_ms + match_ms) / (cat_s * 1e3):.2f}x the read); whole build {build_s:.1f} s")


if __name__ == "__main__":
    main()
