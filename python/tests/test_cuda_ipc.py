"""reforge.ipc: weights from another process's GPU memory. A trainer process (a separate Python)
loads checkpoint B of a real `transformers` export onto the GPU and shares it; the engine's
process opens the blob and refits a CUDA plan built on checkpoint A. Reference: the same plan
refit from checkpoint B's file, output for output, bit for bit; and PyTorch's outputs for B
(models/hf/*/reference). The argument checks (CPU tensors refused by name, a malformed blob or one
naming a class refused without running anything) run wherever torch is installed."""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import reforge
from conftest import hf_checkpoint, hf_inputs, hf_onnx

torch = pytest.importorskip("torch")
ipc = pytest.importorskip("reforge.ipc")

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA GPU")

# The trainer: checkpoint B on the GPU, shared; the blob's length and bytes on stdout, then it
# waits (keeping the tensors alive) until the engine writes a line.
TRAINER = r"""
import sys
import torch
from safetensors.torch import load_file
import reforge.ipc
weights = load_file(sys.argv[1], device="cuda")
blob = reforge.ipc.share(weights)
sys.stdout.buffer.write(b"%d\n" % len(blob) + blob)
sys.stdout.flush()
sys.stdin.readline()
"""


def test_share_refuses_what_is_not_a_cuda_tensor():
    with pytest.raises(reforge.InvalidInput, match="'w' is on cpu"):
        ipc.share({"w": torch.zeros(3)})
    with pytest.raises(reforge.InvalidInput, match="'w' is ndarray, not a torch tensor"):
        ipc.share({"w": np.zeros(3)})
    with pytest.raises(reforge.InvalidInput, match="state dict"):
        ipc.share([torch.zeros(3)])


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


def test_open_refuses_malformed_blobs_without_running_them():
    with pytest.raises(reforge.InvalidInput, match="not a blob reforge.ipc.share made"):
        ipc.open_shared(b"not a pickle")
    with pytest.raises(reforge.InvalidInput, match="plain values only, not posix.system|plain values only"):
        ipc.open_shared(pickle.dumps(_Boom()))
    with pytest.raises(reforge.InvalidInput, match="reforge.ipc/1"):
        ipc.open_shared(pickle.dumps({"format": "other", "tensors": {}}))
    with pytest.raises(reforge.InvalidInput, match="takes the bytes"):
        ipc.open_shared("a string")


@needs_gpu
def test_refit_from_another_processs_gpu_memory_equals_the_checkpoint_refit():
    model = "llama_decode"
    try:
        shared = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"), device="cuda")
    except reforge.Error as e:
        if "backend 'cuda' is not registered" in str(e):
            pytest.skip("reforge is built without CUDA")
        raise
    from_file = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"), device="cuda")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(hf_checkpoint(model, "B"))], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env=env)
    try:
        n = int(trainer.stdout.readline())
        blob = trainer.stdout.read(n)
        weights = ipc.open_shared(blob)
        assert all(t.is_cuda for t in weights.values())
        report = shared.refit(weights)
        assert report["sources_set"] > 0
        del weights
        torch.cuda.synchronize()
    finally:
        trainer.stdin.write(b"done\n")
        trainer.stdin.flush()
        assert trainer.wait(timeout=120) == 0
    from_file.refit(hf_checkpoint(model, "B"))
    inputs = hf_inputs(model)
    got, want = shared.run(inputs), from_file.run(inputs)
    assert set(got) == set(want)
    for name in want:
        assert np.array_equal(got[name], want[name]), name
    # and B is not A: the refit changed the outputs
    a = reforge.build(hf_onnx(model, "A"), device="cuda").run(inputs)
    assert any(not np.array_equal(a[k], got[k]) for k in got)
