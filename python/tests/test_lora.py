"""LoRA adapters (Plan.refit(base, lora=...)) on the real `transformers` Llama of models/hf/llama
and the PEFT adapters made for it (models/hf/llama/lora, scripts/models/export_hf_lora.py).

A refit from base + adapter runs, bit for bit, the outputs of a refit from the checkpoint that a
float64 numpy reference of the stated merge arithmetic (docs/refit.md, "LoRA adapters") makes, and
PEFT's outputs within 1e-4; named versions per adapter switch by name, A -> B -> A exactly; the
adapter as (tensors, config) equals its folder; refusals carry the CLI's message. Where torch and
peft are importable, a live PEFT model's adapter (get_peft_model_state_dict, its LoraConfig) is
refit from memory and compared with PEFT's own outputs and merge_and_unload."""

import json
import math

import numpy as np
import pytest
import safetensors.numpy

import reforge
from conftest import HF, TOLERANCE, cli_error, hf_checkpoint, hf_inputs, hf_onnx, hf_reference

LORA = HF / "llama" / "lora"
PREFIX = "base_model.model."


def plan_of():
    return reforge.build(hf_onnx("llama", "A"), refit=True, checkpoint=hf_checkpoint("llama", "A"), threads=1)


def logits(plan, **kw):
    return plan.run(hf_inputs("llama"), **kw)["logits"]


def reference_merge(w, a, b, alpha, r, rslora, multiplier=1.0):
    """docs/refit.md's arithmetic in float64, rounded to float32 after every step."""
    f64 = np.float64
    scale = np.float32((alpha / math.sqrt(r) if rslora else alpha / r) * multiplier)
    acc = np.zeros(w.shape, np.float32)
    for k in range(r):
        p = (b[:, k : k + 1].astype(f64) * a[k : k + 1, :].astype(f64)).astype(np.float32)
        acc = (acc.astype(f64) + p.astype(f64)).astype(np.float32)
    d = (acc.astype(f64) * f64(scale)).astype(np.float32)
    return (w.astype(f64) + d.astype(f64)).astype(np.float32)


def merged_checkpoint(adapter, multiplier=1.0):
    base = safetensors.numpy.load_file(str(hf_checkpoint("llama", "A")))
    tensors = safetensors.numpy.load_file(str(LORA / adapter / "adapter_model.safetensors"))
    config = json.loads((LORA / adapter / "adapter_config.json").read_text())
    out = dict(base)
    for key in tensors:
        if key.endswith(".lora_A.weight"):
            module = key[len(PREFIX) : -len(".lora_A.weight")]
            b = tensors[PREFIX + module + ".lora_B.weight"]
            out[module + ".weight"] = reference_merge(base[module + ".weight"], tensors[key], b, config["lora_alpha"],
                                                      config["r"], config["use_rslora"], multiplier)
    return out


@pytest.mark.parametrize("adapter", ["A", "B"])
def test_refit_with_an_adapter_is_the_reference_merge_bit_for_bit(adapter):
    plan = plan_of()
    report = plan.refit(hf_checkpoint("llama", "A"), lora=LORA / adapter)
    assert report["lora"]["r"] == json.loads((LORA / adapter / "adapter_config.json").read_text())["r"]
    assert len(report["lora"]["merged"]) == (14 if adapter == "A" else 6)
    out = logits(plan)
    reference = plan_of()
    reference.refit(merged_checkpoint(adapter))
    np.testing.assert_array_equal(out, logits(reference))
    peft = np.load(LORA / "reference" / adapter / "logits.npy")
    assert np.abs(out - peft).max() <= TOLERANCE
    assert np.abs(out - hf_reference("llama", "A")["logits"]).max() > 1e-2  # the adapter changes the outputs
    # lora_scale multiplies alpha / r.
    plan.refit(hf_checkpoint("llama", "A"), lora=LORA / adapter, lora_scale=0.5)
    reference.refit(merged_checkpoint(adapter, 0.5))
    np.testing.assert_array_equal(logits(plan), logits(reference))


def test_a_version_per_adapter_switches_by_name():
    plan = plan_of()
    base = hf_checkpoint("llama", "A")
    plan.refit(base, lora=LORA / "A", version="A")
    plan.refit(base, lora=LORA / "B", version="B")
    a, b = logits(plan, version="A"), logits(plan, version="B")
    assert not np.array_equal(a, b)
    assert np.abs(logits(plan) - hf_reference("llama", "A")["logits"]).max() <= TOLERANCE  # the base still current
    # A -> B -> A in one version: A's outputs again, bit for bit.
    plan.refit(base, lora=LORA / "B", version="A")
    np.testing.assert_array_equal(logits(plan, version="A"), b)
    plan.refit(base, lora=LORA / "A", version="A")
    for _ in range(2):
        np.testing.assert_array_equal(logits(plan, version="A"), a)
        np.testing.assert_array_equal(logits(plan, version="B"), b)
    assert plan.versions() == ["A", "B"]


def test_tensors_and_config_in_memory_equal_the_folder():
    from_dir = plan_of()
    from_dir.refit(hf_checkpoint("llama", "A"), lora=LORA / "B")
    tensors = safetensors.numpy.load_file(str(LORA / "B" / "adapter_model.safetensors"))
    config = json.loads((LORA / "B" / "adapter_config.json").read_text())
    config["target_modules"] = set(config["target_modules"])  # as a LoraConfig holds them
    from_memory = plan_of()
    state = safetensors.numpy.load_file(str(hf_checkpoint("llama", "A")))
    report = from_memory.refit(state, lora=(tensors, config))
    assert report["lora"]["adapter"] == "LoRA adapter (tensors in memory)"
    np.testing.assert_array_equal(logits(from_memory), logits(from_dir))


def test_refusals_carry_the_cli_message(tmp_path):
    plan = plan_of()
    before = logits(plan)
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(hf_checkpoint("llama", "A"), lora=LORA / "dora", version="D")
    assert "uses DoRA (weight-decomposed LoRA)" in str(e.value)
    path = tmp_path / "a.plan"
    plan.save(path)
    assert cli_error("refit", path, "--weights", hf_checkpoint("llama", "A"), "--lora", LORA / "dora") == str(e.value)
    tensors = safetensors.numpy.load_file(str(LORA / "A" / "adapter_model.safetensors"))
    with pytest.raises(reforge.RefitRefused, match="'lora_alpha' must be a finite number"):
        plan.refit(hf_checkpoint("llama", "A"), lora=(tensors, {"r": 4}))
    with pytest.raises(reforge.RefitRefused, match="an ONNX model's sources are read by graph position"):
        plan.refit(hf_onnx("llama", "B"), lora=LORA / "A")
    with pytest.raises(TypeError, match="lora is a PEFT adapter's folder"):
        plan.refit(hf_checkpoint("llama", "A"), lora=42)
    assert plan.versions() == []
    np.testing.assert_array_equal(logits(plan), before)


def test_a_live_peft_model():
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    config = transformers.LlamaConfig.from_dict(json.loads((HF / "llama" / "export.json").read_text())["config"])
    model = transformers.LlamaForCausalLM(config).eval()
    model.load_state_dict(load_file(str(hf_checkpoint("llama", "A"))))
    base_state = {k: v.clone() for k, v in model.state_dict().items()}
    lora_config = peft.LoraConfig(r=6, lora_alpha=12, target_modules=["k_proj", "o_proj", "up_proj"],
                                  init_lora_weights=False)
    peft_model = peft.get_peft_model(model, lora_config).eval()
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in sorted(peft_model.named_parameters()):
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    ids = torch.from_numpy(hf_inputs("llama")["input_ids"])
    with torch.no_grad():
        want = peft_model(input_ids=ids).logits.numpy()
    adapter = peft.get_peft_model_state_dict(peft_model)
    plan = plan_of()
    plan.refit(base_state, lora=(adapter, peft_model.peft_config["default"]), version="live")
    out = logits(plan, version="live")
    assert np.abs(out - want).max() <= TOLERANCE
    merged = {k: v.contiguous() for k, v in peft_model.merge_and_unload().state_dict().items()}
    by_peft = plan_of()
    by_peft.refit(merged)
    assert np.abs(out - logits(by_peft)).max() <= 1e-5
