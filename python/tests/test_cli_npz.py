"""`reforge run --input FILE.npz`: numpy's archives (numpy.savez and savez_compressed) give one
input per array name, and the run equals PyTorch's reference; an archive that is no zip, an
entry that is no .npy and an input given twice are refused naming them."""

import zipfile

import numpy as np

from conftest import HF, cli_error, cli_output, hf_onnx

GPT2_IDS = HF / "gpt2" / "inputs" / "input_ids.npy"
GPT2_LOGITS = HF / "gpt2" / "reference" / "A" / "logits.npy"


def test_npz_inputs_by_array_name(tmp_path):
    ids = np.load(GPT2_IDS)
    stored, deflated = tmp_path / "stored.npz", tmp_path / "deflated.npz"
    np.savez(stored, input_ids=ids)
    np.savez_compressed(deflated, input_ids=ids)
    with zipfile.ZipFile(deflated) as z:
        assert z.getinfo("input_ids.npy").compress_type == zipfile.ZIP_DEFLATED
    for archive in (stored, deflated):
        out = cli_output("run", hf_onnx("gpt2", "A"), "--input", archive, "--expect", "logits=%s" % GPT2_LOGITS)
        assert "compare logits" in out and ": OK" in out, out


def test_npz_refusals(tmp_path):
    not_zip = tmp_path / "plain.npz"
    not_zip.write_bytes(b"not a zip archive at all")
    assert "'%s' is not a readable .npz archive" % not_zip in cli_error("run", hf_onnx("gpt2", "A"), "--input", not_zip)
    odd = tmp_path / "odd.npz"
    with zipfile.ZipFile(odd, "w") as z:
        z.writestr("notes.txt", "hello")
    assert "entry 'notes.txt' is not an array" in cli_error("run", hf_onnx("gpt2", "A"), "--input", odd)
    twice = tmp_path / "twice.npz"
    np.savez(twice, input_ids=np.load(GPT2_IDS))
    message = cli_error("run", hf_onnx("gpt2", "A"), "--input", "input_ids=%s" % GPT2_IDS, "--input", twice)
    assert "input 'input_ids' is given twice (again in '%s')" % twice in message
