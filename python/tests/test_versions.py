"""Named weight versions (Plan.refit(..., version=NAME), Plan.run(..., version=NAME), versions(),
drop_version()): on a real GPT-2 export, a version refit from checkpoint B runs B's outputs while
the plan's current weights stay A's; a second refit replaces it; a failed refit into a version
leaves every version as it was; a dropped or unknown name is an error naming the versions; a
slow refit into a version is refused."""

import numpy as np
import pytest
import safetensors.numpy

import reforge
from conftest import hf_checkpoint, hf_inputs, hf_onnx, hf_reference, max_diff


def test_named_versions_run_beside_the_current_weights():
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True, checkpoint=hf_checkpoint("gpt2", "A"))
    feeds = hf_inputs("gpt2")
    a, b = hf_reference("gpt2", "A"), hf_reference("gpt2", "B")
    assert max_diff(a, b) > 1e-2  # the two checkpoints give different outputs
    assert plan.versions() == []
    report = plan.refit(hf_checkpoint("gpt2", "B"), version="B")
    assert report["sources_set"] > 0
    assert plan.versions() == ["B"]
    assert max_diff(plan.run(feeds), a) <= 1e-4  # the current weights are A's still
    assert max_diff(plan.run(feeds, version="B"), b) <= 1e-4
    assert max_diff(dict(zip([o.name for o in plan.outputs], plan.run(None, feeds, version="B"))), b) <= 1e-4
    # A version from a state dict, and one replaced: "B" from A's weights now.
    plan.refit(safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "B"))), version="b-dict")
    assert max_diff(plan.run(feeds, version="b-dict"), b) <= 1e-4
    plan.refit(hf_checkpoint("gpt2", "A"), version="B")
    assert max_diff(plan.run(feeds, version="B"), a) <= 1e-4
    # A refit that fails (a weight of another shape) changes no version.
    bad = safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "B")))
    key = next(k for k in bad if k.endswith("ln_f.weight"))
    bad[key] = np.zeros((3,), bad[key].dtype)
    with pytest.raises(reforge.RefitRefused):
        plan.refit(bad, version="B")
    with pytest.raises(reforge.RefitRefused):
        plan.refit(bad, version="C")
    assert plan.versions() == ["B", "b-dict"]
    assert max_diff(plan.run(feeds, version="B"), a) <= 1e-4
    assert max_diff(plan.run(feeds), a) <= 1e-4
    # The current weights move on their own; the versions keep theirs.
    plan.refit(hf_checkpoint("gpt2", "B"))
    assert max_diff(plan.run(feeds), b) <= 1e-4
    assert max_diff(plan.run(feeds, version="B"), a) <= 1e-4
    plan.drop_version("B")
    assert plan.versions() == ["b-dict"]
    with pytest.raises(reforge.Error, match="no weight version named 'B' \\(the versions: 'b-dict'\\)"):
        plan.run(feeds, version="B")
    with pytest.raises(reforge.Error, match="no weight version named 'B'"):
        plan.drop_version("B")


def test_slow_refit_into_a_version_is_refused():
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True)
    with pytest.raises(reforge.RefitRefused, match="a named version comes from a fast or verifying refit"):
        plan.refit(hf_onnx("gpt2", "B"), mode="slow", version="B")
    assert plan.versions() == []
    plan.refit(hf_onnx("gpt2", "B"), mode="verify", version="B")
    assert max_diff(plan.run(hf_inputs("gpt2"), version="B"), hf_reference("gpt2", "B")) <= 1e-4
    assert max_diff(plan.run(hf_inputs("gpt2")), hf_reference("gpt2", "A")) <= 1e-4
