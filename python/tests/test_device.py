"""device=: a plan built for the CUDA backend records it, shows where each node runs, and its
outputs match the CPU plan's (numpy in, numpy out). Where no GPU can run it, build() raises
reforge.Error saying so (a Python plan is ready to run once built)."""

import numpy as np
import pytest

import reforge
from conftest import hf_inputs, hf_onnx


def test_cuda_plan_records_its_device_and_matches_the_cpu():
    cpu = reforge.build(hf_onnx("gpt2", "A"))
    try:
        gpu = reforge.build(hf_onnx("gpt2", "A"), device="cuda")
    except reforge.Error as e:
        if "backend 'cuda' is not registered" in str(e):
            pytest.skip("reforge is built without CUDA")
        assert "placed on backend 'cuda', which cannot run here" in str(e), str(e)
        pytest.skip("no usable GPU: " + str(e))
    assert cpu.device == "cpu" and gpu.device == "cuda"
    placement = gpu.inspect()["placement"]
    backends = {p["backend"] for p in placement}
    assert "cuda" in backends and backends <= {"cuda", "cpu"}
    inputs = hf_inputs("gpt2")
    want = cpu.run(inputs)
    got = gpu.run(inputs)
    assert list(got) == list(want) and len(want) > 0
    for name, w in want.items():
        g = got[name]
        assert isinstance(g, np.ndarray) and g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)


def test_unknown_device_is_an_error_naming_it():
    with pytest.raises(reforge.Error) as e:
        reforge.build(hf_onnx("gpt2", "A"), device="tpu")
    assert "'tpu'" in str(e.value)


def test_timing_cache_refusals_name_the_file_and_line(tmp_path):
    bad = tmp_path / "t.cache"
    bad.write_text("reforge timing cache 1\ndevice Some GPU\ncudnn 91300\n0 0 1 4 -> 99\n")
    with pytest.raises(reforge.Error) as e:
        reforge.load_timing_cache(bad)
    if "keeps no timing cache" in str(e.value):
        pytest.skip("reforge is built without CUDA")
    assert f"timing cache '{bad}': line 4: algorithm 99 is outside cuDNN's range" in str(e.value)
    assert reforge.load_timing_cache(tmp_path / "absent.cache") is False
    with pytest.raises(reforge.Error) as e:
        reforge.load_timing_cache(bad, device="cpu")
    assert "backend 'cpu' keeps no timing cache" in str(e.value)


def test_a_gpu_refit_makes_the_weights_on_the_gpu_unless_host_replay():
    """A bf16 CUDA plan of a real export, bound to checkpoint A, refit to B: by default the weights
    the GPU holds alone are made there (the report counts them), with host_replay=True every
    recipe replays on the host; the outputs are the same bit for bit."""
    from conftest import hf_checkpoint

    model = "llama_decode"
    plans = []
    for host in (False, True):
        try:
            p = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"),
                              precision="bf16", device="cuda")
        except reforge.Error as e:
            if "backend 'cuda' is not registered" in str(e):
                pytest.skip("reforge is built without CUDA")
            pytest.skip("no usable GPU: " + str(e))
        report = p.refit(hf_checkpoint(model, "B"), host_replay=host)
        if host:
            assert report["weights_on_device"] == 0, report
        else:
            assert report["weights_on_device"] > 0, report
        plans.append(p)
    inputs = hf_inputs(model)
    device, host = plans[0].run(inputs), plans[1].run(inputs)
    for name in host:
        assert np.array_equal(device[name], host[name]), name
