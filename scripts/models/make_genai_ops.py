"""One-node ONNX models of ONNX Runtime's GroupQueryAttention, SkipSimplifiedLayerNormalization and
SimplifiedLayerNormalization, with ONNX Runtime's CPU outputs on seeded inputs, into
tests/data/genai_ops/ (tests/genai_ops_test.cc runs each through reforge and compares).

Each case is a folder: model.onnx, in_<i>.npy for every graph input (in graph order), out_<i>.npy
for every graph output, and case.json (the names, and the tolerance). Output rows that ONNX
Runtime leaves unspecified (GroupQueryAttention's rows of right padding) are NaN in out_<i>.npy:
the test skips them.

Needs numpy, onnx and onnxruntime (1.32 wrote the committed files):
    python scripts/models/make_genai_ops.py
"""
import json
import pathlib
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "genai_ops"
F32, F16, I32 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32
NP = {F32: np.float32, F16: np.float16, I32: np.int32}


def write_case(name, node, inputs, outputs, feed, tol=1e-5, unspecified=None):
    """inputs: [(name, elem_type)], outputs: [(name, elem_type)]; feed: name -> array.
    unspecified: output name -> boolean mask of elements ONNX Runtime does not define."""
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(n, t, list(feed[n].shape)) for n, t in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run([n for n, _ in outputs], {n: feed[n] for n, _ in inputs})
    d = OUT / name
    d.mkdir(parents=True)
    onnx.save(model, str(d / "model.onnx"))
    for i, (n, _) in enumerate(inputs):
        np.save(d / f"in_{i}.npy", feed[n])
    for i, ((n, _), y) in enumerate(zip(outputs, got)):
        y = y.copy()
        if unspecified and n in unspecified:
            y[unspecified[n]] = np.nan
        np.save(d / f"out_{i}.npy", y)
    (d / "case.json").write_text(json.dumps({
        "inputs": [n for n, _ in inputs], "outputs": [n for n, _ in outputs], "tolerance": tol}, indent=1) + "\n")


def rotary_caches(rng, max_pos, half, dtype):
    theta = 10000.0 ** (-np.arange(half) / half)
    angle = np.arange(max_pos)[:, None] * theta[None, :]
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def gqa_case(name, rng, *, batch, seq, heads, kv_heads, head, past, seqlens, total, packed=True, rotary=False,
             interleaved=False, rot_half=None, dtype=F32, tol=1e-5, **attrs):
    t = NP[dtype]
    hidden = (heads + 2 * kv_heads) * head if packed else heads * head
    feed = {"query": rng.standard_normal((batch, seq, hidden)).astype(t)}
    names = ["query", "", ""]
    inputs = [("query", dtype)]
    if not packed:
        for n in ("key", "value"):
            feed[n] = rng.standard_normal((batch, seq, kv_heads * head)).astype(t)
            inputs.append((n, dtype))
        names = ["query", "key", "value"]
    if past is not None:
        for n in ("past_key", "past_value"):
            feed[n] = rng.standard_normal((batch, kv_heads, past, head)).astype(t)
            inputs.append((n, dtype))
        names += ["past_key", "past_value"]
    else:
        names += ["", ""]
    feed["seqlens_k"] = np.array(seqlens, dtype=np.int32)
    feed["total_sequence_length"] = np.array(total, dtype=np.int32)
    inputs += [("seqlens_k", I32), ("total_sequence_length", I32)]
    names += ["seqlens_k", "total_sequence_length"]
    if rotary:
        cos, sin = rotary_caches(rng, 32, rot_half or head // 2, t)
        feed["cos_cache"], feed["sin_cache"] = cos, sin
        inputs += [("cos_cache", dtype), ("sin_cache", dtype)]
        names += ["cos_cache", "sin_cache"]
    node = helper.make_node("GroupQueryAttention", names, ["output", "present_key", "present_value"],
                            domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads,
                            do_rotary=int(rotary), rotary_interleaved=int(interleaved), **attrs)
    # Rows of right padding (query rows past a row's tokens) are unspecified in ONNX Runtime.
    first_prompt = seq == total
    valid = [min(seq, s + 1) if first_prompt else seq for s in seqlens]
    mask = np.zeros((batch, seq, heads * head), dtype=bool)
    for b, q in enumerate(valid):
        mask[b, q:] = True
    write_case(name, node, inputs, [("output", dtype), ("present_key", dtype), ("present_value", dtype)], feed,
               tol=tol, unspecified={"output": mask})


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    rng = np.random.default_rng(20240607)
    # The model builder's layout: packed QKV, rotary in halves, a first prompt, right-padded rows.
    gqa_case("gqa_packed_prompt_rotary", rng, batch=2, seq=5, heads=4, kv_heads=2, head=16, past=0,
             seqlens=[4, 2], total=5, rotary=True, scale=0.25)
    # A decoding step: Q, K and V apart, interleaved rotary, rows with different pasts, scale and
    # softcap given.
    gqa_case("gqa_decode_interleaved_softcap", rng, batch=2, seq=1, heads=4, kv_heads=2, head=16, past=6,
             seqlens=[6, 3], total=7, packed=False, rotary=True, interleaved=True, scale=0.3, softcap=2.0)
    # A prompt after cached tokens (batch of one), a local window, no rotary, scale 1/sqrt(head).
    gqa_case("gqa_subsequent_prompt_window", rng, batch=1, seq=3, heads=6, kv_heads=2, head=8, past=5,
             seqlens=[7], total=8, packed=False, local_window_size=2)
    # Multi-query (one kv head), a window over a prompt, packed, partial rotary (8 of 32 features).
    gqa_case("gqa_mqa_partial_rotary_window", rng, batch=2, seq=6, heads=4, kv_heads=1, head=32, past=None,
             seqlens=[5, 5], total=6, rotary=True, rot_half=8, local_window_size=3)
    # Bidirectional (causal = 0) decoding.
    gqa_case("gqa_noncausal_decode", rng, batch=1, seq=1, heads=2, kv_heads=2, head=8, past=4, seqlens=[4], total=5,
             packed=False, causal=0)
    # float16 data.
    gqa_case("gqa_float16_decode", rng, batch=2, seq=1, heads=4, kv_heads=2, head=16, past=3, seqlens=[3, 2], total=4,
             rotary=True, dtype=F16, tol=2e-3)

    # SkipSimplifiedLayerNormalization: bias and every output; skip broadcast over the batch.
    x = rng.standard_normal((2, 3, 16)).astype(np.float32)
    feed = {"input": x, "skip": rng.standard_normal((2, 3, 16)).astype(np.float32),
            "gamma": rng.standard_normal(16).astype(np.float32), "bias": rng.standard_normal(16).astype(np.float32)}
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["input", "skip", "gamma", "bias"],
                            ["output", "mean", "inv_std_var", "input_skip_bias_sum"], domain="com.microsoft",
                            epsilon=1e-5)
    write_case("skip_simplified_bias_all_outputs", node, [(n, F32) for n in feed],
               [("output", F32), ("mean", F32), ("inv_std_var", F32), ("input_skip_bias_sum", F32)], feed)
    feed = {"input": x * 30, "skip": rng.standard_normal((3, 16)).astype(np.float32),
            "gamma": rng.standard_normal(16).astype(np.float32)}
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["input", "skip", "gamma"], ["output", "", "", "sum"],
                            domain="com.microsoft", epsilon=1e-6)
    write_case("skip_simplified_broadcast_skip", node, [(n, F32) for n in feed], [("output", F32), ("sum", F32)], feed)

    # SimplifiedLayerNormalization: the last axis with inv_std_var; from axis 1; float16.
    feed = {"X": rng.standard_normal((2, 3, 16)).astype(np.float32), "scale": rng.standard_normal(16).astype(np.float32)}
    node = helper.make_node("SimplifiedLayerNormalization", ["X", "scale"], ["Y", "inv_std_var"], axis=-1,
                            epsilon=1e-5, stash_type=1)
    write_case("simplified_last_axis", node, [("X", F32), ("scale", F32)], [("Y", F32), ("inv_std_var", F32)], feed)
    feed = {"X": rng.standard_normal((2, 3, 8)).astype(np.float32),
            "scale": rng.standard_normal((3, 8)).astype(np.float32)}
    node = helper.make_node("SimplifiedLayerNormalization", ["X", "scale"], ["Y", "inv_std_var"], axis=1,
                            epsilon=1e-3)
    write_case("simplified_axis1", node, [("X", F32), ("scale", F32)], [("Y", F32), ("inv_std_var", F32)], feed)
    feed = {"X": rng.standard_normal((4, 32)).astype(np.float16), "scale": rng.standard_normal(32).astype(np.float16)}
    node = helper.make_node("SimplifiedLayerNormalization", ["X", "scale"], ["Y"], epsilon=1e-5)
    write_case("simplified_float16", node, [("X", F16), ("scale", F16)], [("Y", F16)], feed, tol=2e-3)
    print("wrote", sum(1 for _ in OUT.iterdir()), "cases into", OUT)


if __name__ == "__main__":
    main()
