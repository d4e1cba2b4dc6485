"""The bundled real exports (models/hf: GPT-2, BERT, Llama, T5, ViT, exported by PyTorch's dynamo
exporter, with PyTorch's outputs for weights A and B): built bound to checkpoint A, saved and
loaded, run, and refit to B from every kind of source Python offers, each compared with PyTorch's
reference outputs for B (the independent reference), as tests/hf_checkpoint_test.cc does in C++."""

import numpy as np
import pytest
import safetensors.numpy

import reforge
from conftest import HF, HF_MODELS, TOLERANCE, hf_checkpoint, hf_inputs, hf_onnx, hf_reference, max_diff


@pytest.mark.parametrize("model", HF_MODELS)
def test_build_save_load_run_and_refit_match_pytorch(model, tmp_path):
    inputs = hf_inputs(model)
    ref_a, ref_b = hf_reference(model, "A"), hf_reference(model, "B")
    assert max_diff(ref_a, ref_b) > 100 * TOLERANCE  # the two weight sets are told apart

    plan = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"))
    assert max_diff(plan.run(inputs), ref_a) <= TOLERANCE
    plan.save(tmp_path / "a.plan")
    plan = reforge.load(tmp_path / "a.plan")
    assert max_diff(plan.run(inputs), ref_a) <= TOLERANCE

    # From B's safetensors checkpoint, through the bindings recorded at build.
    report = plan.refit(hf_checkpoint(model, "B"))
    assert report["from"] == "checkpoint" and report["weights_replayed"] > 0
    assert max_diff(plan.run(inputs), ref_b) <= TOLERANCE

    # Back to A, then from a dict of numpy arrays holding B (checkpoint names).
    plan.refit(hf_checkpoint(model, "A"))
    assert max_diff(plan.run(inputs), ref_a) <= TOLERANCE
    state = safetensors.numpy.load_file(str(hf_checkpoint(model, "B")))
    report = plan.refit(state)
    assert report["from"] == "checkpoint"
    assert max_diff(plan.run(inputs), ref_b) <= TOLERANCE

    # The refit plan saved and loaded runs B.
    plan.save(tmp_path / "b.plan")
    assert max_diff(reforge.load(tmp_path / "b.plan").run(inputs), ref_b) <= TOLERANCE

    # From B's re-exported ONNX model, fast and verified against a rebuild.
    plan = reforge.load(tmp_path / "a.plan")
    report = plan.refit(hf_onnx(model, "B"), mode="verify")
    assert report["from"] == "onnx" and report["verified_weights"] > 0
    assert max_diff(plan.run(inputs), ref_b) <= TOLERANCE


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_stripped_plan_refuses_to_run_until_refit(model, tmp_path):
    inputs = hf_inputs(model)
    plan = reforge.build(hf_onnx(model, "A"), refit=True, strip_weights=True, checkpoint=hf_checkpoint(model, "A"))
    assert plan.missing
    plan.save(tmp_path / "s.plan")  # stripped: nothing to store
    with pytest.raises(reforge.Error, match="stripped"):
        plan.run(inputs)
    plan = reforge.load(tmp_path / "s.plan")
    info = plan.inspect()
    assert info["stripped"] and info["file_bytes"] == (tmp_path / "s.plan").stat().st_size
    plan.refit(safetensors.numpy.load_file(str(hf_checkpoint(model, "B"))))
    assert plan.missing == []
    assert max_diff(plan.run(inputs), hf_reference(model, "B")) <= TOLERANCE


def test_unbound_plan_refits_from_onnx_and_refuses_a_checkpoint():
    model = "llama"
    inputs = hf_inputs(model)
    plan = reforge.build(hf_onnx(model, "A"), refit=True)
    assert plan.sources and all(s["refittable"] for s in plan.sources)
    plan.refit(hf_onnx(model, "B"))
    assert max_diff(plan.run(inputs), hf_reference(model, "B")) <= TOLERANCE
    with pytest.raises(reforge.RefitRefused, match="bound"):
        plan.refit(hf_checkpoint(model, "A"))
    assert max_diff(plan.run(inputs), hf_reference(model, "B")) <= TOLERANCE  # unchanged


def test_refit_by_source_keys_from_a_dict():
    # A TorchScript export without constant folding: five RMSNorm weights, all ones in A, are
    # one initializer with five uses, so only source keys (one per use) say which is which. The
    # plan bound to checkpoint A names, per use, the checkpoint tensor it is (identity here);
    # a second, unbound plan takes B's tensors by those keys and computes PyTorch's B outputs.
    llama = HF.parent / "llama"
    onnx_a = llama / "torch113_nofold_dynamic" / "A" / "model.onnx"
    inputs = {"input_ids": np.load(llama / "inputs" / "b1_s7" / "input_ids.npy")}
    reference = {"logits": np.load(llama / "reference" / "B" / "b1_s7" / "logits.npy")}
    bound = reforge.build(onnx_a, refit=True, checkpoint=llama / "checkpoint_A.safetensors")
    state = safetensors.numpy.load_file(str(llama / "checkpoint_B.safetensors"))
    by_key = {}
    for s in bound.sources:
        assert s["binding"]["status"] == "bound" and s["binding"]["note"].startswith("identity"), s
        by_key[s["key"]] = state[s["binding"]["checkpoint"][0]]
    assert len({s["names"][0] for s in bound.sources}) < len(by_key)  # a merged initializer
    plan = reforge.build(onnx_a, refit=True)
    report = plan.refit(by_key)  # an unbound plan: keys are ONNX names or source keys
    assert report["from"] == "tensors" and report["sources_set"] == len(by_key)
    assert max_diff(plan.run(inputs), reference) <= TOLERANCE
    with pytest.raises(reforge.RefitRefused, match="not.a.weight"):
        plan.refit({**by_key, "not.a.weight": np.zeros(3, np.float32)}, names="onnx")
    assert max_diff(plan.run(inputs), reference) <= TOLERANCE


def test_inputs_and_outputs_describe_the_model():
    plan = reforge.build(hf_onnx("bert", "A"))
    assert [v.name for v in plan.inputs] == sorted(hf_inputs("bert")) or {v.name for v in plan.inputs} == set(
        hf_inputs("bert")
    )
    for v in plan.inputs:
        assert v.dtype == "int64" and v.type == "tensor(int64)"
        assert v.shape == hf_inputs("bert")[v.name].shape
    assert [v.name for v in plan.outputs] == list(hf_reference("bert", "A"))
    assert plan.outputs[0].dtype == "float32"
    assert plan.get_inputs() == plan.inputs


def test_check_lists_nothing_for_a_supported_model():
    assert reforge.check(hf_onnx("gpt2", "A")) == []


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_16_bit_weights_run_near_pytorch_and_refit(precision, tmp_path):
    # 16-bit MatMul weights: PyTorch's float32 outputs within the rounding of the weights (the
    # README's bound for the exports: 1.5e-2 of the largest output), before and after a refit.
    model = "llama"
    inputs = hf_inputs(model)
    plan = reforge.build(hf_onnx(model, "A"), refit=True, precision=precision, checkpoint=hf_checkpoint(model, "A"))
    assert plan.inspect()["precision"] == precision
    for weights in "AB":
        if weights == "B":
            plan.refit(hf_checkpoint(model, "B"))
        ref = hf_reference(model, weights)
        scale = max(float(np.max(np.abs(r))) for r in ref.values())
        err = max_diff(plan.run(inputs), ref) / scale
        assert 0 < err <= 1.5e-2, err


@pytest.mark.parametrize("model", HF_MODELS)
def test_a_checkpoint_of_other_weights_is_refused_as_the_wrong_checkpoint(model):
    # B's checkpoint where A's belongs (same names, every value different) is what it most likely
    # is, not a fold: refused saying so, from a file or a state dict alike. Built anyway, the plan
    # refuses a refit from B with the way forward, unchanged; a refit from B's ONNX works.
    inputs = hf_inputs(model)
    wrong = "holds different values for .* than this model was exported with: bind the build to the checkpoint"
    with pytest.raises(reforge.Error, match=wrong):
        reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "B"))
    state = safetensors.numpy.load_file(str(hf_checkpoint(model, "B")))
    with pytest.raises(reforge.Error, match=wrong):
        reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=state)
    plan = reforge.build(
        hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "B"), allow_partial_binding=True
    )
    assert not any(s["binding"]["status"] == "bound" for s in plan.sources)
    assert not any("BatchNorm" in s["binding"].get("note", "") for s in plan.sources)
    with pytest.raises(reforge.RefitRefused, match="rebuild bound to the checkpoint the model was exported from"):
        plan.refit(hf_checkpoint(model, "B"))
    assert max_diff(plan.run(inputs), hf_reference(model, "A")) <= TOLERANCE  # unchanged
    plan.refit(hf_onnx(model, "B"))
    assert max_diff(plan.run(inputs), hf_reference(model, "B")) <= TOLERANCE


def test_a_zero_bias_missing_from_the_checkpoint_does_not_bind_to_its_twin(tmp_path):
    # Another layer's zero bias equals the missing one; equal values are no evidence of identity.
    # The source stays unbound (the twin and the source key named), and a refit from B is refused
    # instead of feeding the twin's B bias into it.
    model, missing, twin = "bert", "encoder.layer.0.intermediate.dense.bias", "encoder.layer.1.intermediate.dense.bias"
    inputs = hf_inputs(model)
    state = safetensors.numpy.load_file(str(hf_checkpoint(model, "A")))
    del state[missing]
    safetensors.numpy.save_file(state, str(tmp_path / "a.safetensors"))
    plan = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=tmp_path / "a.safetensors")
    unbound = [s for s in plan.sources if s["binding"]["status"] == "unbound"]
    assert [s["names"][0] for s in unbound] == [missing]
    assert twin in unbound[0]["binding"]["note"] and "--bind " + unbound[0]["key"] in unbound[0]["binding"]["note"]
    with pytest.raises(reforge.RefitRefused, match=missing):
        plan.refit(hf_checkpoint(model, "B"))
    assert max_diff(plan.run(inputs), hf_reference(model, "A")) <= TOLERANCE  # unchanged
    plan.refit(hf_onnx(model, "B"))
    assert max_diff(plan.run(inputs), hf_reference(model, "B")) <= TOLERANCE


def test_bind_of_a_shared_initializer_by_its_bare_name_is_refused():
    # BERT's export reads fifteen zero biases from one initializer: `bind={X: X}` would rebind
    # them all to one tensor. Refused, asking for source keys or X@*; X@* binds every use.
    model, shared = "bert", "embeddings.LayerNorm.bias"
    with pytest.raises(reforge.Error, match=shared + r"@\*=" + shared):
        reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"), bind={shared: shared})
    plan = reforge.build(
        hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"), bind={shared + "@*": shared}
    )
    uses = [s for s in plan.sources if s["names"][0] == shared]
    assert len(uses) > 2 and all(s["binding"]["checkpoint"] == [shared] for s in uses)
    with pytest.raises(reforge.Error, match="does not equal initializer"):
        reforge.build(
            hf_onnx(model, "A"),
            refit=True,
            checkpoint=hf_checkpoint(model, "A"),
            bind={uses[0]["key"]: "embeddings.LayerNorm.weight"},
        )


def test_a_bind_key_given_twice_with_two_tensors_is_refused(tmp_path):
    # In a bind file and in bind=, or twice on the command line: the later one must not silently win.
    import json

    from conftest import cli_error

    model, key = "bert", "embeddings.LayerNorm.bias@*"
    bind_file = tmp_path / "binds.json"
    bind_file.write_text(json.dumps({key: "embeddings.LayerNorm.bias"}))
    with pytest.raises(reforge.Error, match="is bound to 'embeddings.LayerNorm.bias' already"):
        reforge.build(
            hf_onnx(model, "A"),
            refit=True,
            checkpoint=hf_checkpoint(model, "A"),
            bind_file=bind_file,
            bind={key: "embeddings.LayerNorm.weight"},
        )
    out = tmp_path / "p.plan"
    msg = cli_error(
        "build", hf_onnx(model, "A"), "-o", out, "--refit", "--checkpoint", hf_checkpoint(model, "A"),
        "--bind", key + "=embeddings.LayerNorm.bias", "--bind", key + "=embeddings.LayerNorm.weight",
    )
    assert "is bound to 'embeddings.LayerNorm.bias' already (--bind " in msg, msg
    assert not out.exists()
    # The same tensor twice is one bind.
    reforge.build(
        hf_onnx(model, "A"),
        refit=True,
        checkpoint=hf_checkpoint(model, "A"),
        bind_file=bind_file,
        bind={key: "embeddings.LayerNorm.bias"},
    )


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_refit_of_a_partly_changed_state_dict_replays_only_what_changed(model):
    """skip_unchanged=True: one matrix of B changed by a training step is all a refit replays; the
    outputs are a full refit's (those of PyTorch's B for B itself)."""
    inputs = hf_inputs(model)
    plan = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"))
    state = safetensors.numpy.load_file(str(hf_checkpoint(model, "B")))
    first = plan.refit(state, skip_unchanged=True)
    assert first["weights_replayed"] > 0
    assert max_diff(plan.run(inputs), hf_reference(model, "B")) <= TOLERANCE
    same = plan.refit(state, skip_unchanged=True)
    assert same["sources_unchanged"] == same["sources_set"] and same["weights_replayed"] == 0
    assert max_diff(plan.run(inputs), hf_reference(model, "B")) <= TOLERANCE
    name = max((k for k in state if state[k].ndim == 2), key=lambda k: state[k].size)
    stepped = dict(state)
    stepped[name] = (state[name] * np.float32(0.5)).astype(state[name].dtype)
    partial = plan.refit(stepped, skip_unchanged=True)
    assert partial["sources_unchanged"] == partial["sources_set"] - 1
    assert 0 < partial["weights_replayed"] < first["weights_replayed"]
    full = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"))
    full.refit(stepped)
    want, got = full.run(inputs), plan.run(inputs)
    for k in want:
        assert np.array_equal(np.asarray(got[k]), np.asarray(want[k])), k
