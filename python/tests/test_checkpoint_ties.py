"""Tied checkpoint tensors (plan::Binding::Input::ties): a Hugging Face checkpoint stores a tied
parameter under several names with the same bytes (T5's shared.weight and
encoder.embed_tokens.weight, GPT-2's transformer.wte.weight and lm_head.weight). The build binds
a source to one copy and records the others; a checkpoint refit whose copies now differ is
refused naming both, with the plan unchanged, since which copy the model reads cannot be told.
Zero biases and unit norm weights equal to one another are no evidence of a tie."""

import numpy as np
import pytest
import safetensors.numpy

import reforge
from conftest import TOLERANCE, cli_error, cli_output, hf_checkpoint, hf_inputs, hf_onnx, hf_reference, max_diff

# Per model: (the copy a source binds, its tied copy) in the bundled checkpoints.
TIES = {
    "t5": ("encoder.embed_tokens.weight", "shared.weight"),
    "gpt2": ("transformer.wte.weight", "lm_head.weight"),
}


def load(model, weights):
    return safetensors.numpy.load_file(str(hf_checkpoint(model, weights)))


def copies(outputs):
    return {k: np.array(v, copy=True) for k, v in outputs.items()}


def bit_equal(a, b):
    return set(a) == set(b) and all(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


def recorded_ties(plan):
    """{bound checkpoint tensor: its tied copies} over every source's binding."""
    out = {}
    for s in plan.sources:
        for name, ties in s.get("binding", {}).get("ties", {}).items():
            assert out.setdefault(name, ties) == ties
    return out


def bound_plan(model):
    return reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"))


@pytest.mark.parametrize("model", sorted(TIES))
def test_only_copies_of_a_tied_parameter_are_recorded(model):
    state = load(model, "A")
    bound, tie = TIES[model]
    # The independent reference: every pair of bit-identical tensors that are not all-equal.
    expected = {}
    for a in state:
        for b in state:
            x, y = state[a], state[b]
            if a != b and x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y):
                if not np.all(x == x.flat[0]):
                    expected.setdefault(a, []).append(b)
    assert expected == {bound: [tie], tie: [bound]}
    # The checkpoint holds all-equal twins (zero biases, unit norm weights): none is a tie.
    assert any(
        np.all(x == x.flat[0]) and any(np.array_equal(x, y) for n, y in state.items() if n != a and y.shape == x.shape)
        for a, x in state.items()
    )
    ties = recorded_ties(bound_plan(model))
    assert ties and set(ties) <= {bound, tie}
    for name, twins in ties.items():
        assert twins == [tie if name == bound else bound]


@pytest.mark.parametrize("model", sorted(TIES))
@pytest.mark.parametrize("change", ["delta", "-inf"])
def test_copies_that_differ_are_refused_from_a_file_and_a_dict(model, change, tmp_path):
    inputs = hf_inputs(model)
    plan = bound_plan(model)
    before = copies(plan.run(inputs))
    assert max_diff(before, hf_reference(model, "A")) <= TOLERANCE
    bound, tie = TIES[model]
    for changed in (tie, bound):  # either copy changed, the other as in B
        state = load(model, "B")
        value = state[changed].copy()
        value.flat[0] = value.flat[0] + 0.5 if change == "delta" else -np.inf
        state[changed] = value
        path = tmp_path / ("%s.safetensors" % changed)
        safetensors.numpy.save_file(state, str(path))
        for source in (path, state):
            with pytest.raises(reforge.RefitRefused) as e:
                plan.refit(source)
            message = str(e.value)
            assert "'%s' and '%s'" % (bound, tie) in message or "'%s' and '%s'" % (tie, bound) in message, message
            assert "one tied parameter" in message and "nothing was changed" in message, message
            assert bit_equal(copies(plan.run(inputs)), before)  # unchanged


@pytest.mark.parametrize("model", sorted(TIES))
def test_both_copies_changed_alike_or_one_left_out_are_accepted(model, tmp_path):
    inputs = hf_inputs(model)
    bound, tie = TIES[model]
    state = load(model, "B")
    assert np.array_equal(state[bound], state[tie])  # B changed both copies alike

    from_onnx = bound_plan(model)
    from_onnx.refit(hf_onnx(model, "B"))
    expected = copies(from_onnx.run(inputs))
    assert max_diff(expected, hf_reference(model, "B")) <= TOLERANCE

    plan = bound_plan(model)
    plan.save(tmp_path / "a.plan")
    plan.refit(hf_checkpoint(model, "B"))
    assert bit_equal(copies(plan.run(inputs)), expected)

    # A checkpoint without the copies no source reads holds one value: accepted.
    read = {c for s in plan.sources for c in s.get("binding", {}).get("checkpoint", [])}
    left_out = [n for n in (bound, tie) if n not in read]
    partial = {k: v for k, v in state.items() if k not in left_out}
    plan = reforge.load(tmp_path / "a.plan")
    report = plan.refit(partial)
    assert bit_equal(copies(plan.run(inputs)), expected)
    assert not set(report["unused_checkpoint_tensors"]) & {bound, tie}


def test_ties_survive_save_and_load_and_show_in_inspect(tmp_path):
    model = "t5"
    bound, tie = TIES[model]
    plan = bound_plan(model)
    plan.save(tmp_path / "a.plan")
    loaded = reforge.load(tmp_path / "a.plan")
    assert recorded_ties(loaded) == recorded_ties(plan) == {bound: [tie]}
    assert "ties: {\"%s\":[\"%s\"]}" % (bound, tie) in cli_output("inspect", tmp_path / "a.plan")

    state = load(model, "B")
    state[tie] = state[tie] + np.float32(1)
    safetensors.numpy.save_file(state, str(tmp_path / "b.safetensors"))
    message = cli_error("refit", tmp_path / "a.plan", "--weights", tmp_path / "b.safetensors", "-o", tmp_path / "x.plan")
    assert "checkpoint tensors '%s' and '%s' held the same values" % (bound, tie) in message
    assert not (tmp_path / "x.plan").exists()
