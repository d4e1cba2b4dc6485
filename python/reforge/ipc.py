"""reforge.ipc: new weights from another process's GPU memory (CUDA IPC), as a trainer hands them
to a serving engine on the same machine without writing a checkpoint.

    # the trainer's process
    import reforge.ipc
    blob = reforge.ipc.share(model.state_dict())   # bytes: send them (pipe, socket, file)
    ...                                            # keep those tensors alive and unchanged
                                                   # until the engine says it has refit
    # the engine's process
    weights = reforge.ipc.open_shared(blob)        # {name: torch CUDA tensor}: the trainer's memory
    plan.refit(weights)                            # all or nothing, as from any state dict
    del weights                                    # the trainer's memory is released

:func:`share` takes CUDA tensors only and describes each by PyTorch's own CUDA IPC handles
(``torch.multiprocessing``'s, the mechanism its process queues use): a handle of the memory, a
reference counter the trainer's PyTorch keeps the memory alive by, and an event the engine waits
for, so that writes the trainer made before sharing are seen. The blob holds plain values only
(numbers, strings, bytes): :func:`open_shared` reads it with an unpickler that refuses any class
or function, so a blob from elsewhere cannot run code; a malformed one is :class:`InvalidInput`.

Both sides need PyTorch with CUDA, on one machine (CUDA IPC does not cross machines). The tensors
are read where they are, on the GPU; the refit is the plan's usual one (``plan.refit``'s
contract: every weight given, checked, committed at a run boundary or not at all).
"""

from __future__ import annotations

import io
import pickle
from typing import Any, Dict, Mapping

from . import InvalidInput

__all__ = ["share", "open_shared"]

_FORMAT = "reforge.ipc/1"


def _torch() -> Any:
    try:
        import torch
        import torch.multiprocessing  # noqa: F401  (registers PyTorch's CUDA sharing)
        from torch.multiprocessing import reductions
    except ImportError as e:
        raise ImportError("reforge.ipc needs PyTorch with CUDA: %s" % e) from e
    return torch, reductions


def share(state_dict: Mapping[str, Any]) -> bytes:
    """A description of ``state_dict``'s CUDA tensors that another process on this machine opens
    with :func:`open_shared`. Every value must be a torch tensor on a CUDA device (names the first
    that is not). The tensors must stay alive and unchanged until the other process is done."""
    torch, reductions = _torch()
    if not isinstance(state_dict, Mapping):
        raise InvalidInput("reforge.ipc.share takes a state dict ({name: CUDA tensor}), not %s"
                           % type(state_dict).__name__)
    entries = {}
    for name, t in state_dict.items():
        if not isinstance(name, str):
            raise InvalidInput("reforge.ipc.share: key %r is not a string" % (name,))
        if not isinstance(t, torch.Tensor):
            raise InvalidInput("reforge.ipc.share: '%s' is %s, not a torch tensor" % (name, type(t).__name__))
        if t.device.type != "cuda":
            raise InvalidInput("reforge.ipc.share: '%s' is on %s; CUDA IPC shares GPU memory only "
                               "(move it with .cuda(), or pass host tensors to plan.refit directly)"
                               % (name, t.device))
        rebuild, args = reductions.reduce_tensor(t.detach())
        if rebuild is not reductions.rebuild_cuda_tensor or len(args) != 15:
            raise InvalidInput("reforge.ipc.share: this PyTorch describes '%s' in a form reforge.ipc does not "
                               "know (%s)" % (name, getattr(rebuild, "__name__", rebuild)))
        (_, size, stride, offset, storage_cls, dtype, device, handle, storage_bytes, storage_offset, _,
         ref_handle, ref_offset, event_handle, event_sync) = args
        entries[name] = {
            "size": [int(d) for d in size], "stride": [int(s) for s in stride], "offset": int(offset),
            "storage": storage_cls.__name__, "dtype": str(dtype).replace("torch.", ""), "device": int(device),
            "handle": handle, "storage_bytes": int(storage_bytes), "storage_offset": int(storage_offset),
            "ref_handle": ref_handle, "ref_offset": int(ref_offset), "event": event_handle,
            "event_sync": bool(event_sync),
        }
    return pickle.dumps({"format": _FORMAT, "tensors": entries}, protocol=4)


class _PlainUnpickler(pickle.Unpickler):
    """Plain values only: no class or function is ever looked up."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError("a reforge.ipc blob holds plain values only, not %s.%s" % (module, name))


def open_shared(blob: bytes) -> Dict[str, Any]:
    """The tensors :func:`share` described, mapped into this process from the other one's GPU
    memory: ``{name: torch CUDA tensor}``, ready for ``plan.refit``. Dropping them releases the
    mapping (the other process's memory is its own)."""
    torch, reductions = _torch()
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise InvalidInput("reforge.ipc.open_shared takes the bytes reforge.ipc.share made, not %s"
                           % type(blob).__name__)
    try:
        doc = _PlainUnpickler(io.BytesIO(bytes(blob))).load()
    except Exception as e:  # noqa: BLE001  (any malformed blob is the caller's input error)
        raise InvalidInput("reforge.ipc.open_shared: not a blob reforge.ipc.share made (%s)" % e) from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or not isinstance(doc.get("tensors"), dict):
        raise InvalidInput("reforge.ipc.open_shared: not a %s blob (made by another version, or not by "
                           "reforge.ipc.share)" % _FORMAT)
    storages = {"TypedStorage": torch.storage.TypedStorage, "UntypedStorage": torch.UntypedStorage}
    out: Dict[str, Any] = {}
    for name, e in doc["tensors"].items():
        try:
            dtype = getattr(torch, e["dtype"])
            if not isinstance(dtype, torch.dtype) or e["storage"] not in storages:
                raise ValueError("dtype %r, storage %r" % (e["dtype"], e["storage"]))
            out[name] = reductions.rebuild_cuda_tensor(
                torch.Tensor, torch.Size(e["size"]), tuple(e["stride"]), e["offset"], storages[e["storage"]],
                dtype, e["device"], e["handle"], e["storage_bytes"], e["storage_offset"], False,
                e["ref_handle"], e["ref_offset"], e["event"], e["event_sync"])
        except (KeyError, TypeError, ValueError) as err:
            raise InvalidInput("reforge.ipc.open_shared: tensor '%s' is described wrongly (%s)" % (name, err)) from None
        except RuntimeError as err:
            raise InvalidInput("reforge.ipc.open_shared: tensor '%s' cannot be opened here (%s); the sharing process "
                               "must be alive, on this machine, and not this process" % (name, err)) from None
    return out
