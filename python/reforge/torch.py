"""reforge.torch: a PyTorch module in, a callable plan out, as Torch-TensorRT's workflow goes.

    import reforge.torch
    compiled = reforge.torch.compile(model, (x,))      # export, build, bind to model.state_dict()
    y = compiled(x)                                    # torch in, torch out, the module's structure
    compiled.refit(new_model)                          # or a state dict; all or nothing
    compiled.save("model.plan"); compiled = reforge.torch.load("model.plan", weights=model)

:func:`compile` exports the module with PyTorch's ONNX exporter (``torch.onnx.export(...,
dynamo=True)``) into a temporary folder, builds a refittable plan from it, and binds every weight
of the plan to the module's own ``state_dict()`` by exact value (``reforge.build(checkpoint=...)``
with the tensors in memory: no checkpoint file is written). A refit then takes a state dict or a
module of the same architecture, by the names PyTorch gives its parameters.

Needs PyTorch 2.x with its ONNX exporter (``onnxscript``); reforge itself does not depend on them.
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

try:
    import torch
    import torch.utils._pytree as pytree
except ImportError as e:
    raise ImportError("reforge.torch needs PyTorch 2.x (pip install torch onnxscript): %s" % e) from e

from . import Error, InvalidInput, InvalidModel, Plan
from . import build as _build
from . import load as _load_plan

__all__ = ["CompiledModule", "compile", "load"]

PathLike = Union[str, "os.PathLike[str]"]

# The calling convention saved beside a plan (CompiledModule.save): ``PLAN`` + this suffix.
CONVENTION_SUFFIX = ".torch.json"
_CONVENTION_FORMAT = "reforge.torch/1"

# Above this many bytes of weights the exported model keeps them in an external data file
# (protobuf messages stop at 2 GiB).
_EXTERNAL_DATA_BYTES = 1_500_000_000


def _name_of(module: Any) -> str:
    return type(module).__name__


# ---- argument and output structure ----


def _paths(spec: Any) -> List[Tuple[Any, ...]]:
    """The key path of every leaf of a pytree spec, in flattening order: a dict key or a
    ModelOutput field as its name, a namedtuple field as its name, a sequence slot as its index."""
    if spec.is_leaf():
        return [()]
    keys: Sequence[Any]
    context = spec.context
    if isinstance(context, (list, tuple)) and len(context) == spec.num_children:
        keys = list(context)  # dict, OrderedDict, ModelOutput: the keys
    elif isinstance(context, type) and hasattr(context, "_fields"):
        keys = list(context._fields)  # namedtuple
    else:
        keys = list(range(spec.num_children))
    out: List[Tuple[Any, ...]] = []
    children = spec.children() if hasattr(spec, "children") else spec.children_specs
    for key, child in zip(keys, children):
        out.extend((key,) + p for p in _paths(child))
    return out


def _argument_name(path: Tuple[Any, ...]) -> str:
    """An argument's key path in the call's (args, kwargs) as Python spells it: ``args[0]``,
    ``kwargs['attention_mask']``, ``args[1]['ids']``."""
    head = "args" if path[0] == 0 else "kwargs"
    return head + "".join("[%r]" % k for k in path[1:])


def _output_names(spec: Any) -> List[str]:
    """ONNX names for a module's outputs, from their place in its result: ``output`` for a lone
    tensor, ``output_0`` ... for a tuple's, ``logits`` for a dict's or a ModelOutput's
    ``logits``, nested places joined by dots (``output_1.0``)."""
    names = []
    for path in _paths(spec):
        if not path:
            names.append("output")
            continue
        parts = [str(k) for k in path]
        if isinstance(path[0], int):
            parts[0] = "output_" + parts[0]
        names.append(".".join(parts))
    return names


def _same_constant(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - objects whose == does not give a truth value
        return a is b


class CompiledModule:
    """A module compiled into a reforge plan (:func:`compile`, :func:`load`).

    ``compiled(*args, **kwargs)`` takes the arguments the module was compiled with: the same
    structure, torch tensors where the example had tensors (shapes as exported: fixed, or
    within ``dynamic_shapes``), and equal values where the example had other values (those were
    exported as constants). It returns torch tensors on the first tensor argument's device, in
    the structure the module returns (a tensor, a tuple, a list, a dict, a ``transformers``
    ``ModelOutput``: any structure ``torch.utils._pytree`` flattens). On the CPU the outputs
    share the engine's output buffers (no copy). A module compiled with ``device="cuda"`` and
    called with CUDA tensors reads them on the GPU and returns CUDA tensors there, never
    passing through host memory (new tensors of torch's allocator, ready on any stream: as
    :meth:`reforge.Plan.run` makes them); called with CPU tensors it returns CPU tensors.

    ``refit`` gives it new weights (all of them, or none on an error), ``save`` writes the plan
    and the calling convention, ``plan`` is the :class:`reforge.Plan` underneath.
    """

    def __init__(
        self,
        plan: Plan,
        in_spec: Any,
        inputs: List[Dict[str, Any]],
        out_spec: Any,
        name: str,
        strip: bool,
    ) -> None:
        self._plan = plan
        self._in_spec = in_spec
        self._inputs = inputs  # per leaf of (args, kwargs): {"input": ONNX name or None} | {"constant": v}
        self._out_spec = out_spec
        self._name = name
        self._strip = strip

    @property
    def plan(self) -> Plan:
        """The underlying :class:`reforge.Plan` (its inputs and outputs carry the ONNX names)."""
        return self._plan

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            raise TypeError(
                "%s (compiled): called with arguments of another structure than it was compiled with:\n"
                "  compiled: %s\n  called:   %s" % (self._name, self._in_spec, spec))
        feeds: Dict[str, Any] = {}
        paths = _paths(spec)
        for leaf, role, path in zip(leaves, self._inputs, paths):
            if "constant" in role:
                if not _same_constant(leaf, role["constant"]):
                    raise ValueError(
                        "%s (compiled): %s is %r, but it was %r when compiled, and the plan holds that value as "
                        "a constant: compile again with this value" % (
                            self._name, _argument_name(path), leaf, role["constant"]))
                continue
            if not isinstance(leaf, torch.Tensor):
                raise TypeError("%s (compiled): %s must be a torch tensor, as when compiled, not %s" % (
                    self._name, _argument_name(path), type(leaf).__name__))
            if role["input"] is not None:
                feeds[role["input"]] = leaf
        if not feeds:
            raise InvalidInput("%s (compiled): the plan has no tensor input to take the device from" % self._name)
        outputs = self._plan._run_values(feeds)
        return pytree.tree_unflatten(outputs, self._out_spec)

    forward = __call__

    def refit(self, weights: Any, **options: Any) -> Dict[str, Any]:
        """Gives the plan new weights, in place, as one transaction: a module of the same
        architecture (its ``state_dict()``) or a state dict (``{name: tensor}``, as PyTorch names
        parameters and buffers). Every weight the plan reads must be given, with the shape and
        dtype it had; extra entries (``num_batches_tracked``) are ignored and listed in the
        report's ``unused_checkpoint_tensors``. Raises :class:`reforge.RefitRefused` naming each
        missing or mistyped tensor; the plan then keeps its weights. Returns the refit report
        (:meth:`reforge.Plan.refit`); ``options`` are that method's (``allow_nonfinite``,
        ``progress``)."""
        return self._plan.refit(_state_dict_of(weights, "refit"), names="checkpoint", **options)

    def save(self, path: PathLike, *, strip: Optional[bool] = None) -> None:
        """Writes the plan to ``path`` (an ordinary plan file: ``reforge.load``, the CLI) and the
        calling convention (argument structure, constants, output structure) to ``path`` +
        ``".torch.json"``, which :func:`load` reads. ``strip`` leaves the weights out (the default
        when compiled with ``strip_weights``): :func:`load` then takes the weights, or a later
        :meth:`refit`."""
        convention = {
            "format": _CONVENTION_FORMAT,
            "module": self._name,
            "in_spec": _dump_spec(self._in_spec, "arguments", self._name),
            "inputs": [_json_role(role, path, self._name) for role, path in zip(self._inputs, _paths(self._in_spec))],
            "out_spec": _dump_spec(self._out_spec, "outputs", self._name),
            "strip_weights": self._strip,
        }
        self._plan.save(path, strip=self._strip if strip is None else strip)
        target = os.fspath(path) + CONVENTION_SUFFIX
        with open(target + ".tmp", "w") as f:
            json.dump(convention, f, indent=1)
        os.replace(target + ".tmp", target)

    def __repr__(self) -> str:
        return "<reforge.torch.CompiledModule %s, %r>" % (self._name, self._plan)


def _dump_spec(spec: Any, what: str, name: str) -> str:
    try:
        return pytree.treespec_dumps(spec)
    except Exception as e:  # noqa: BLE001 - pytree raises several kinds for unregistered types
        raise TypeError("%s (compiled): cannot save the structure of its %s: %s" % (name, what, e)) from e


def _json_role(role: Dict[str, Any], path: Tuple[Any, ...], name: str) -> Dict[str, Any]:
    if "input" in role:
        return role
    value = role["constant"]
    if value is None or isinstance(value, (bool, int, float, str)):
        return role
    raise TypeError("%s (compiled): cannot save %s, a constant %s; only None, bool, int, float and str are saved" % (
        name, _argument_name(path), type(value).__name__))


def _load_spec(text: str) -> Any:
    """A saved pytree spec; the modules defining its types (``transformers.modeling_outputs``) are
    imported first, since a type is known to pytree only once its class exists."""
    try:
        return pytree.treespec_loads(text)
    except Exception:  # noqa: BLE001 - an unknown type: import the modules its names point at
        pass

    def types(node: Any) -> List[str]:
        found = [node["type"]] if node.get("type") else []
        for child in node.get("children_spec", []):
            found.extend(types(child))
        return found

    for name in types(json.loads(text)[1]):
        module = name.rpartition(".")[0]
        if module:
            try:
                importlib.import_module(module)
            except ImportError:
                pass
    return pytree.treespec_loads(text)


def _state_dict_of(weights: Any, what: str) -> Dict[str, Any]:
    """A module's ``state_dict()`` or a mapping of tensors, with tensors that need gradients
    detached (no copy); other objects are a TypeError naming what ``what`` takes."""
    if isinstance(weights, torch.nn.Module):
        weights = weights.state_dict()
    if not isinstance(weights, Mapping):
        raise TypeError("%s takes a torch.nn.Module or a state dict {name: tensor}, not %s" % (
            what, type(weights).__name__))
    return {str(k): v.detach() if isinstance(v, torch.Tensor) else v for k, v in weights.items()}


# ---- compile ----


def _device_name(device: Any) -> str:
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError("device must be 'cpu' or 'cuda', got %r" % (device,)) from None
    if d.type not in ("cpu", "cuda") or (d.index not in (None, 0)):
        raise ValueError("device must be 'cpu' or 'cuda', got %r" % (device,))
    return d.type


def _export(module: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], dynamic_shapes: Any,
            export_options: Mapping[str, Any]) -> Any:
    """The module exported with the dynamo exporter; then its constants folded (onnxscript's
    folder: split sequences become Split nodes) without the exporter's other rewrites, which
    would fold BatchNorm into convolutions with arithmetic no checkpoint can replay bit for bit
    (reforge folds it itself, with a recipe)."""
    try:
        import onnx_ir.passes.common as common_passes
        import onnxscript.optimizer
    except ImportError as e:
        raise ImportError("reforge.torch.compile needs PyTorch's ONNX exporter (pip install onnxscript): %s" % e) from e

    options = dict(export_options)
    options.setdefault("verbose", False)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            program = torch.onnx.export(module, args, kwargs=kwargs, dynamic_shapes=dynamic_shapes, dynamo=True,
                                        optimize=False, **options)
    except Exception as e:  # noqa: BLE001 - the exporter raises many kinds; all get the module's name
        raise InvalidModel("reforge.torch.compile: torch.onnx.export could not export %s: %s: %s" % (
            _name_of(module), type(e).__name__, e)) from e
    finally:
        module.train(was_training)
    onnxscript.optimizer.fold_constants(program.model)
    common_passes.RemoveUnusedNodesPass()(program.model)
    return program


def _rename_outputs(graph: Any, names: List[str]) -> None:
    """Gives the graph's outputs the names of their places in the module's result, unless a value
    is also an input or an initializer or is returned twice (its name stays) or the name is taken."""
    taken = {v.name for v in graph.inputs} | set(graph.initializers)
    for node in graph:
        taken.update(o.name for o in node.outputs)
    counts: Dict[int, int] = {}
    for v in graph.outputs:
        counts[id(v)] = counts.get(id(v), 0) + 1
    inputs = {id(v) for v in graph.inputs}
    for value, name in zip(graph.outputs, names):
        if counts[id(value)] > 1 or id(value) in inputs or value.name in graph.initializers or value.name == name:
            continue
        unique, n = name, 1
        while unique in taken:
            unique, n = "%s_%d" % (name, n), n + 1
        taken.discard(value.name)
        value.name = unique
        taken.add(unique)


def compile(  # noqa: A001 - torch.compile's and torch_tensorrt.compile's name
    module: Any,
    example_inputs: Any,
    *,
    example_kwargs: Optional[Mapping[str, Any]] = None,
    refit: Union[bool, str, Sequence[str]] = True,
    strip_weights: Optional[bool] = None,
    device: Any = "cpu",
    dynamic_shapes: Any = None,
    export_options: Optional[Mapping[str, Any]] = None,
    **build_options: Any,
) -> CompiledModule:
    """Compiles a ``torch.nn.Module`` into a plan and returns it as a callable
    :class:`CompiledModule` (``torch_tensorrt.compile(module, inputs=..., make_refittable=True)``).

    ``example_inputs``: the positional arguments of one call (a tensor, or a tuple or list of
    them); ``example_kwargs``: keyword arguments. Arguments that are not tensors (``use_cache=
    False``) are exported as constants: a call must pass equal values. ``dynamic_shapes``: as
    ``torch.export`` takes it (``{"x": {0: torch.export.Dim("batch")}}``); without it every
    shape is fixed to the example's. The module is exported in eval mode (its mode is restored
    after).

    ``refit``: ``True`` (default: every weight refittable), ``"identical"``, a list of glob
    patterns, or ``False`` (a baked plan: no refit). With refit, every weight of the plan is
    bound to the module's ``state_dict()`` by exact value. ``strip_weights`` (default: as
    ``refit``) builds without the weight data and then gives the plan the module's weights in a
    refit, which proves the binding end to end; :meth:`CompiledModule.save` then writes the plan
    without weights. ``device``: ``"cpu"`` or ``"cuda"``. ``build_options``: the other options
    of :func:`reforge.build` (``precision``, ``threads``, ``literals``, ``bind``, ...);
    ``export_options``: more arguments of ``torch.onnx.export`` (``opset_version``).

    Raises :class:`reforge.InvalidModel` naming the module when it cannot be exported (with the
    exporter's error) or built (the nodes reforge cannot run), :class:`reforge.RefitRefused`
    when its weights do not bind (each named), ``ValueError``/``TypeError`` for bad arguments.
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError("reforge.torch.compile takes a torch.nn.Module, not %s" % type(module).__name__)
    name = _name_of(module)
    if isinstance(example_inputs, torch.Tensor):
        args: Tuple[Any, ...] = (example_inputs,)
    elif isinstance(example_inputs, (tuple, list)):
        args = tuple(example_inputs)
    else:
        raise TypeError("example_inputs: a tensor or a tuple of the module's positional arguments, not %s"
                        % type(example_inputs).__name__)
    kwargs = dict(example_kwargs or {})
    for key in ("checkpoint", "strip"):
        if key in build_options:
            raise TypeError("compile() gives build() its %s itself; remove %s=" % (key, key))
    plan_device = _device_name(device)
    if strip_weights is None:
        strip_weights = refit is not False
    if strip_weights and refit is False:
        raise ValueError("strip_weights needs a refittable plan (refit=True): a baked plan holds its weights")

    program = _export(module, args, kwargs, dynamic_shapes, export_options or {})
    leaves, in_spec = pytree.tree_flatten((args, kwargs))
    exported = getattr(program, "exported_program", None)
    graph = program.model.graph
    onnx_inputs = {v.name for v in graph.inputs}
    inputs: List[Dict[str, Any]] = []
    if exported is not None:
        user = list(exported.graph_signature.user_inputs)
        if len(user) != len(leaves):
            raise InvalidModel("reforge.torch.compile(%s): the export has %d inputs for %d arguments" % (
                name, len(user), len(leaves)))
        for leaf, placeholder in zip(leaves, user):
            if isinstance(leaf, torch.Tensor):
                inputs.append({"input": placeholder if placeholder in onnx_inputs else None})
            else:
                inputs.append({"constant": leaf})
        out_spec = exported.call_spec.out_spec
    else:  # no exported program to read: tensors in order, one output or a tuple
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        if len(tensors) != len(graph.inputs):
            raise InvalidModel("reforge.torch.compile(%s): the export has %d inputs for %d tensor arguments" % (
                name, len(graph.inputs), len(tensors)))
        names = iter(v.name for v in graph.inputs)
        inputs = [{"input": next(names)} if isinstance(leaf, torch.Tensor) else {"constant": leaf} for leaf in leaves]
        out_spec = pytree.tree_flatten(tuple(range(len(graph.outputs))))[1] if len(graph.outputs) != 1 else \
            pytree.tree_flatten(0)[1]
    if out_spec.num_leaves != len(graph.outputs):
        raise InvalidModel("reforge.torch.compile(%s): it returns %d values that are not all tensors; the plan has "
                           "%d outputs" % (name, out_spec.num_leaves, len(graph.outputs)))
    _rename_outputs(graph, _output_names(out_spec))

    state = _state_dict_of(module, "compile") if refit is not False else None
    size = sum(v.numel() * v.element_size() for v in (state or module.state_dict()).values()
               if isinstance(v, torch.Tensor))
    with tempfile.TemporaryDirectory(prefix="reforge-compile-") as folder:
        path = os.path.join(folder, "model.onnx")
        program.save(path, external_data=size > _EXTERNAL_DATA_BYTES)
        try:
            plan = _build(path, refit=refit, strip_weights=strip_weights, checkpoint=state or None,
                          device=plan_device, **build_options)
        except Error as e:
            raise type(e)("reforge.torch.compile(%s): %s" % (name, e)) from e
    if strip_weights and plan.missing:
        try:
            plan.refit(state, names="checkpoint")
        except Error as e:
            raise type(e)("reforge.torch.compile(%s): its state_dict() does not refit the plan: %s" % (name, e)) from e
    return CompiledModule(plan, in_spec, inputs, out_spec, name, bool(strip_weights))


def load(path: PathLike, weights: Any = None, *, verify: bool = True, threads: int = 0) -> CompiledModule:
    """Reads a plan written by :meth:`CompiledModule.save` (or any plan) as a
    :class:`CompiledModule` (``torch_tensorrt.load``). ``weights``: a module or state dict to
    refit it with, which a plan saved without weights needs before it runs.

    Without the calling convention file beside it (a plan from ``reforge.build`` or the CLI), the
    plan takes its inputs as positional tensors in its input order and returns a tensor (one
    output) or a tuple. Raises what :func:`reforge.load` and :meth:`CompiledModule.refit` raise.
    """
    plan = _load_plan(path, verify=verify, threads=threads)
    convention_path = os.fspath(path) + CONVENTION_SUFFIX
    if os.path.exists(convention_path):
        with open(convention_path) as f:
            convention = json.load(f)
        if convention.get("format") != _CONVENTION_FORMAT:
            raise ValueError("%s: not a reforge.torch calling convention (format %r)" % (
                convention_path, convention.get("format")))
        compiled = CompiledModule(plan, _load_spec(convention["in_spec"]), convention["inputs"],
                                  _load_spec(convention["out_spec"]), convention["module"],
                                  bool(convention.get("strip_weights", False)))
    else:
        names = [v.name for v in plan.inputs]
        in_spec = pytree.tree_flatten((tuple(range(len(names))), {}))[1]
        outputs = plan.outputs
        out_spec = pytree.tree_flatten(0 if len(outputs) == 1 else tuple(range(len(outputs))))[1]
        compiled = CompiledModule(plan, in_spec, [{"input": n} for n in names], out_spec,
                                  os.path.basename(os.fspath(path)), bool(plan.missing))
    if weights is not None:
        compiled.refit(weights)
    return compiled

