"""The calls docs/onnxruntime-users.md pairs, side by side on one model: ONNX Runtime's
InferenceSession and reforge's Plan describe the same inputs and outputs (name, type, symbolic
shape), run(output_names, feeds) answers alike for several sequence lengths, and ONNX Runtime's
bound outputs (I/O binding) correspond to run(..., outputs=...). ONNX Runtime is the reference."""

import numpy as np
import pytest

import reforge
from conftest import ROOT

ort = pytest.importorskip("onnxruntime")

LLAMA = ROOT / "models" / "llama" / "dynamo" / "A" / "model.onnx"
ATOL = 1e-4  # logits: max |reforge - ONNX Runtime| (float32, sums in other orders)


def feeds(seq, seed=0):
    return {"input_ids": np.random.default_rng(seed).integers(0, 128, size=(2, seq), dtype=np.int64)}


def test_session_and_plan_describe_and_run_alike():
    session = ort.InferenceSession(str(LLAMA), providers=["CPUExecutionProvider"])
    plan = reforge.build(LLAMA, threads=1)
    for theirs, ours in ((session.get_inputs(), plan.get_inputs()), (session.get_outputs(), plan.get_outputs())):
        assert [(v.name, v.type, list(v.shape)) for v in theirs] == [(v.name, v.type, list(v.shape)) for v in ours]
    names = [o.name for o in session.get_outputs()]
    for seq in (1, 7, 16):
        want = session.run(None, feeds(seq))
        got = plan.run(None, feeds(seq))
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)
        (only,) = plan.run(names, feeds(seq))
        np.testing.assert_array_equal(only, got[0])


def test_bound_outputs_as_io_binding():
    session = ort.InferenceSession(str(LLAMA), providers=["CPUExecutionProvider"])
    plan = reforge.build(LLAMA, threads=1)
    x = feeds(5)
    theirs = np.zeros((2, 5, 128), np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("input_ids", x["input_ids"])
    binding.bind_output("logits", "cpu", 0, np.float32, list(theirs.shape), theirs.ctypes.data)
    session.run_with_iobinding(binding)
    ours = np.zeros((2, 5, 128), np.float32)
    out = plan.run(x, outputs={"logits": ours})
    assert out["logits"] is ours
    assert np.abs(theirs).max() > 0
    np.testing.assert_allclose(ours, theirs, atol=ATOL, rtol=0)
