"""Run inputs and outputs across frameworks: a run fed torch tensors answers with torch tensors on
the inputs' device, a run fed numpy arrays with numpy arrays. torch is never imported here: a
torch tensor can only exist once the caller has imported it, so ``sys.modules`` tells.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, Optional


def torch_device(values: Iterable[Any]) -> Optional[Any]:
    """The device of the first torch tensor among ``values`` (``None`` when there is none)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for v in values:
        if isinstance(v, torch.Tensor):
            return v.device
    return None


def host_input(value: Any, what: str) -> Any:
    """A value as the extension takes it: numpy arrays and ``__dlpack__`` CPU tensors as they are;
    a torch tensor is detached (no copy), copied to the host when it lives on another device (a
    CUDA plan copies its inputs to the GPU itself), and made contiguous when it is not."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach()
        if value.device.type != "cpu":
            value = value.cpu()
        return value if value.is_contiguous() else value.contiguous()
    if getattr(value, "requires_grad", False):
        value = value.detach()
    device = getattr(value, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        raise TypeError("%s: a tensor on %s; reforge takes CPU memory (move it with .cpu())" % (what, device))
    is_contiguous = getattr(value, "is_contiguous", None)
    if callable(is_contiguous) and not is_contiguous():
        value = value.contiguous()
    return value


def to_torch(array: Any, dtype: str, device: Any) -> Any:
    """A run output (a numpy array over the engine's buffer) as a torch tensor on ``device``.

    On the CPU the tensor shares the array's memory (no copy); an output the engine returns
    read-only (it shares bytes with an input or an engine weight) is copied, since torch tensors
    cannot be read-only. A ``bfloat16`` output, which reaches Python as float32, is cast back
    (exactly). Another device gets a copy there."""
    import torch

    t = torch.from_numpy(array) if array.flags.writeable else torch.tensor(array)
    if dtype == "bfloat16":
        t = t.to(torch.bfloat16)
    if device is not None and device.type != "cpu":
        t = t.to(device)
    return t
