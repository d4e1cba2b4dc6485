"""Errors: each failure raises the reforge.Error subclass of what went wrong, carrying the very
message the CLI prints for the same failure (compared with the CLI of the same build)."""

import numpy as np
import pytest

import reforge
from conftest import cli_error, hf_checkpoint, hf_inputs, hf_onnx


def test_error_classes_form_one_hierarchy():
    for cls in (reforge.InvalidModel, reforge.InvalidInput, reforge.CorruptPlan, reforge.RefitRefused):
        assert issubclass(cls, reforge.Error) and issubclass(cls, RuntimeError)
        assert cls.__module__ == "reforge"


def test_corrupted_weight_byte_is_corrupt_plan(tmp_path):
    path = tmp_path / "m.plan"
    reforge.build(hf_onnx("gpt2", "A")).save(path)
    data = bytearray(path.read_bytes())
    data[len(data) - 100] ^= 0x40  # inside the data section: the last weight's bytes
    path.write_bytes(bytes(data))
    with pytest.raises(reforge.CorruptPlan) as e:
        reforge.load(path)
    assert "hash" in str(e.value) or "corrupt" in str(e.value)
    assert str(e.value) == cli_error("inspect", "--verify", path)
    # Unverified, the damaged bytes load (what --no-verify does).
    reforge.load(path, verify=False)


def test_corrupted_header_is_corrupt_plan(tmp_path):
    path = tmp_path / "m.plan"
    reforge.build(hf_onnx("gpt2", "A")).save(path)
    data = bytearray(path.read_bytes())
    data[20] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(reforge.CorruptPlan) as e:
        reforge.load(path)
    assert str(e.value) == cli_error("inspect", path)


def test_missing_plan_file():
    with pytest.raises(FileNotFoundError):
        reforge.load("/nonexistent/m.plan")


def test_checkpoint_refit_of_an_unbound_plan_is_refused_unchanged(tmp_path):
    path = tmp_path / "m.plan"
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True)
    plan.save(path)
    before = plan.run(hf_inputs("gpt2"))
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(hf_checkpoint("gpt2", "B"))
    assert str(e.value) == cli_error("refit", path, "--weights", hf_checkpoint("gpt2", "B"), "-o", tmp_path / "o.plan")
    after = plan.run(hf_inputs("gpt2"))
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_refit_of_a_baked_plan_is_refused(tmp_path):
    path = tmp_path / "m.plan"
    plan = reforge.build(hf_onnx("gpt2", "A"))
    plan.save(path)
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(hf_onnx("gpt2", "B"))
    assert str(e.value) == cli_error("refit", path, "--weights", hf_onnx("gpt2", "B"), "-o", tmp_path / "o.plan")


def test_nonfinite_refit_values_are_refused():
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True, checkpoint=hf_checkpoint("gpt2", "A"))
    import safetensors.numpy

    state = safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "B")))
    # Not a copy of the tied embedding (lm_head.weight, transformer.wte.weight): copies that differ
    # are refused as such, whatever their values (test_checkpoint_ties.py).
    tied = ("lm_head.weight", "transformer.wte.weight")
    name = next(k for k, v in state.items() if v.dtype == np.float32 and v.size > 10 and k not in tied)
    state[name] = state[name].copy()
    state[name].flat[3] = np.nan
    with pytest.raises(reforge.RefitRefused, match="NaN|nan"):
        plan.refit(state)
    plan.refit(state, allow_nonfinite=True)


def test_wrong_input_name_and_dtype_are_invalid_input(tmp_path):
    path = tmp_path / "m.plan"
    plan = reforge.build(hf_onnx("gpt2", "A"))
    plan.save(path)
    ids = hf_inputs("gpt2")["input_ids"]
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "ids_f.npy", ids.astype(np.float32))

    with pytest.raises(reforge.InvalidInput) as e:
        plan.run({"input_idz": ids})
    assert str(e.value) == cli_error("run", path, "--input", "input_idz=%s" % (tmp_path / "ids.npy"))

    with pytest.raises(reforge.InvalidInput) as e:
        plan.run({"input_ids": ids.astype(np.float32)})
    assert str(e.value) == cli_error("run", path, "--input", "input_ids=%s" % (tmp_path / "ids_f.npy"))
    assert "int64" in str(e.value)

    # A missing input is an error in the library, as in the CLI (`reforge run` makes one up only
    # when asked: --synthesize-missing).
    with pytest.raises(reforge.InvalidInput) as e:
        plan.run({})
    assert str(e.value) == "missing input 'input_ids' (int64[2,16])"

    with pytest.raises(reforge.InvalidInput, match="complex"):
        plan.run({"input_ids": ids.astype(np.complex64)})


def test_invalid_model_is_invalid_model(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not an ONNX model" * 3)
    with pytest.raises(reforge.InvalidModel) as e:
        reforge.build(bad)
    assert str(e.value) == cli_error("build", bad, "-o", tmp_path / "x.plan")
    with pytest.raises(reforge.InvalidModel):
        reforge.check(bad)


def test_inconsistent_options_are_errors():
    with pytest.raises(reforge.Error, match="refit"):
        reforge.build(hf_onnx("gpt2", "A"), strip_weights=True)  # stripping needs a refit mode
    with pytest.raises(reforge.Error, match="precision"):
        reforge.build(hf_onnx("gpt2", "A"), precision="fp8")
    with pytest.raises(ValueError):
        reforge.build(hf_onnx("gpt2", "A"), refit="maybe")


def _with_nan(tmp_path):
    """hf gpt2 A with element [1, 2] of one weight (found by its bytes: the checkpoint's
    transformer.h.0.attn.c_proj.weight, float32[64,64]) set to NaN."""
    import safetensors.numpy

    weight = safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "A")))["transformer.h.0.attn.c_proj.weight"]
    data = bytearray(hf_onnx("gpt2", "A").read_bytes())
    at = data.find(weight.tobytes())
    assert at >= 0 and data.find(weight.tobytes(), at + 1) < 0
    data[at + 66 * 4 : at + 67 * 4] = np.array([np.nan], np.float32).tobytes()
    path = tmp_path / "nan.onnx"
    path.write_bytes(bytes(data))
    return path


def test_build_refuses_nonfinite_weights_as_refit_does(tmp_path):
    path = _with_nan(tmp_path)
    for refit in (False, True, ["*c_fc*"]):  # baked, refittable, baked in an individual plan
        with pytest.raises(reforge.InvalidModel) as e:
            reforge.build(path, refit=refit)
        assert "holds NaN at index [1, 2] (flat index 66 of float32[64,64])" in str(e.value)
        assert "allow_nonfinite" in str(e.value) or "--allow-nonfinite" in str(e.value)
    assert str(e.value) == cli_error("build", path, "--refit-individual", "*c_fc*", "-o", tmp_path / "x.plan")
    assert not (tmp_path / "x.plan").exists()
    # Accepted when asked: what the weights then compute is the caller's business.
    plan = reforge.build(path, allow_nonfinite=True)
    out = plan.run(hf_inputs("gpt2"))
    assert any(np.isnan(v).any() for v in out.values())


def test_numeric_parameters_are_range_checked():
    model = hf_onnx("gpt2", "A")
    for threads in (-3, -1, 1025):
        with pytest.raises(ValueError, match=r"threads must be from 0 to 1024 \(0: all cores\), got %d" % threads):
            reforge.build(model, threads=threads)
    with pytest.raises(ValueError, match="threads must be from 0 to 1024"):
        reforge.load("/nonexistent/m.plan", threads=-3)  # checked before the file is looked at
    with pytest.raises(TypeError, match="threads must be an integer"):
        reforge.build(model, threads=1.5)
    for block in (0, 8, 24, 1 << 21):
        with pytest.raises(ValueError, match="block_size must be a power of two from 16 to 1048576, got %d" % block):
            reforge.build(model, precision="int4", block_size=block)
    with pytest.raises(ValueError, match="block_size applies to precision='int4' only"):
        reforge.build(model, block_size=32)
    # The ends of the ranges build, and the block size is the plan's.
    ref = reforge.build(model, precision="int4").run(hf_inputs("gpt2"))
    same = reforge.build(model, precision="int4", block_size=32, threads=1).run(hf_inputs("gpt2"))
    assert all(np.array_equal(ref[k], same[k]) for k in ref)
    other = reforge.build(model, precision="int4", block_size=16).run(hf_inputs("gpt2"))
    assert any(not np.array_equal(ref[k], other[k]) for k in ref)
