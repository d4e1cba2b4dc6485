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


class CudaCapsule:
    """A tensor that says, through DLPack, that it lives in CUDA device memory (device type 2),
    made without a GPU: a DLManagedTensor built with ctypes over host bytes that must never be
    read, handed out as an unversioned "dltensor" capsule."""

    def __init__(self, array, device_id=0):
        import ctypes

        class Device(ctypes.Structure):
            _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

        class DataType(ctypes.Structure):
            _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

        class DLTensor(ctypes.Structure):
            _fields_ = [("data", ctypes.c_void_p), ("device", Device), ("ndim", ctypes.c_int32),
                        ("dtype", DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

        Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

        class Managed(ctypes.Structure):
            _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", Deleter)]

        codes = {"i": 0, "u": 1, "f": 2}
        self._array = np.ascontiguousarray(array)
        self._shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        self._deleter = Deleter(lambda _: None)  # the bytes belong to self._array
        self._managed = Managed(
            DLTensor(self._array.ctypes.data, Device(2, device_id), array.ndim,
                     DataType(codes[array.dtype.kind], array.dtype.itemsize * 8, 1), self._shape, None, 0),
            None, self._deleter)
        self._device_id = device_id

    def __dlpack__(self, *args, **kwargs):
        import ctypes

        if kwargs.get("max_version") is not None:
            raise BufferError("only the unversioned capsule")  # the consumer falls back to it
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, self._device_id)


def test_device_memory_input_to_a_cpu_plan_is_refused_naming_it():
    # A CPU plan reads host memory only: an input that lives in CUDA memory is refused, named, before
    # any byte of it is read (the capsule's bytes are host bytes, but a read would take them as a
    # device's). The same plan then runs as before on host inputs.
    plan = reforge.build(hf_onnx("llama", "A"))
    assert plan.device == "cpu"
    ids = hf_inputs("llama")["input_ids"]
    with pytest.raises(reforge.InvalidInput) as e:
        plan.run({"input_ids": CudaCapsule(ids, device_id=1)})
    assert "input 'input_ids' lives on cuda:1, but the plan runs on the CPU" in str(e.value)
    assert max_diff(plan.run({"input_ids": ids}), hf_reference("llama", "A")) <= TOLERANCE


def test_outputs_on_is_checked_and_host_is_the_cpu_plans_default():
    plan = reforge.build(hf_onnx("llama", "A"))
    inputs = hf_inputs("llama")
    want = plan.run(inputs)
    got = plan.run(inputs, outputs_on="host")
    assert all(isinstance(v, np.ndarray) and np.array_equal(v, want[k]) for k, v in got.items())
    assert max_diff(got, hf_reference("llama", "A")) <= TOLERANCE
    with pytest.raises(reforge.InvalidInput, match="outputs_on='device': the plan runs on the CPU"):
        plan.run(inputs, outputs_on="device")
    with pytest.raises(ValueError, match="outputs_on must be 'device', 'host' or None"):
        plan.run(inputs, outputs_on="gpu")
