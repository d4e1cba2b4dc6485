"""The Python API in ONNX Runtime's and PyTorch's habits: run(output_names, feeds) as
InferenceSession.run takes it, a missing model file as FileNotFoundError from build() as from
load(), refit() given something that is no set of weights refused naming what it takes, and a
checkpoint whose keys sit under another prefix refused with that prefix named."""

import numpy as np
import pytest

import reforge
from conftest import hf_inputs, hf_onnx, hf_reference, max_diff


def test_run_takes_onnx_runtimes_argument_order():
    plan = reforge.build(hf_onnx("gpt2", "A"))
    feeds = hf_inputs("gpt2")
    by_name = plan.run(feeds)
    names = [o.name for o in plan.get_outputs()]
    # run(None, feeds): every output, as a list in declaration order.
    every = plan.run(None, feeds)
    assert isinstance(every, list) and len(every) == len(names)
    for name, value in zip(names, every):
        np.testing.assert_array_equal(value, by_name[name])
    # run([names], feeds): the outputs asked, in the order asked.
    asked = plan.run(list(reversed(names)), feeds)
    for name, value in zip(reversed(names), asked):
        np.testing.assert_array_equal(value, by_name[name])
    assert max_diff(dict(zip(names, every)), hf_reference("gpt2", "A")) <= 1e-4
    # The keyword form stays.
    assert list(plan.run(feeds, output_names=[names[0]])) == [names[0]]
    with pytest.raises(reforge.InvalidInput, match="'nope' is not an output"):
        plan.run(["nope"], feeds)
    with pytest.raises(TypeError, match="takes a dict of inputs"):
        plan.run([1, 2, 3])


def test_a_missing_model_file_is_file_not_found_from_build_as_from_load(tmp_path):
    missing = tmp_path / "absent.onnx"
    with pytest.raises(FileNotFoundError) as built:
        reforge.build(missing)
    with pytest.raises(FileNotFoundError) as loaded:
        reforge.load(tmp_path / "absent.plan")
    assert str(missing) in str(built.value) and "absent.plan" in str(loaded.value)


def test_refit_of_something_that_is_no_weights_names_what_it_takes():
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True)
    with pytest.raises(TypeError, match="not int"):
        plan.refit(42)

    class Module:  # what a torch.nn.Module looks like to refit(): a state_dict() method
        def state_dict(self):
            return {}

    with pytest.raises(TypeError, match=r"plan.refit\(module.state_dict\(\)\)"):
        plan.refit(Module())
    # The plan still runs its weights.
    assert max_diff(plan.run(hf_inputs("gpt2")), hf_reference("gpt2", "A")) <= 1e-4


def test_checkpoint_keys_under_another_prefix_get_a_hint():
    import safetensors.numpy

    from conftest import hf_checkpoint

    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True, checkpoint=hf_checkpoint("gpt2", "A"))
    b = safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "B")))
    renamed = {("m." + k[len("transformer."):] if k.startswith("transformer.") else k): v for k, v in b.items()}
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(renamed)
    assert "'transformer.' in the plan is 'm.' in the checkpoint" in str(e.value)
    assert "'transformer.wte.weight' would be 'm.wte.weight'" in str(e.value)
    assert "rename its keys with --strip-prefix 'm.' --add-prefix 'transformer.'" in str(e.value)
    # One tensor left out, no prefix anywhere: no hint.
    partial = dict(b)
    del partial["transformer.h.0.ln_1.weight"]
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(partial)
    assert "'transformer.h.0.ln_1.weight'" in str(e.value) and "prefix" not in str(e.value)
    # Nothing changed: the plan runs A's weights, and B's with their own keys.
    assert max_diff(plan.run(hf_inputs("gpt2")), hf_reference("gpt2", "A")) <= 1e-4
    plan.refit(b)
    assert max_diff(plan.run(hf_inputs("gpt2")), hf_reference("gpt2", "B")) <= 1e-4


def test_checkpoint_keys_renamed_by_prefix():
    import safetensors.numpy

    from conftest import hf_checkpoint

    a = safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "A")))
    b = safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "B")))

    def wrapped(d):  # the state dict of a module that holds the model as its attribute `m`
        return {"m." + k: v for k, v in d.items()}

    # Built from the wrapper's state dict, its keys renamed to the export's module names.
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True, checkpoint=wrapped(a), strip_prefix="m.")
    assert max_diff(plan.run(hf_inputs("gpt2")), hf_reference("gpt2", "A")) <= 1e-4
    # Without the option the refusal names it; with it, B's weights.
    with pytest.raises(reforge.RefitRefused, match="rename its keys with --strip-prefix 'm.' "):
        plan.refit(wrapped(b))
    plan.refit(wrapped(b), strip_prefix="m.")
    assert max_diff(plan.run(hf_inputs("gpt2")), hf_reference("gpt2", "B")) <= 1e-4
    # The hint reads the names as renamed: 'w.' under the added 'm.'.
    with pytest.raises(reforge.RefitRefused, match="rename its keys with --strip-prefix 'm.w.' "):
        plan.refit({"w." + k: v for k, v in a.items()}, add_prefix="m.")
    # A prefix no name has, and two names made one: refused, naming them; nothing changed.
    with pytest.raises(reforge.RefitRefused, match="no tensor name begins with 'x.'"):
        plan.refit(a, strip_prefix="x.")
    with pytest.raises(reforge.RefitRefused, match="both become 'wte.weight'"):
        plan.refit({"transformer.wte.weight": a["transformer.wte.weight"], "wte.weight": a["transformer.wte.weight"]},
                   strip_prefix="transformer.")
    assert max_diff(plan.run(hf_inputs("gpt2")), hf_reference("gpt2", "B")) <= 1e-4
    # The options rename a checkpoint: not an ONNX model's sources.
    with pytest.raises(reforge.RefitRefused, match="read by graph position"):
        plan.refit(hf_onnx("gpt2", "B"), strip_prefix="m.")
