"""torch CUDA tensors in, torch CUDA tensors out: a CUDA plan reads CUDA inputs on the GPU and
returns its outputs there, as new tensors of torch's allocator that stay valid after later runs.
References: the CPU plan of the same model (which the other tests hold to PyTorch's outputs), the
exported models' PyTorch outputs (models/hf/*/reference) and, for reforge.torch.compile, the
modules themselves run by PyTorch. Tolerances: 1e-4 for float32 (the GPU sums in other orders),
2e-2 relative for 16-bit outputs.

The GPU tests skip where torch sees no GPU or reforge is built without CUDA; the tests of the CPU
path and of the argument checks run everywhere torch is installed."""

import gc

import numpy as np
import pytest

import reforge
from conftest import TOLERANCE, hf_inputs, hf_onnx, hf_reference

torch = pytest.importorskip("torch")

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA GPU")

ATOL = 1e-4  # float32: max |CUDA plan - CPU plan| and |CUDA plan - PyTorch|
RTOL_16 = 2e-2  # float16 and bfloat16 outputs, relative


def cuda_plan(model, **options):
    try:
        return reforge.build(model, device="cuda", **options)
    except reforge.Error as e:
        if "backend 'cuda' is not registered" in str(e):
            pytest.skip("reforge is built without CUDA")
        raise


def torch_inputs(model, device):
    return {k: torch.from_numpy(v).to(device) for k, v in hf_inputs(model).items()}


def assert_on(values, device):
    for name, v in values.items():
        assert isinstance(v, torch.Tensor), (name, type(v))
        assert v.device == device, (name, v.device)



def compile_on_cuda(rt, module, x):
    """reforge.torch.compile of `module` for CUDA, or a skip where reforge is built without CUDA."""
    try:
        return rt.compile(module, (x,), device="cuda")
    except reforge.Error as e:
        if "backend 'cuda' is not registered" in str(e):
            pytest.skip("reforge is built without CUDA")
        raise

@needs_gpu
@pytest.mark.parametrize("model", ["llama", "gpt2", "bert"])
def test_cuda_inputs_give_cuda_outputs_equal_to_the_cpu_plans(model):
    device = torch.device("cuda", torch.cuda.current_device())
    cpu = reforge.build(hf_onnx(model, "A"))
    gpu = cuda_plan(hf_onnx(model, "A"))
    want = cpu.run(hf_inputs(model))
    reference = hf_reference(model, "A")
    before = torch.cuda.memory_allocated(device)
    got = gpu.run(torch_inputs(model, device))
    assert list(got) == list(want) and len(want) > 0
    assert_on(got, device)
    # The outputs are torch's: its allocator holds at least their bytes.
    assert torch.cuda.memory_allocated(device) - before >= sum(v.numel() * v.element_size() for v in got.values())
    for name, w in want.items():
        g = got[name].cpu().numpy()
        assert g.dtype == w.dtype and g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=0, atol=ATOL, err_msg=name)
        if name in reference:
            np.testing.assert_allclose(g, reference[name], rtol=0, atol=TOLERANCE, err_msg=name)


@needs_gpu
def test_results_stay_valid_after_later_runs_and_the_plan():
    # Each run's outputs are tensors of their own: a second and a third run (other inputs) leave
    # the first's values as they were, and they outlive the plan.
    device = torch.device("cuda", torch.cuda.current_device())
    gpu = cuda_plan(hf_onnx("llama", "A"))
    ids = torch_inputs("llama", device)["input_ids"]
    first = gpu.run({"input_ids": ids})["logits"]
    kept = first.cpu().clone()
    other = (ids + 7) % 128  # the model's vocabulary: 128 tokens
    second = gpu.run({"input_ids": other})["logits"]
    third = gpu.run({"input_ids": ids})["logits"]
    assert first.data_ptr() not in (second.data_ptr(), third.data_ptr())
    assert not torch.equal(second.cpu(), kept)  # other inputs, other logits
    assert torch.equal(first.cpu(), kept)  # bit for bit: the first run's tensor, untouched
    torch.testing.assert_close(third.cpu(), kept, rtol=0, atol=1e-6)  # the same inputs again
    del gpu
    gc.collect()
    torch.cuda.synchronize()
    assert torch.equal(first.cpu(), kept)
    np.testing.assert_allclose(kept.numpy(), hf_reference("llama", "A")["logits"], rtol=0, atol=TOLERANCE)


@needs_gpu
def test_preallocated_cuda_outputs_are_filled_on_the_device():
    device = torch.device("cuda", torch.cuda.current_device())
    gpu = cuda_plan(hf_onnx("llama", "A"))
    inputs = torch_inputs("llama", device)
    want = gpu.run(inputs)["logits"]
    dest = torch.full_like(want, float("nan"))
    got = gpu.run(inputs, outputs={"logits": dest})
    assert got["logits"] is dest and dest.device == device
    assert torch.equal(dest, want)
    # A numpy array in host memory takes a device run's output too.
    host = np.zeros(tuple(want.shape), np.float32)
    assert gpu.run(inputs, outputs={"logits": host})["logits"] is host
    np.testing.assert_array_equal(host, want.cpu().numpy())
    with pytest.raises(reforge.InvalidInput, match=r"outputs\['logits'\]: the output is float32"):
        gpu.run(inputs, outputs={"logits": torch.empty(3, device=device)})


@needs_gpu
def test_outputs_on_chooses_where_the_outputs_go():
    device = torch.device("cuda", torch.cuda.current_device())
    gpu = cuda_plan(hf_onnx("llama", "A"))
    want = reforge.build(hf_onnx("llama", "A")).run(hf_inputs("llama"))["logits"]
    on_host = gpu.run(torch_inputs("llama", device), outputs_on="host")["logits"]
    assert isinstance(on_host, torch.Tensor) and on_host.device.type == "cpu"
    np.testing.assert_allclose(on_host.numpy(), want, rtol=0, atol=ATOL)
    from_numpy = gpu.run(hf_inputs("llama"), outputs_on="device")["logits"]
    assert isinstance(from_numpy, torch.Tensor) and from_numpy.device == device
    np.testing.assert_allclose(from_numpy.cpu().numpy(), want, rtol=0, atol=ATOL)
    assert isinstance(gpu.run(hf_inputs("llama"))["logits"], np.ndarray)  # numpy in, numpy out


@needs_gpu
def test_inputs_written_on_a_side_stream_are_read_after_their_writes():
    # torch writes the inputs on a stream of its own, the run is called with that stream current:
    # reforge waits for it before reading, and the outputs are ready on it.
    device = torch.device("cuda", torch.cuda.current_device())
    gpu = cuda_plan(hf_onnx("llama", "A"))
    ids = torch_inputs("llama", device)["input_ids"]
    want = gpu.run({"input_ids": ids})["logits"].cpu()
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        big = torch.randn(4096, 4096, device=device)
        for _ in range(20):  # keep the stream busy while the inputs are written
            big = big @ big / 64
        fresh = torch.zeros_like(ids) + ids + big[0, 0].isnan().to(ids.dtype) * 0  # written after `big`
        got = gpu.run({"input_ids": fresh})["logits"]
        doubled = got * 2
    side.synchronize()
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=1e-6)
    torch.testing.assert_close(doubled.cpu(), got.cpu() * 2, rtol=0, atol=0)


@needs_gpu
def test_16_bit_outputs_on_the_device():
    rt = pytest.importorskip("reforge.torch")
    pytest.importorskip("onnxscript")
    device = torch.device("cuda", torch.cuda.current_device())
    for dtype in (torch.float16, torch.bfloat16):
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).to(dtype)
        x = torch.randn(4, 16, dtype=dtype)
        compiled = compile_on_cuda(rt, module, x)
        got = compiled(x.to(device))
        assert got.dtype == dtype and got.device == device
        with torch.no_grad():
            want = module.to(device)(x.to(device))
        module.cpu()
        torch.testing.assert_close(got.float(), want.float(), rtol=RTOL_16, atol=RTOL_16)


@needs_gpu
def test_torch_compile_on_cuda_returns_cuda_tensors_equal_to_the_modules():
    rt = pytest.importorskip("reforge.torch")
    pytest.importorskip("onnxscript")
    device = torch.device("cuda", torch.cuda.current_device())

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 10)

        def forward(self, x):
            features = torch.relu(self.conv(x)).mean(dim=(2, 3))
            return self.fc(features), features

    torch.manual_seed(0)
    module = Net().eval()
    x = torch.randn(2, 3, 12, 12)
    compiled = compile_on_cuda(rt, module, x)
    with torch.no_grad():
        want = module(x)
        conv_tf32 = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False  # float32 on both sides (reforge uses no TF32)
        try:
            want_cuda = module.to(device)(x.to(device))
        finally:
            torch.backends.cudnn.allow_tf32 = conv_tf32
    logits, features = compiled(x.to(device))
    for got, w, wc in ((logits, want[0], want_cuda[0]), (features, want[1], want_cuda[1])):
        assert isinstance(got, torch.Tensor) and got.device == device and got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), w, rtol=0, atol=ATOL)
        torch.testing.assert_close(got, wc, rtol=0, atol=ATOL)
    # CPU tensors in: CPU tensors out, the same values.
    cpu_logits, _ = compiled(x)
    assert cpu_logits.device.type == "cpu"
    torch.testing.assert_close(cpu_logits, want[0], rtol=0, atol=ATOL)


@needs_gpu
def test_cuda_inputs_to_a_cpu_plan_and_mixed_devices_are_refused_naming_the_input():
    device = torch.device("cuda", torch.cuda.current_device())
    cpu = reforge.build(hf_onnx("llama", "A"))
    ids = torch_inputs("llama", "cpu")["input_ids"]
    with pytest.raises(reforge.InvalidInput) as e:
        cpu.run({"input_ids": ids.to(device)})
    assert "input 'input_ids' is on %s, but the plan runs on the CPU" % device in str(e.value)
    gpu = cuda_plan(hf_onnx("bert", "A"))
    inputs = torch_inputs("bert", "cpu")
    first, second = list(inputs)[:2]
    inputs[second] = inputs[second].to(device)
    with pytest.raises(reforge.InvalidInput) as e:
        gpu.run(inputs)
    assert "input '%s' is on %s, but input '%s' is on cpu" % (second, device, first) in str(e.value)
    if torch.cuda.device_count() > 1:
        other = torch.device("cuda", (device.index + 1) % torch.cuda.device_count())
        with pytest.raises(reforge.InvalidInput) as e:
            gpu.run({k: v.to(other) for k, v in inputs.items()})
        assert "is on %s, but reforge runs on the current CUDA device, %s" % (other, device) in str(e.value)


def test_torch_cpu_inputs_keep_the_cpu_path():
    # Runs everywhere: CPU tensors in, CPU tensors out over the engine's buffers, whatever
    # outputs_on says about the host; a CPU plan refuses outputs_on="device".
    plan = reforge.build(hf_onnx("llama", "A"))
    inputs = torch_inputs("llama", "cpu")
    want = hf_reference("llama", "A")["logits"]
    for outputs_on in (None, "host"):
        got = plan.run(inputs, outputs_on=outputs_on)["logits"]
        assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=TOLERANCE)
    with pytest.raises(reforge.InvalidInput, match="outputs_on='device': the plan runs on the CPU"):
        plan.run(inputs, outputs_on="device")
