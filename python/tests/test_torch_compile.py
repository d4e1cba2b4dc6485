"""reforge.torch.compile, Torch-TensorRT's workflow: a torch.nn.Module in, a callable plan out,
refit from a module or a state dict in place. References are the modules themselves, run by
PyTorch on the same inputs: outputs agree within ATOL (float32; the CPU plan and PyTorch sum in
other orders), a refit from a second module (another seed) agrees with that module, and a refused
refit leaves the outputs bit for bit as they were.

Needs torch with its ONNX exporter (onnxscript); skipped without them."""

import numpy as np
import pytest

import reforge

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
rt = pytest.importorskip("reforge.torch")

ATOL = 1e-5  # float32 outputs of the small nets: max |reforge - PyTorch|
HF_ATOL = 1e-4  # logits of the tiny transformers models (as conftest.TOLERANCE)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


class ConvNet(torch.nn.Module):
    """Conv + BatchNorm (with running statistics away from 0 and 1) twice, pooling, a Linear;
    returns (logits, features)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn1(self.c1(x)))
        y = torch.relu(self.bn2(self.c2(y)))
        features = y.mean(dim=(2, 3))
        return self.fc(features), features


def seeded(cls, seed, dtype=torch.float32):
    torch.manual_seed(seed)
    m = cls()
    with torch.no_grad():
        for bn in [x for x in m.modules() if isinstance(x, torch.nn.BatchNorm2d)]:
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return m.to(dtype).eval()


def reference(module, *args, **kwargs):
    with torch.no_grad():
        return module(*args, **kwargs)


def assert_close(got, want, atol, rtol=0.0):
    assert isinstance(got, torch.Tensor), type(got)
    assert got.dtype == want.dtype and got.device == want.device and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


def test_mlp_returns_a_tensor_equal_to_pytorchs():
    a = seeded(MLP, 0)
    x = torch.randn(4, 16)
    compiled = rt.compile(a, (x,))
    assert compiled.plan.mode == "refit" and compiled.plan.missing == []
    assert [v.name for v in compiled.plan.outputs] == ["output"]
    assert_close(compiled(x), reference(a, x), ATOL)
    # An input that needs a gradient is read as it is (detached), as is a non-contiguous one.
    x2 = torch.randn(16, 4).t().requires_grad_()
    assert_close(compiled(x2), reference(a, x2.detach()), ATOL)


def test_convnet_tuple_and_refit_from_a_second_module():
    a, b = seeded(ConvNet, 0), seeded(ConvNet, 1)
    x = torch.randn(2, 3, 12, 12)
    a.train()  # exported in eval mode (BatchNorm's running statistics), then left in training mode
    compiled = rt.compile(a, (x,))
    assert a.training and a.bn1.training
    a.eval()
    assert [v.name for v in compiled.plan.outputs] == ["output_0", "output_1"]
    out = compiled(x)
    assert isinstance(out, tuple) and len(out) == 2
    for got, want in zip(out, reference(a, x)):
        assert_close(got, want, ATOL)
    report = compiled.refit(b)  # a module: its state_dict()
    assert report["unused_checkpoint_tensors"] == ["bn1.num_batches_tracked", "bn2.num_batches_tracked"]
    for got, want in zip(compiled(x), reference(b, x)):
        assert_close(got, want, ATOL)
    compiled.refit(a.state_dict())  # a state dict
    for got, want in zip(compiled(x), reference(a, x)):
        assert_close(got, want, ATOL)


def test_a_refused_refit_names_the_key_and_leaves_the_weights():
    a, b = seeded(ConvNet, 0), seeded(ConvNet, 1)
    x = torch.randn(2, 3, 12, 12)
    compiled = rt.compile(a, (x,))
    before = [t.clone() for t in compiled(x)]

    def unchanged():
        for got, want in zip(compiled(x), before):
            assert torch.equal(got, want)

    missing = b.state_dict()
    del missing["bn2.running_var"]
    with pytest.raises(reforge.RefitRefused) as e:
        compiled.refit(missing)
    assert "'bn2.running_var'" in str(e.value)
    unchanged()

    misshaped = b.state_dict()
    misshaped["fc.weight"] = torch.randn(10, 17)
    with pytest.raises(reforge.RefitRefused) as e:
        compiled.refit(misshaped)
    assert "'fc.weight'" in str(e.value) and "[10,17]" in str(e.value) and "[10,16]" in str(e.value), str(e.value)
    unchanged()

    mistyped = b.state_dict()
    mistyped["c1.weight"] = mistyped["c1.weight"].double()
    with pytest.raises(reforge.RefitRefused) as e:
        compiled.refit(mistyped)
    assert "'c1.weight'" in str(e.value) and "float64" in str(e.value), str(e.value)
    unchanged()

    with pytest.raises(TypeError, match="torch.nn.Module or a state dict"):
        compiled.refit(42)
    unchanged()
    compiled.refit(b)  # the good weights still go in
    for got, want in zip(compiled(x), reference(b, x)):
        assert_close(got, want, ATOL)


def test_dynamic_batch_and_a_fixed_shape_refusal():
    a = seeded(MLP, 0)
    batch = torch.export.Dim("batch", min=1, max=64)
    dynamic = rt.compile(a, (torch.randn(3, 16),), dynamic_shapes={"x": {0: batch}})
    assert dynamic.plan.inputs[0].shape == ("batch", 16)
    for n in (1, 5, 17):
        x = torch.randn(n, 16)
        assert_close(dynamic(x), reference(a, x), ATOL)
    fixed = rt.compile(a, (torch.randn(3, 16),))
    with pytest.raises(reforge.InvalidInput) as e:
        fixed(torch.randn(5, 16))
    assert "'x'" in str(e.value) and "[3,16]" in str(e.value), str(e.value)


class Heads(torch.nn.Module):
    """Keyword arguments, a constant one, and a dict result holding a tuple and an int64 tensor."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 6)

    def forward(self, x, mask=None, scale=1.0):
        y = self.proj(x) * scale
        if mask is not None:
            y = y * mask
        return {"scores": y, "best": (y.argmax(-1), y.max(-1).values)}


def test_keyword_arguments_constants_and_a_dict_result():
    a = seeded(Heads, 0)
    x, mask = torch.randn(3, 16), (torch.rand(3, 6) > 0.3).float()
    compiled = rt.compile(a, (x,), example_kwargs={"mask": mask, "scale": 2.0})
    assert [v.name for v in compiled.plan.outputs] == ["scores", "best.0", "best.1"]
    got, want = compiled(x, mask=mask, scale=2.0), reference(a, x, mask=mask, scale=2.0)
    assert list(got) == ["scores", "best"] and isinstance(got["best"], tuple)
    assert_close(got["scores"], want["scores"], ATOL)
    assert got["best"][0].dtype == torch.int64 and torch.equal(got["best"][0], want["best"][0])
    assert_close(got["best"][1], want["best"][1], ATOL)
    with pytest.raises(ValueError, match=r"Heads \(compiled\): kwargs\['scale'\] is 3.0, but it was 2.0"):
        compiled(x, mask=mask, scale=3.0)
    with pytest.raises(TypeError, match="another structure"):
        compiled(x, mask=mask)
    with pytest.raises(TypeError, match=r"kwargs\['mask'\] must be a torch tensor"):
        compiled(x, mask=mask.numpy(), scale=2.0)


# Half-precision outputs may round the other way from PyTorch's: up to two units in the last place.
@pytest.mark.parametrize("dtype, atol, rtol", [(torch.float64, 1e-12, 0.0), (torch.bfloat16, 1e-2, 2**-6),
                                               (torch.float16, 1e-3, 2**-9)])
def test_outputs_keep_the_modules_dtype(dtype, atol, rtol):
    a = seeded(Heads, 0, dtype)
    x = torch.randn(3, 16, dtype=dtype)
    compiled = rt.compile(a, (x,))
    got, want = compiled(x), reference(a, x)
    assert_close(got["scores"], want["scores"], atol, rtol)
    assert got["best"][0].dtype == torch.int64


def test_save_stripped_and_load_with_weights(tmp_path):
    a, b = seeded(ConvNet, 0), seeded(ConvNet, 1)
    x = torch.randn(2, 3, 12, 12)
    compiled = rt.compile(a, (x,))
    path = tmp_path / "convnet.plan"
    compiled.save(path)
    compiled.save(tmp_path / "full.plan", strip=False)
    # Stripped: the plan leaves out at least the convolution and Linear weights' bytes.
    weight_bytes = sum(a.state_dict()[k].numel() * 4 for k in ("c1.weight", "c2.weight", "fc.weight"))
    assert (tmp_path / "full.plan").stat().st_size - path.stat().st_size >= weight_bytes
    assert (tmp_path / "convnet.plan.torch.json").exists()
    bare = rt.load(path)
    assert bare.plan.missing
    with pytest.raises(reforge.Error, match=r"stripped and 14 source\(s\) have no value yet; refit them first"):
        bare(x)
    loaded = rt.load(path, weights=b)
    out = loaded(x)
    assert isinstance(out, tuple)
    for got, want in zip(out, reference(b, x)):
        assert_close(got, want, ATOL)
    # strip=False keeps the weights: the file runs without any.
    for got, want in zip(rt.load(tmp_path / "full.plan")(x), reference(a, x)):
        assert_close(got, want, ATOL)


def test_load_of_a_plan_without_calling_convention(tmp_path):
    a = seeded(MLP, 0)
    x = torch.randn(4, 16)
    compiled = rt.compile(a, (x,), strip_weights=False)
    compiled.plan.save(tmp_path / "plain.plan")  # a Plan's save writes no calling convention
    loaded = rt.load(tmp_path / "plain.plan")
    assert_close(loaded(x), reference(a, x), ATOL)  # one output: a tensor


def test_baked_plans_and_option_errors():
    a = seeded(MLP, 0)
    x = torch.randn(4, 16)
    baked = rt.compile(a, (x,), refit=False)
    assert baked.plan.mode == "baked"
    assert_close(baked(x), reference(a, x), ATOL)
    with pytest.raises(ValueError, match="strip_weights needs a refittable plan"):
        rt.compile(a, (x,), refit=False, strip_weights=True)
    with pytest.raises(TypeError, match="takes a torch.nn.Module"):
        rt.compile(lambda t: t, (x,))
    with pytest.raises(TypeError, match="example_inputs"):
        rt.compile(a, x.numpy())
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        rt.compile(a, (x,), device="tpu")
    with pytest.raises(TypeError, match="checkpoint"):
        rt.compile(a, (x,), checkpoint={})


def test_identical_refit_and_build_options():
    a, b = seeded(MLP, 0), seeded(MLP, 1)
    x = torch.randn(4, 16)
    # refit="identical": the stripped plan takes the build's weights back, and refuses others.
    identical = rt.compile(a, (x,), refit="identical")
    assert identical.plan.mode == "refit-identical"
    before = identical(x).clone()
    identical.refit(a)
    with pytest.raises(reforge.RefitRefused, match="up.weight"):
        identical.refit(b)
    assert torch.equal(identical(x), before)
    # Options of reforge.build pass through: bf16 weight storage (activations stay float32).
    bf16 = rt.compile(a, (x,), precision="bf16", threads=1)
    assert bf16.plan.inspect()["precision"] == "bf16"
    got, want = bf16(x), reference(a, x)
    assert got.dtype == torch.float32
    assert 0 < (got - want).abs().max() <= 1e-2 * want.abs().max()
    bf16.refit(b)
    assert (bf16(x) - reference(b, x)).abs().max() <= 1e-2 * reference(b, x).abs().max()


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: torch.export refuses it
            return x * 2
        return x


def test_a_module_that_fails_to_export_is_named_with_the_exporters_error():
    with pytest.raises(reforge.InvalidModel) as e:
        rt.compile(Branchy(), (torch.randn(3),))
    message = str(e.value)
    assert message.startswith("reforge.torch.compile: torch.onnx.export could not export Branchy: ")
    assert "data-dependent" in message
    assert e.value.__cause__ is not None


def test_cuda_where_no_gpu_runs_is_a_clear_error():
    a = seeded(MLP, 0)
    x = torch.randn(4, 16)
    try:
        compiled = rt.compile(a, (x,), device="cuda")
    except reforge.Error as e:
        message = str(e)
        assert message.startswith("reforge.torch.compile(MLP): "), message
        assert "backend 'cuda' is not registered" in message or "cannot run here" in message, message
        return
    # A usable GPU: CUDA inputs give CUDA outputs, equal to PyTorch's on the CPU.
    assert compiled.plan.device == "cuda"
    got = compiled(x.cuda())
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), reference(a, x), atol=1e-4, rtol=0)


def test_plan_run_gives_torch_for_torch_and_numpy_for_numpy():
    a = seeded(ConvNet, 0)
    x = torch.randn(2, 3, 12, 12)
    plan = rt.compile(a, (x,)).plan
    want = reference(a, x)
    as_torch = plan.run({"x": x})
    assert all(isinstance(v, torch.Tensor) for v in as_torch.values())
    for got, w in zip(as_torch.values(), want):
        assert_close(got, w, ATOL)
    as_numpy = plan.run({"x": x.numpy()})
    assert all(isinstance(v, np.ndarray) for v in as_numpy.values())
    for name in as_numpy:
        np.testing.assert_array_equal(as_numpy[name], as_torch[name].numpy())
    # ONNX Runtime's order: a list, torch for torch.
    logits, = plan.run(["output_0"], {"x": x})
    assert_close(logits, want[0], ATOL)


def test_run_writes_into_given_outputs():
    a = seeded(ConvNet, 0)
    x = torch.randn(2, 3, 12, 12)
    plan = rt.compile(a, (x,)).plan
    want = reference(a, x)
    into_np = np.full((2, 10), np.nan, np.float32)
    out = plan.run({"x": x.numpy()}, outputs={"output_0": into_np})
    assert out["output_0"] is into_np
    np.testing.assert_allclose(into_np, want[0].numpy(), atol=ATOL, rtol=0)
    into_t = torch.full((2, 16), float("nan"))
    got = plan.run(None, {"x": x}, outputs={"output_1": into_t})
    assert got[1] is into_t
    assert_close(into_t, want[1], ATOL)
    with pytest.raises(reforge.InvalidInput, match=r"outputs\['output_0'\]: the output is float32\[2, 10\]"):
        plan.run({"x": x}, outputs={"output_0": torch.empty(3, 10)})
    with pytest.raises(reforge.InvalidInput, match="float64"):
        plan.run({"x": x.numpy()}, outputs={"output_0": np.empty((2, 10))})
    with pytest.raises(reforge.InvalidInput, match="'nope' is not an output"):
        plan.run({"x": x}, outputs={"nope": into_np})
    read_only = np.empty((2, 10), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(reforge.InvalidInput, match="read-only"):
        plan.run({"x": x.numpy()}, outputs={"output_0": read_only})


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_tiny_transformers_models(family, tmp_path):
    transformers = pytest.importorskip("transformers")

    def make(seed):
        torch.manual_seed(seed)
        if family == "llama":
            config = transformers.LlamaConfig(
                vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
            return transformers.LlamaForCausalLM(config).eval()
        config = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                         use_cache=False)
        return transformers.GPT2LMHeadModel(config).eval()

    a, b = make(0), make(1)
    torch.manual_seed(2)
    ids = torch.randint(0, 96, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.int64)
    compiled = rt.compile(a, (ids,), example_kwargs={"attention_mask": mask})
    assert [v.name for v in compiled.plan.outputs] == ["logits"]
    out, want = compiled(ids, attention_mask=mask), reference(a, ids, attention_mask=mask)
    assert type(out) is type(want) and list(out.keys()) == ["logits"]
    assert_close(out.logits, want.logits, HF_ATOL)
    compiled.refit(b)
    assert_close(compiled(ids, attention_mask=mask).logits, reference(b, ids, attention_mask=mask).logits, HF_ATOL)
    # A state dict with a misshaped embedding is refused; B's weights stay.
    bad = b.state_dict()
    embedding = next(k for k in bad if k.endswith("embed_tokens.weight") or k.endswith("wte.weight"))
    bad[embedding] = bad[embedding][:-1]
    with pytest.raises(reforge.RefitRefused, match=embedding.replace(".", r"\.")):
        compiled.refit(bad)
    assert_close(compiled(ids, attention_mask=mask).logits, reference(b, ids, attention_mask=mask).logits, HF_ATOL)
    # Saved and loaded: the ModelOutput comes back as the same class.
    compiled.save(tmp_path / "lm.plan")
    loaded = rt.load(tmp_path / "lm.plan", weights=a)
    out = loaded(ids, attention_mask=mask)
    assert type(out) is type(want)
    assert_close(out.logits, want.logits, HF_ATOL)
