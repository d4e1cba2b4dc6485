"""NaN or Inf in new weights is refused wherever the refit reads it, not only where the rebuilt
engine weights show it: a checkpoint's position table that the model slices (GPT-2's wpe, 128 rows,
16 read) holding inf in a row the model never reads is refused as the table itself would be, unless
allow_nonfinite; the plan is then unchanged."""

import numpy as np
import pytest
import safetensors.numpy

import reforge
from conftest import hf_checkpoint, hf_inputs, hf_onnx


def test_inf_in_an_unread_row_of_a_sliced_checkpoint_table_is_refused(tmp_path):
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True, checkpoint=hf_checkpoint("gpt2", "A"))
    wpe = [s for s in plan.sources if s["binding"]["checkpoint"] == ["transformer.wpe.weight"]]
    assert wpe and wpe[0]["binding"]["note"] != "identity", wpe  # a slice of the table
    rows = wpe[0]["shape"][-2]
    state = safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "B")))
    table = state["transformer.wpe.weight"].copy()
    assert table.shape[0] > rows
    table[rows + 3, 5] = np.inf  # a row the model never reads
    state["transformer.wpe.weight"] = table
    path = tmp_path / "b_inf.safetensors"
    safetensors.numpy.save_file(state, str(path))
    inputs = hf_inputs("gpt2")
    before = plan.run(inputs)
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(path)
    msg = str(e.value)
    assert "'transformer.wpe.weight'" in msg and "holds inf at index [%d, 5]" % (rows + 3) in msg, msg
    with pytest.raises(reforge.RefitRefused):
        plan.refit(state)  # the same as a state dict
    after = plan.run(inputs)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    plan.refit(path, allow_nonfinite=True)
    state_b = safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "B")))
    reference = reforge.build(hf_onnx("gpt2", "A"), refit=True, checkpoint=hf_checkpoint("gpt2", "A"))
    reference.refit(state_b)
    out, ref = plan.run(inputs), reference.run(inputs)
    assert all(np.array_equal(out[k], ref[k]) for k in ref)  # the unread row changes nothing
