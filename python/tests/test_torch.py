"""torch tensors (when torch is installed): state dicts bound by value through __dlpack__, run
inputs (torch tensors out for torch tensors in), tensors that need gradients."""

import numpy as np
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


def test_a_sequence_fed_torch_tensors_answers_with_torch_tensors():
    from conftest import HF

    decode = HF / "llama_decode"
    plan = reforge.build(decode / "A" / "model.onnx", refit=True, checkpoint=decode / "checkpoint_A.safetensors")
    ref = decode / "reference" / "A"
    ids = torch.from_numpy(np.load(ref / "prompt_ids.npy"))
    want_tokens, want_logits = np.load(ref / "tokens.npy"), np.load(ref / "step_logits.npy")
    for copy in (True, False):
        seq = plan.sequence(max_length=32)
        step_ids, position = ids, 0
        for step in range(3):
            pos = torch.arange(position, position + step_ids.shape[1]).reshape(1, -1)
            out = seq.run({"input_ids": step_ids, "position_ids": pos}, copy=copy)
            logits = out["logits"]
            assert isinstance(logits, torch.Tensor) and logits.dtype == torch.float32
            assert float((logits[0, -1] - torch.from_numpy(want_logits[step])).abs().max()) <= TOLERANCE
            token = int(logits[0, -1].argmax())
            assert token == want_tokens[step]
            position += step_ids.shape[1]
            step_ids = torch.tensor([[token]])
