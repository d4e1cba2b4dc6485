"""torch tensors (when torch is installed): state dicts bound by value through __dlpack__, run
inputs (torch tensors out for torch tensors in), tensors that need gradients."""

import pytest
import safetensors.numpy

import reforge
from conftest import TOLERANCE, hf_checkpoint, hf_inputs, hf_onnx, hf_reference, max_diff

torch = pytest.importorskip("torch")


def test_refit_from_a_torch_state_dict_and_run_torch_inputs():
    model = "llama"
    plan = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"))
    arrays = safetensors.numpy.load_file(str(hf_checkpoint(model, "B")))
    state = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
    plan.refit(state)
    inputs = {k: torch.from_numpy(v) for k, v in hf_inputs(model).items()}
    outputs = plan.run(inputs)  # torch in, torch out
    assert all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in outputs.values())
    assert max_diff({k: v.numpy() for k, v in outputs.items()}, hf_reference(model, "B")) <= TOLERANCE
    # Parameters that need gradients (named_parameters()) are read without a copy, detached.
    params = {k: torch.nn.Parameter(v) for k, v in state.items() if v.is_floating_point()}
    params.update({k: v for k, v in state.items() if not v.is_floating_point()})
    plan.refit(hf_checkpoint(model, "A"))
    plan.refit(params)
    assert max_diff(plan.run(hf_inputs(model)), hf_reference(model, "B")) <= TOLERANCE
    with torch.no_grad():
        for v in params.values():
            v.zero_()  # the optimizer's in-place update does not reach the plan
    assert max_diff(plan.run(hf_inputs(model)), hf_reference(model, "B")) <= TOLERANCE
