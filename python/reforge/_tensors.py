"""Run inputs and outputs across frameworks: a run fed torch tensors answers with torch tensors on
the inputs' device, a run fed numpy arrays with numpy arrays. torch is never imported here unless
device outputs are asked for: a torch tensor can only exist once the caller has imported it, so
``sys.modules`` tells.

CUDA tensors in, CUDA tensors out. A CUDA plan reads CUDA inputs where they are and, asked for
device outputs, leaves its outputs in device memory (arrays that own the engine's output buffers,
fresh for each run). reforge computes on its own stream (CUDA's per-thread default stream of the
calling thread), so the hand-over follows a stream contract:

- before the run, torch's current stream is synchronized, so that the inputs' pending writes are
  finished before reforge reads them;
- the run waits for its device work before it returns;
- each output is copied on torch's current stream into a tensor from torch's own allocator (a
  device-to-device copy), and that stream is synchronized before the engine's buffers are
  released, since reforge frees them on its stream.

The returned tensors are therefore torch's in every respect (its allocator, its stream semantics,
``record_stream``), ready to read on any stream, and share no memory with the inputs, the engine's
weights or another run's outputs.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

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


def run_inputs(inputs: Mapping[str, Any], plan_device: str) -> Tuple[Dict[str, Any], Optional[Any]]:
    """``Plan.run``'s inputs as the extension takes them, and the device of the torch tensors among
    them (``None`` when there are none), which must all be on one device. A CUDA tensor goes to the
    extension as it is, read in place by a CUDA plan (on the current CUDA device, where reforge
    runs) and refused by a CPU plan, each refusal an InvalidInput naming the input; other values as
    :func:`host_input` makes them."""
    torch = sys.modules.get("torch")
    arrays: Dict[str, Any] = {}
    device, first = None, None
    for name, value in inputs.items():
        what = "input '%s'" % name
        if torch is None or not isinstance(value, torch.Tensor):
            arrays[name] = host_input(value, what)
            continue
        if device is None:
            device, first = value.device, name
        elif value.device != device:
            raise InvalidInput("%s is on %s, but input '%s' is on %s: give every torch input on one device"
                               % (what, value.device, first, device))
        if value.device.type != "cuda":
            arrays[name] = host_input(value, what)
            continue
        if plan_device == "cpu":
            raise InvalidInput("%s is on %s, but the plan runs on the CPU: move the inputs to the CPU (.cpu()), or "
                               "build the plan with device='cuda'" % (what, value.device))
        current = torch.cuda.current_device()
        if value.device.index != current:
            raise InvalidInput("%s is on %s, but reforge runs on the current CUDA device, cuda:%d: make %s current "
                               "(torch.cuda.set_device) or move the inputs to cuda:%d"
                               % (what, value.device, current, value.device, current))
        value = value.detach()
        arrays[name] = value if value.is_contiguous() else value.contiguous()
    return arrays, device


def output_place(outputs_on: Optional[str], device: Any, plan_device: str) -> Tuple[bool, Any]:
    """Where a run's outputs go: (in device memory?, the torch device of the outputs or ``None`` for
    numpy), for ``Plan.run(outputs_on=...)`` and the torch inputs' ``device``. By default the outputs
    go where the torch inputs are: on a CUDA device there, else to the host."""
    if outputs_on is None:
        return device is not None and device.type == "cuda", device
    if outputs_on == "host":
        if device is not None and device.type == "cuda":
            device = sys.modules["torch"].device("cpu")
        return False, device
    if outputs_on != "device":
        raise ValueError("outputs_on must be 'device', 'host' or None (where the inputs are), got %r" % (outputs_on,))
    if plan_device == "cpu":
        raise InvalidInput("outputs_on='device': the plan runs on the CPU; build it with device='cuda'")
    if device is None or device.type != "cuda":
        try:
            import torch
        except ImportError as e:
            raise ImportError("outputs_on='device' returns torch tensors on the GPU: it needs torch (%s)" % e) from e
        device = torch.device("cuda", torch.cuda.current_device())
    return True, device


def before_device_run(device: Any) -> None:
    """Waits for torch's current stream on ``device`` when the inputs are CUDA tensors there: their
    pending writes finish before reforge reads them on its own stream."""
    if device is not None and device.type == "cuda":
        sys.modules["torch"].cuda.current_stream(device).synchronize()


def from_device(arrays: List[Any], infos: List[Any], into: Mapping[str, Any], device: Any) -> List[Any]:
    """A run's device outputs (arrays in device memory that own the engine's output buffers) as
    torch tensors on ``device``: each copied on torch's current stream into a new tensor, or into
    ``into[name]`` (``Plan.run(outputs=...)``: a CUDA tensor gets a device-to-device copy); the
    stream is waited for before the engine's buffers go (see the module's notes)."""
    import torch

    values = []
    views = [torch.from_dlpack(a) for a in arrays]
    try:
        for view, info in zip(views, infos):
            dest = into.get(info.name)
            values.append(view.clone() if dest is None else copy_into(dest, view, info.dtype, info.name))
    finally:
        torch.cuda.current_stream(device).synchronize()
    return values


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
