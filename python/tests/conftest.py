"""Shared fixtures: the bundled Hugging Face exports (models/hf, with PyTorch reference outputs)
and the reforge CLI of the same build, whose messages the Python errors must carry."""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "models" / "hf"
CLI = Path(os.environ.get("REFORGE_CLI", ROOT / "build" / "reforge"))
HF_MODELS = ["gpt2", "bert", "llama", "t5", "vit"]
TOLERANCE = 1e-4  # max |reforge - PyTorch|, as tests/hf_checkpoint_test.cc


def hf_inputs(model):
    return {p.stem: np.load(p) for p in sorted((HF / model / "inputs").glob("*.npy"))}


def hf_reference(model, weights):
    return {p.stem: np.load(p) for p in sorted((HF / model / "reference" / weights).glob("*.npy"))}


def hf_onnx(model, weights):
    return HF / model / weights / "model.onnx"


def hf_checkpoint(model, weights):
    return HF / model / ("checkpoint_%s.safetensors" % weights)


def max_diff(outputs, reference):
    assert set(outputs) == set(reference), (sorted(outputs), sorted(reference))
    worst = 0.0
    for name, ref in reference.items():
        assert outputs[name].shape == ref.shape, name
        worst = max(worst, float(np.max(np.abs(outputs[name].astype(np.float64) - ref.astype(np.float64)))))
    return worst


def cli_error(*args):
    """The message the CLI prints for a failing command (its stderr without "error: ")."""
    if not CLI.exists():
        pytest.skip("the reforge CLI is not built at %s" % CLI)
    r = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    return "\n".join(lines[start:])[len("error: ") :]


def cli_output(*args):
    if not CLI.exists():
        pytest.skip("the reforge CLI is not built at %s" % CLI)
    r = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return r.stdout
