"""Run inputs and outputs across frameworks: a run fed torch tensors answers with torch tensors on
the inputs' device, a run fed numpy arrays with numpy arrays. torch is never imported here: a
torch tensor can only exist once the caller has imported it, so ``sys.modules`` tells.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, Optional

from ._reforge import InvalidInput


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


def copy_into(dest: Any, value: Any, dtype: str, name: str) -> Any:
    """Copies run output ``name`` (``value``: a numpy array or a torch tensor; ``dtype``: the
    plan's name for its element type) into the caller's ``dest``, a numpy array or a torch
    tensor of the same shape and dtype (``Plan.run(outputs=...)``); returns ``dest``."""
    import numpy as np

    shape = list(value.shape)
    torch = sys.modules.get("torch")
    if not isinstance(dest, np.ndarray) and (torch is None or not isinstance(dest, torch.Tensor)):
        raise InvalidInput("outputs['%s']: a numpy array or a torch tensor, not %s" % (name, type(dest).__name__))
    if list(dest.shape) != shape:
        raise InvalidInput("outputs['%s']: the output is %s%s; got shape %s" % (name, dtype, shape, list(dest.shape)))
    if isinstance(dest, np.ndarray):
        if not isinstance(value, np.ndarray):  # a torch run output: as numpy (bfloat16 as float32)
            value = value.detach().cpu()
            value = (value.float() if value.dtype == torch.bfloat16 else value).numpy()
        if dest.dtype != value.dtype:
            raise InvalidInput("outputs['%s']: the output is %s%s; got a %s array" % (name, dtype, shape, dest.dtype))
        if not dest.flags.writeable:
            raise InvalidInput("outputs['%s']: the array is read-only" % name)
        np.copyto(dest, value)
        return dest
    if not isinstance(value, torch.Tensor):
        value = to_torch(value, dtype, None)
    if dest.dtype != value.dtype:
        raise InvalidInput("outputs['%s']: the output is %s%s; got a %s tensor" % (name, dtype, shape, dest.dtype))
    with torch.no_grad():
        dest.copy_(value)
    return dest
