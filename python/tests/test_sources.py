"""Weight sources and the refit report through the session the CLI uses too: a file is read as
what it holds, not as what its name says; a file that holds no weights is refused with the CLI's
message; and Plan.refit returns the report in the schema ``reforge refit --json`` prints
(docs/refit.md, "The refit report")."""

import json
import shutil

import numpy as np
import pytest
import safetensors.numpy

import reforge
from conftest import TOLERANCE, cli_error, cli_output, hf_checkpoint, hf_inputs, hf_onnx, hf_reference, max_diff

# The report's keys, in order (docs/refit.md).
REPORT_KEYS = [
    "from", "reader", "mode", "device", "sources_set", "sources_unchanged", "weights_replayed", "bytes_in", "bytes_out",
    "bytes_copied", "packed_from_transposed", "weights_on_device", "bytes_streamed", "transposed_on_device",
    "read_ms", "validate_ms", "replay_ms", "commit_ms", "verify_ms",
    "verified_weights", "unused_checkpoint_tensors", "baked_given", "baked_differing_kept", "literals_given",
    "literals_differing_kept", "quantized", "lora", "note", "summary",
]  # fmt: skip


def test_python_and_cli_print_one_report_schema(tmp_path):
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True)
    plan.save(tmp_path / "a.plan")
    report = plan.refit(hf_onnx("gpt2", "B"), mode="verify")
    assert list(report) == REPORT_KEYS
    assert report["from"] == "onnx" and report["reader"] == "onnx" and report["mode"] == "verify"
    assert report["device"] == "cpu" and report["verified_weights"] > 0

    printed = json.loads(
        cli_output("--quiet", "refit", tmp_path / "a.plan", "--weights", hf_onnx("gpt2", "B"), "--verify",
                   "-o", tmp_path / "b.plan", "--json")
    )  # fmt: skip
    assert list(printed) == ["plan", "stripped"] + REPORT_KEYS
    for key in ("from", "reader", "mode", "device", "sources_set", "weights_replayed", "bytes_in", "bytes_out",
                "verified_weights", "unused_checkpoint_tensors", "baked_differing_kept", "quantized"):  # fmt: skip
        assert printed[key] == report[key], key


def test_a_checkpoint_is_read_as_one_whatever_its_name(tmp_path):
    renamed = tmp_path / "weights.onnx"
    shutil.copyfile(hf_checkpoint("gpt2", "B"), renamed)
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True, checkpoint=hf_checkpoint("gpt2", "A"))
    report = plan.refit(renamed)
    assert report["from"] == "checkpoint" and report["reader"] == "safetensors"
    assert max_diff(plan.run(hf_inputs("gpt2")), hf_reference("gpt2", "B")) <= TOLERANCE

    # A state dict in memory goes through the DLPack reader.
    report = plan.refit(safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "A"))))
    assert report["from"] == "checkpoint" and report["reader"] == "dlpack"
    assert max_diff(plan.run(hf_inputs("gpt2")), hf_reference("gpt2", "A")) <= TOLERANCE


def test_a_file_holding_no_weights_is_refused_naming_it(tmp_path):
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True)
    plan.save(tmp_path / "a.plan")
    before = plan.run(hf_inputs("gpt2"))
    garbage = tmp_path / "b.safetensors"
    garbage.write_bytes(b"GARBAGE! not weights at all")
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(garbage)
    assert "'%s' holds no weights reforge reads" % garbage in str(e.value)
    assert 'beginning "GARBAGE! not wei"' in str(e.value)
    assert str(e.value) == cli_error("refit", tmp_path / "a.plan", "--weights", garbage)
    after = plan.run(hf_inputs("gpt2"))
    assert all(np.array_equal(before[k], after[k]) for k in before)
