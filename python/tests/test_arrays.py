"""Arrays in and out: outputs handed out without a copy, inputs read in place, any object with
__dlpack__ accepted, refit values copied once so that later changes to them do not leak in."""


import numpy as np
import pytest
import safetensors.numpy

import reforge
from conftest import ROOT, TOLERANCE, hf_checkpoint, hf_inputs, hf_onnx, hf_reference, max_diff


class DLPackOnly:
    """Exposes an array through the DLPack protocol only (no buffer protocol, not a numpy array)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, *args, **kwargs):
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_outputs_are_not_copied():
    plan = reforge.build(hf_onnx("gpt2", "A"))
    out = plan.run(hf_inputs("gpt2"))["logits"]
    assert not out.flags.owndata and out.flags.writeable and out.flags.c_contiguous
    # The array's memory is the engine's output tensor: the base is a view of the nanobind array
    # object that holds that tensor (a capsule owning it), not a buffer numpy allocated.
    base = out.base
    assert isinstance(base, memoryview) and not base.readonly
    assert type(base.obj).__name__ == "nb_ndarray"
    assert base.obj.__array_interface__["data"][0] if hasattr(base.obj, "__array_interface__") else True
    # Two runs give two buffers (fresh engine outputs), each kept alive by its own array.
    again = plan.run(hf_inputs("gpt2"))["logits"]
    assert not np.shares_memory(out, again) and np.array_equal(out, again)


def test_identity_output_is_the_input_itself():
    # The ONNX node suite's Identity model (unpacked into build/ by scripts/test.sh): the output
    # is the input tensor, so it shares the caller's memory both ways; it comes back read-only.
    model = ROOT / "build" / "onnx-node-suite" / "node" / "test_identity" / "model.onnx"
    if not model.exists():
        pytest.skip("ONNX node suite not unpacked in build/")
    plan = reforge.build(model)
    name = plan.inputs[0].name
    x = np.arange(np.prod([d for d in plan.inputs[0].shape]), dtype=np.float32).reshape(plan.inputs[0].shape)
    y = next(iter(plan.run({name: x}).values()))
    assert np.array_equal(x, y)
    assert np.shares_memory(x, y)
    assert not y.flags.writeable


def test_dlpack_inputs_and_refit_values_give_the_numpy_results():
    model = "llama"
    inputs = hf_inputs(model)
    plan = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"))
    state = safetensors.numpy.load_file(str(hf_checkpoint(model, "B")))
    plan.refit({k: DLPackOnly(v) for k, v in state.items()})
    expected = plan.run(inputs)
    assert max_diff(expected, hf_reference(model, "B")) <= TOLERANCE
    got = plan.run({k: DLPackOnly(v) for k, v in inputs.items()})
    assert all(np.array_equal(expected[k], got[k]) for k in expected)


def test_non_contiguous_input_is_made_contiguous():
    inputs = hf_inputs("gpt2")
    plan = reforge.build(hf_onnx("gpt2", "A"))
    expected = plan.run(inputs)
    fortran = {k: np.asfortranarray(v) for k, v in inputs.items()}
    assert not fortran["input_ids"].flags.c_contiguous
    got = plan.run(fortran)
    assert all(np.array_equal(expected[k], got[k]) for k in expected)


def test_refit_values_are_copied():
    model = "gpt2"
    inputs = hf_inputs(model)
    plan = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"))
    state = safetensors.numpy.load_file(str(hf_checkpoint(model, "B")))
    report = plan.refit(state)
    assert report["bytes_in"] > 0 and 0 < report["bytes_copied"] < report["bytes_in"]
    for v in state.values():
        v[...] = 0  # an optimizer step changing the state dict in place after the refit
    assert max_diff(plan.run(inputs), hf_reference(model, "B")) <= TOLERANCE


def test_output_names_select_outputs():
    plan = reforge.build(hf_onnx("gpt2", "A"))
    assert list(plan.run(hf_inputs("gpt2"), ["logits"])) == ["logits"]
    with pytest.raises(reforge.InvalidInput, match="not an output"):
        plan.run(hf_inputs("gpt2"), ["nope"])


def test_inspect_is_the_clis_json(tmp_path):
    import json

    from conftest import cli_output

    path = tmp_path / "m.plan"
    plan = reforge.build(hf_onnx("t5", "A"), refit=True, checkpoint=hf_checkpoint("t5", "A"))
    assert plan.inspect()["file_bytes"] is None  # not saved yet
    plan.save(path)
    info = plan.inspect()
    assert info == json.loads(cli_output("inspect", "--json", path))
    assert plan.sources == info["sources"] and plan.sources
    assert any(s.get("binding", {}).get("status") == "bound" for s in plan.sources)
    loaded = reforge.load(path)
    assert loaded.inspect()["verified"]["weights"] > 0
    assert loaded.inspect() == json.loads(cli_output("inspect", "--json", "--verify", path))
