"""reforge: build, run and refit inference plans of ONNX models, in process.

    import reforge
    reforge.check("model.onnx")                        # nodes reforge cannot run
    plan = reforge.build("model.onnx", refit=True, strip_weights=True, checkpoint="A.safetensors")
    plan.save("model.plan"); plan = reforge.load("model.plan")
    plan.refit("B.safetensors")                        # or B.onnx, or {name: array}, or model.state_dict()
    out = plan.run({"input_ids": ids})                 # {output name: array}: numpy, or torch for torch
    compiled = reforge.torch.compile(model, (x,))      # a torch.nn.Module as a callable plan (reforge.torch)

The same library as the ``reforge`` CLI, with the same checks and the same error messages:
every failure raises a :class:`reforge.Error` subclass. Arrays go in and out without copies where
the layout allows (numpy arrays, and CPU tensors of any framework with ``__dlpack__``, torch
included); a CUDA plan fed torch CUDA tensors answers with torch CUDA tensors, never passing
through host memory; ``run`` and ``refit`` release the GIL, so threads can run one plan while
another refits it, each run on the old or the new weights, never a mix.
"""

from __future__ import annotations

import json
import os
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

# A development set-up (scripts/setup.sh) keeps the package files in python/reforge and the
# built extension in build/python/reforge, both on sys.path: the package spans the two.
__path__ = pkgutil.extend_path(__path__, __name__)

from . import _reforge  # noqa: E402
from ._reforge import CorruptPlan, Error, InvalidInput, InvalidModel, RefitRefused  # noqa: E402
from ._tensors import copy_into as _copy_into, host_input as _array, to_torch as _to_torch  # noqa: E402
from ._tensors import before_device_run as _before_device_run, from_device as _from_device  # noqa: E402
from ._tensors import output_place as _output_place, run_inputs as _run_inputs  # noqa: E402
from ._tensors import torch_device as _torch_device  # noqa: E402
from .export import export_causal_lm  # noqa: E402

__version__: str = _reforge.__version__

__all__ = [
    "Error",
    "InvalidModel",
    "InvalidInput",
    "CorruptPlan",
    "RefitRefused",
    "ValueInfo",
    "Plan",
    "PlanSequence",
    "check",
    "build",
    "export_causal_lm",
    "load",
    "load_timing_cache",
    "save_timing_cache",
    "__version__",
]

PathLike = Union[str, "os.PathLike[str]"]
Dim = Union[int, str, None]


@dataclass(frozen=True)
class ValueInfo:
    """A plan input or output, as ONNX Runtime's ``NodeArg``: its name, element type and shape.

    ``dtype`` is the element type's name (``"float32"``, ``"int64"``, ...); ``shape`` holds a
    size, a symbol (``"batch"``) or ``None`` (unknown) per dimension, and is ``None`` when even
    the rank is unknown.
    """

    name: str
    dtype: str
    shape: Optional[Tuple[Dim, ...]]

    @property
    def type(self) -> str:
        """The ONNX Runtime spelling of the type, e.g. ``"tensor(float)"``."""
        onnx_names = {"float32": "float", "float64": "double"}
        return "tensor(%s)" % onnx_names.get(self.dtype, self.dtype)


def _value_infos(text: str) -> List[ValueInfo]:
    import json

    return [
        ValueInfo(v["name"], v["dtype"], None if v["shape"] is None else tuple(v["shape"])) for v in json.loads(text)
    ]


# The most threads a plan or build takes (the CLI's --threads has the same range).
_MAX_THREADS = 1024


def _check_int(value: Any, name: str, low: int, high: int, note: str = "") -> int:
    """``value`` as an int in [low, high]; a ValueError (a TypeError for a non-integer) naming
    the parameter and the range otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an integer from %d to %d%s, got %r" % (name, low, high, note, value))
    if not low <= value <= high:
        raise ValueError("%s must be from %d to %d%s, got %d" % (name, low, high, note, value))
    return value


def _check_block_size(value: Any) -> int:
    """An int4 block size: a power of two from 16 to 1048576 (what the int4 layout takes)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("block_size must be a power of two from 16 to 1048576, got %r" % (value,))
    if not 16 <= value <= 1 << 20 or value & (value - 1):
        raise ValueError("block_size must be a power of two from 16 to 1048576, got %d" % value)
    return value


def _lora_args(lora: Any) -> Tuple[str, Dict[str, Any], str]:
    """``Plan.refit``'s ``lora`` as the extension takes it: (path, tensors, config JSON)."""
    if lora is None:
        return "", {}, ""
    if isinstance(lora, (str, os.PathLike)):
        return os.fspath(lora), {}, ""
    if isinstance(lora, tuple) and len(lora) == 2 and isinstance(lora[0], Mapping):
        tensors, config = lora
        if hasattr(config, "to_dict") and callable(config.to_dict):  # peft.LoraConfig
            config = config.to_dict()
        if not isinstance(config, Mapping):
            raise TypeError("lora=(tensors, config): config is a dict as in adapter_config.json or a peft LoraConfig, "
                            "not %s" % type(config).__name__)
        # As PEFT writes adapter_config.json: sets as lists, enums by value.
        config = {k: (sorted(v) if isinstance(v, (set, frozenset)) else v) for k, v in config.items()}
        text = json.dumps(config, default=lambda v: v.value if hasattr(v, "value") else str(v))
        return "", {str(k): _array(v, "LoRA tensor '%s'" % k) for k, v in tensors.items()}, text
    raise TypeError("lora is a PEFT adapter's folder or adapter_model.safetensors, or (tensors, config), not %s"
                    % type(lora).__name__)


class Plan:
    """A built plan, ready to run: ONNX Runtime's ``InferenceSession`` for a reforge plan.

    Made by :func:`build` or :func:`load`. ``run`` may be called from several threads at once,
    also while another thread refits: each run uses the weights current when it starts, all of
    them from one refit.
    """

    def __init__(self, impl: "_reforge.Plan") -> None:
        self._impl = impl
        self._outputs: Optional[List[ValueInfo]] = None  # fixed at build: a refit keeps them

    # ---- running ----

    @property
    def inputs(self) -> List[ValueInfo]:
        """The plan's inputs (name, dtype, symbolic shape), in declaration order."""
        return _value_infos(self._impl.value_infos(False))

    @property
    def outputs(self) -> List[ValueInfo]:
        """The plan's outputs (name, dtype, symbolic shape), in declaration order."""
        return _value_infos(self._impl.value_infos(True))

    def get_inputs(self) -> List[ValueInfo]:
        """ONNX Runtime's spelling of :attr:`inputs`."""
        return self.inputs

    def get_outputs(self) -> List[ValueInfo]:
        """ONNX Runtime's spelling of :attr:`outputs`."""
        return self.outputs

    def run(self, inputs: Any, output_names: Any = None, *, outputs: Optional[Mapping[str, Any]] = None,
            version: Optional[str] = None, outputs_on: Optional[str] = None) -> Any:
        """Runs the plan and returns ``{output name: array}``.

        ONNX Runtime's order is taken too: ``run(None, feeds)`` or ``run(["logits"], feeds)``
        (output names, or None for all, then the feeds) returns a list of arrays in the order
        asked, as ``InferenceSession.run`` does.

        ``inputs`` maps every input name to an array of the input's dtype: a numpy array or any
        CPU tensor with ``__dlpack__`` (a CUDA plan also takes CUDA memory), used in place, not
        copied (other layouts are made contiguous first). The outputs are numpy arrays over the engine's output buffers (no
        copy); an output that shares bytes with an input or an engine weight (an Identity or
        Reshape of one) is read-only. When the inputs are torch tensors the outputs are torch
        tensors on the inputs' device (torch tensors must all be on one device):

        - CPU: over the engine's buffers (no copy; a read-only output is copied);
        - CUDA, for a plan built with ``device="cuda"``: the inputs are read where they are and
          the outputs are made there, with no trip through host memory. Each output is a new
          tensor from torch's allocator, filled by a device-to-device copy of the engine's
          output on torch's current stream; it is owned by the caller, stays valid after later
          runs, and is ready to read on any stream (torch's current stream is synchronized
          before the run, so that the inputs' pending writes are done, and after the copies).
          The input must be on the current CUDA device (where reforge runs). A CPU plan refuses
          CUDA inputs;
        - another device: copied to the host, the outputs copied back there.

        ``outputs_on``: ``"device"`` or ``"host"`` overrides where the outputs go; ``"device"``
        (a CUDA plan; needs torch) returns torch tensors on the inputs' CUDA device, or the current
        one for host inputs; ``"host"`` returns them in host memory (torch CPU tensors for torch
        inputs, numpy arrays otherwise). ``bfloat16`` outputs come back as ``torch.bfloat16``
        tensors, or as float32 numpy arrays (numpy has no bfloat16; the values are exact).
        ``output_names`` selects outputs (all by default). The GIL is released while the plan
        runs.

        ``outputs`` maps output names to arrays or tensors to write those outputs into, as ONNX
        Runtime's I/O binding's bound outputs: each must have the output's shape and dtype and be
        writable; the output is copied into it (on its device, for a torch tensor: device to
        device from a run with outputs on the GPU), and the result holds that array. The copy is
        made after the run; the engine does not write into caller memory directly.

        ``version`` runs on a named weight version (made by ``refit(..., version=NAME)``) instead
        of the plan's current weights.

        Raises :class:`InvalidInput` for an unknown, missing, or mistyped input (the message
        names it with the dtype and shape the model expects), a CUDA input to a CPU plan, torch
        inputs on two devices (each named), or an ``outputs`` entry that does not fit,
        :class:`Error` when the plan cannot run (a stripped plan before its refit, naming the
        missing sources).
        """
        if isinstance(output_names, Mapping) and (inputs is None or _names_list(inputs)):
            # ONNX Runtime's run(output_names, input_feed): a list in the order asked.
            chosen = self.run(output_names, None if inputs is None else list(inputs), outputs=outputs, version=version,
                              outputs_on=outputs_on)
            return list(chosen.values())
        if not isinstance(inputs, Mapping):
            raise TypeError(
                "run() takes a dict of inputs {name: array} (or ONNX Runtime's run(output_names, feeds)), not %s"
                % type(inputs).__name__)
        names = self._output_names()
        for name in list(output_names or []) + list(outputs or {}):
            if name not in names:
                raise InvalidInput("'%s' is not an output of the plan; its outputs are: %s" % (name, ", ".join(names)))
        out = dict(zip(names, self._run_values(inputs, outputs, version, outputs_on)))
        if output_names is None:
            return out
        return {name: out[name] for name in output_names}

    def _output_names(self) -> List[str]:
        if self._outputs is None:
            self._outputs = self.outputs
        return [v.name for v in self._outputs]

    def _run_values(self, inputs: Mapping[str, Any], into: Optional[Mapping[str, Any]] = None,
                    version: Optional[str] = None, outputs_on: Optional[str] = None) -> List[Any]:
        """The outputs of one run in declaration order: numpy arrays, or torch tensors on the
        torch inputs' device (``outputs_on`` as :meth:`run` takes it); those named in ``into``
        copied into its arrays."""
        plan_device = self.device
        arrays, inputs_device = _run_inputs(inputs, plan_device)
        on_device, device = _output_place(outputs_on, inputs_device, plan_device)
        _before_device_run(inputs_device)
        values = self._impl.run(arrays, version or "", on_device, device.index if on_device else 0)
        self._output_names()
        if on_device:
            return _from_device(values, self._outputs, into or {}, device)
        if device is not None:
            values = [_to_torch(v, info.dtype, device) for v, info in zip(values, self._outputs)]
        if into:
            index = {info.name: i for i, info in enumerate(self._outputs)}
            for name, dest in into.items():
                i = index[name]
                values[i] = _copy_into(dest, values[i], self._outputs[i].dtype, name)
        return values

    def generate(
        self,
        prompts: Any,
        max_new_tokens: int = 32,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop_tokens: Sequence[Union[int, str]] = (),
        callback: Optional[Callable[[int, Any], Optional[bool]]] = None,
        tokenizer: Any = None,
        add_special_tokens: bool = True,
        window: Optional[int] = None,
        version: Optional[str] = None,
        return_versions: bool = False,
    ):
        """Generates tokens with a decoder that carries a KV cache (an export with past and present
        key-values), in the library's loop: the cache lives in the engine, allocated once per
        prompt and updated in place.

        ``prompts`` is token ids or text:

        - token ids: one prompt (a list or 1-D array of ids) or several (a list of lists, or a 2-D
          array, one prompt per row). Returns the new tokens as a numpy int64 array, one row per
          prompt; a prompt that stopped early (a stop token, kept in its row, or its callback
          returning False) is padded at the end with -1. ``callback(prompt, token)`` is called as
          each token is made.
        - text: a ``str`` or a list of ``str``, with ``tokenizer=`` to encode it (a path to a
          ``tokenizer.json``, read with the ``tokenizers`` package, or to a sentencepiece
          ``tokenizer.model``, read with ``sentencepiece``, or a folder holding one; or a
          ``tokenizers.Tokenizer``, a ``sentencepiece.SentencePieceProcessor`` or a
          ``transformers`` tokenizer). Returns the generated text, without the prompt (as
          transformers' text-generation pipeline with ``return_full_text=False``): a ``str`` for a
          ``str`` prompt, a list for a list. ``callback(prompt, text)`` is called with each new
          piece of text, decoded incrementally: a character made of several tokens comes once
          complete, and the pieces concatenate to the returned text. ``add_special_tokens``
          encodes the prompts as the tokenizer is configured to (a tokenizer.json's
          post-processor, a transformers tokenizer's own, a sentencepiece model's BOS first).

        ``window`` (``--window``): decode steps on caches of a multiple of ``window`` positions,
        masked padding before the sequence, so that a GPU plan that replays its device work
        (``device_replay=True`` at :func:`build` or :func:`load`) records one step per window
        (None: the library's choice; 0: the caches grow step by step).

        ``version="B"`` generates on the plan's weight version B (``refit(..., version="B")``) at
        every step. Otherwise each step runs on the weights current when it starts, so a refit
        committed during a generation changes the weights from the next token on, never within a
        step. ``return_versions=True`` (token ids only) returns ``(tokens, versions)``: ``versions``
        an int64 array of the tokens' shape holding, for each token, the id of the weight version
        its step ran on (:meth:`version_id`; -1 where the tokens are padded).

        With a tokenizer, generation also stops at its end-of-sequence token where it names one (a
        sentencepiece model's, a transformers tokenizer's; a bare tokenizer.json names none: give
        it in ``stop_tokens``), and ``stop_tokens`` may spell tokens as text (``"</s>"``).

        ``temperature`` 0 is greedy; otherwise tokens are drawn from softmax(logits / temperature)
        over the ``top_k`` most likely (0: all) that reach probability ``top_p``, by a generator
        seeded with ``seed`` (the same tokens on every machine). A callback returning False ends
        its prompt. Raises :class:`Error` naming what the model lacks (no ``input_ids``, no
        ``logits``, no cache) or what is wrong with the arguments (:class:`InvalidInput` for text
        without a tokenizer); ``ImportError`` naming the package to install for a tokenizer file.
        """
        import numpy as np

        from . import text as _text

        is_text = isinstance(prompts, str) or (
            isinstance(prompts, (list, tuple)) and bool(prompts) and all(isinstance(p, str) for p in prompts)
        )
        if isinstance(prompts, (list, tuple)) and not is_text and any(isinstance(p, str) for p in prompts):
            raise InvalidInput("prompts: all text or all token ids, not a mix")
        tok = _text.tokenizer_of(tokenizer) if tokenizer is not None else None
        if return_versions and is_text:
            raise InvalidInput("return_versions=True: the versions are per token; give token ids, not text")

        def ints(row):
            a = np.asarray(row)
            if a.dtype.kind not in "iu" and a.size:
                raise InvalidInput("input_ids: token ids are integers, got %s" % a.dtype)
            return a

        if is_text:
            if tok is None:
                raise _text.needs_tokenizer()
            texts = [prompts] if isinstance(prompts, str) else list(prompts)
            rows = [tok.encode(t, add_special_tokens) for t in texts]
            for t, r in zip(texts, rows):
                if not r:
                    raise InvalidInput("prompt %r encodes to no tokens" % (t,))
            prompt_ids = [list(r) for r in rows]
        else:
            if isinstance(prompts, (list, tuple)) and prompts and not np.isscalar(prompts[0]):
                arrays = [ints(r) for r in prompts]  # prompts of any lengths
            else:
                ids = ints(prompts)
                arrays = [ids] if ids.ndim == 1 else list(ids) if ids.ndim == 2 else None
                if arrays is None:
                    raise InvalidInput(
                        "input_ids: one prompt [n] or one per row [prompts, n], got shape %s" % (ids.shape,)
                    )
            for r in arrays:
                if r.ndim != 1:
                    raise InvalidInput("input_ids: each prompt is a 1-D sequence of token ids, got shape %s" % (r.shape,))
            prompt_ids = [r.tolist() for r in arrays]

        stops = []
        for s in stop_tokens:
            if isinstance(s, str):
                if tok is None:
                    raise InvalidInput("stop token %r is text: give tokenizer= to look it up, or its id" % (s,))
                i = tok.token_id(s)
                if i is None:
                    raise InvalidInput("stop token %r is not in the tokenizer's vocabulary" % (s,))
                stops.append(i)
            else:
                stops.append(int(s))
        if tok is not None and tok.eos is not None and tok.eos not in stops:
            stops.append(tok.eos)

        streams = None
        on_token = callback
        if is_text:
            streams = [_text.text_stream(tok, r) for r in prompt_ids]
            if callback is not None:

                def on_token(i, token):
                    piece = streams[i].push(token)
                    return callback(i, piece) if piece else True

        made, made_on = self._impl.generate(prompt_ids, int(max_new_tokens), float(temperature), int(top_k),
                                            float(top_p), int(seed), stops, -1 if window is None else int(window),
                                            on_token, version or "")
        if is_text:
            out = []
            for i, (stream, row) in enumerate(zip(streams, made)):
                if callback is None:
                    for t in row:
                        stream.push(t)
                rest = stream.finish()
                if rest and callback is not None:
                    callback(i, rest)
                out.append(stream.text)
            return out[0] if isinstance(prompts, str) else out
        out = np.full((len(made), max((len(r) for r in made), default=0)), -1, dtype=np.int64)
        for i, r in enumerate(made):
            out[i, :len(r)] = r
        if not return_versions:
            return out
        on = np.full(out.shape, -1, dtype=np.int64)
        for i, r in enumerate(made_on):
            on[i, :len(r)] = r
        return out, on

    def version_id(self, name: Optional[str] = None) -> int:
        """The id of the weight version ``name`` (``refit(..., version=name)``), or of the current
        weights: what ``generate(..., return_versions=True)`` reports for each token. Every
        version the process makes has an id of its own, so a refit of the current weights gives
        them a new one. :class:`Error` naming the versions there are for an unknown name."""
        return int(self._impl.version_id(name or ""))

    def sequence(self, max_length: int = 0, pairs: Optional[Mapping[str, str]] = None,
                 dims: Optional[Mapping[str, int]] = None) -> "PlanSequence":
        """A sequence of runs that carries state from one run to the next (a KV cache), in
        buffers the engine allocates once and updates in place: see :class:`PlanSequence`.

        ``pairs`` maps each state input to the output that becomes its next value (``{"past.0.key":
        "present.0.key", ...}``); by default the pairs the graph proves (an output made by a Concat
        or TensorScatter from a graph input). ``max_length`` is the capacity along the axis a pair
        grows on (needed when one grows); ``dims`` gives the state inputs' other symbolic
        dimensions (``{"batch": 1}``).
        """
        items = [(k, v) for k, v in (pairs or {}).items()]
        return PlanSequence(self, _reforge.Sequence(self._impl, int(max_length), items, dict(dims or {})))

    # ---- refit ----

    def refit(
        self,
        weights: Union[PathLike, Sequence[PathLike], Mapping[str, Any]],
        *,
        mode: str = "fast",
        names: Optional[str] = None,
        allow_nonfinite: bool = False,
        incremental: bool = False,
        keep_baked: bool = False,
        skip_unchanged: bool = False,
        host_replay: bool = False,
        strip_prefix: str = "",
        add_prefix: str = "",
        version: Optional[str] = None,
        lora: Union[PathLike, Tuple[Mapping[str, Any], Any], None] = None,
        lora_scale: float = 1.0,
        progress: Optional[Callable[[str, int, int, str], None]] = None,
    ) -> Dict[str, Any]:
        """Gives the plan new weights, as one transaction: all of them, or (on any error) none.

        ``weights`` is one of:

        - a re-exported ONNX model (``"B.onnx"``): sources taken by graph position; ``mode`` is
          ``"fast"`` (replay the recipes), ``"slow"`` (rebuild from the model) or ``"verify"``
          (both, committed only when every engine weight agrees bit for bit);
        - a safetensors checkpoint (a file, several, or a sharded folder) the plan was bound to
          at build (``build(checkpoint=...)``);
        - a dict of arrays (numpy, or torch tensors: ``model.state_dict()``, read through
          ``__dlpack__``, not converted to numpy). ``names`` says what its keys are:
          ``"checkpoint"`` (framework names, read through the plan's checkpoint bindings, as a
          safetensors file is) or ``"onnx"`` (ONNX initializer names or source keys); by
          default ``"checkpoint"`` when the plan was built with a checkpoint, else ``"onnx"``.
          The values are read in place (GIL released); what the plan would keep of them
          (weights used as they are, such as norms and embeddings) is copied into memory the
          plan owns, so changing the arrays after the call (an optimizer step) does not change
          the plan. Do not change them during the call. ``incremental=True`` (``"onnx"`` names
          only) changes only the sources given.

        ``strip_prefix``/``add_prefix`` rename a checkpoint's tensors first (``--strip-prefix``,
        ``--add-prefix``): ``strip_prefix`` removed from the names that begin with it (an error
        when none does), then ``add_prefix`` put in front of every name, for a checkpoint saved
        under another module name than the one the model was exported from.
        ``version="B"`` puts the new weights into the plan's weight version named B (made, or
        replaced) instead of its current weights, which stay: ``run(..., version="B")`` runs on
        them, :meth:`versions` lists the names, :meth:`drop_version` frees one. Versions share
        every engine weight they do not change. (Not with ``mode="slow"``.)
        ``lora`` merges a LoRA adapter into the checkpoint ``weights`` (its base, bound at build)
        before the plan's recipes read it: ``W + lora_alpha/r * B @ A`` (``/sqrt(r)`` with
        ``use_rslora``; times ``lora_scale``), by the arithmetic docs/refit.md states, so that the
        same base and adapter always give the same bytes. It is the folder PEFT's
        ``save_pretrained`` writes (or its ``adapter_model.safetensors``), or a pair
        ``(tensors, config)``: arrays by PEFT's names (``get_peft_model_state_dict(model)``) and the
        adapter's config (a dict as in ``adapter_config.json``, or PEFT's ``LoraConfig``). Adapter
        tensors that adapt nothing of the plan, and features the merge cannot express (DoRA,
        ``fan_in_fan_out``, ``modules_to_save``, ...), are refused by name; the report's ``lora``
        lists what was merged.
        New weights holding NaN or Inf are refused unless ``allow_nonfinite``. In a plan built
        with ``individual=...``, new weights that hold other values for a baked source than the
        plan was built with are refused (the plan would run a mix of old and new weights) unless
        ``keep_baked=True``, which keeps the plan's values (``baked_differing_kept`` lists them).
        ``skip_unchanged=True`` hashes every new weight and leaves alone the engine weights made
        only from weights whose bytes the plan already had (those it was built or last refit
        with): for updates that change a part of the model. The weights are the same as without
        it; the report's ``sources_unchanged`` counts what was left alone.
        A GPU plan's refit makes the weights the GPU holds alone there, from the new weights
        streamed to it (the report's ``weights_on_device``); ``host_replay=True``
        (``--host-replay``) replays every recipe on the host instead. The bytes are the same.
        Returns the refit report, the schema ``reforge refit --json`` prints (docs/refit.md, "The
        refit report"): ``from``, ``reader`` (what read the weights, chosen by their content, not
        a file's name), ``mode``, ``device``, ``sources_set``, ``weights_replayed``,
        ``bytes_in``/``bytes_out``/``bytes_copied``, timings in ms, ``verified_weights``,
        ``unused_checkpoint_tensors``, ``baked_given``, ``summary`` (the CLI's text), ... ``progress(step, done, total, unit)`` is called as each step starts (reading:
        ``"reading the checkpoint"`` or ``"importing the model"``; a slow refit's build steps;
        ``"validating sources"``; ``"replaying recipes"``) and as the replay advances (``done``
        of ``total`` bytes of engine weights); an exception it raises stops the refit, which then
        changes nothing, and propagates.
        Raises :class:`RefitRefused` with the CLI's message (a missing, unbound or mistyped
        source, a different model, non-finite values); the plan is then unchanged. Runs on
        other threads continue meanwhile, each on the old or the new weights.
        """
        if hasattr(weights, "state_dict") and callable(weights.state_dict) and not isinstance(weights, Mapping):
            raise TypeError("refit() takes the module's weights, not the module: plan.refit(module.state_dict())")
        if not isinstance(weights, (Mapping, str, os.PathLike, list, tuple)):
            raise TypeError(
                "refit() takes an ONNX model or safetensors path, a list of paths, or a dict of arrays (a state "
                "dict), not %s" % type(weights).__name__)
        lora_path, lora_tensors, lora_config = _lora_args(lora)
        if isinstance(weights, Mapping):
            if names is None:
                names = "checkpoint" if self._impl.bound else "onnx"
            if names not in ("checkpoint", "onnx"):
                raise ValueError("names must be 'checkpoint' or 'onnx', got %r" % (names,))
            if mode != "fast":
                raise ValueError("mode %r needs a re-exported ONNX model; arrays refit the fast way" % (mode,))
            arrays = {str(k): _array(v, "weight '%s'" % k) for k, v in weights.items()}
            return self._impl.refit_tensors(
                arrays, names == "checkpoint", allow_nonfinite, incremental, keep_baked, skip_unchanged, strip_prefix,
                add_prefix,
                version or "", lora_path, lora_tensors, lora_config, float(lora_scale), progress, bool(host_replay)
            )
        if names is not None or incremental:
            raise ValueError("names and incremental apply to a dict of arrays, not to files")
        files = [os.fspath(weights)] if isinstance(weights, (str, os.PathLike)) else [os.fspath(w) for w in weights]
        return self._impl.refit_files(files, mode, allow_nonfinite, keep_baked, skip_unchanged, strip_prefix, add_prefix,
                                      version or "", lora_path, lora_tensors, lora_config, float(lora_scale), progress,
                                      bool(host_replay))

    def versions(self) -> List[str]:
        """The names of the plan's weight versions (``refit(..., version=NAME)``), sorted."""
        return list(self._impl.versions())

    def drop_version(self, name: str) -> None:
        """Frees the weight version ``name`` (runs on it finish first); :class:`Error` naming the
        versions there are for an unknown name."""
        self._impl.drop_version(name)

    @property
    def missing(self) -> List[str]:
        """Keys of the refittable sources that have no value yet (a stripped plan before its refit)."""
        return self._impl.missing

    # ---- the plan itself ----

    def save(
        self,
        path: PathLike,
        *,
        strip: Optional[bool] = None,
        progress: Optional[Callable[[str, int, int, str], None]] = None,
    ) -> None:
        """Writes the plan with its current weights (atomically: a failed write leaves nothing).

        ``strip=True`` leaves the refittable weight data out; the default strips exactly when
        the plan still has sources without a value (a stripped build before any refit).
        ``progress(step, done, total, unit)`` is called as each step starts (``"encoding the
        plan"``, ``"writing the plan"``, ``"syncing to disk"``) and as the writing advances
        (``done`` of ``total`` bytes of the file); an exception it raises stops the save, which
        then leaves no file, and propagates.
        """
        if strip is None:
            strip = bool(self._impl.missing)
        self._impl.save(os.fspath(path), strip, progress)

    def stats(self) -> Dict[str, int]:
        """The engine's runtime counters since the plan was made or loaded, so that what its caches
        save can be checked from outside: ``runs``; ``inference_passes`` and ``arena_plans`` (shape
        inferences and activation-arena layouts made: one per shape bucket of the inputs' symbolic
        sizes, not one per size); ``shape_buckets`` and ``shape_buckets_evicted``; recorded replay on
        a device (``recordings_made``, ``replays``, ``recordings_evicted``, ``recordings_retired``,
        ``live_recordings``); ``eager_runs``; ``last_run_allocations`` (the tensor allocations of the most recent run,
        its outputs included: what its arenas, shape memo and sequence state did not serve);
        ``live_weight_versions``; ``weight_allocations`` and ``weight_bytes_uploaded`` (device memory
        allocations made for weight versions, one per version, and the bytes uploaded into them)."""
        import json

        return json.loads(self._impl.stats())

    def inspect(self) -> Dict[str, Any]:
        """What ``reforge inspect --json`` shows: producer, build mode and options, target,
        inputs and outputs, sizes, engine weights with recipes, sources with hashes and
        checkpoint bindings, literals, unbound sources (the build-time record; ``file_bytes``
        is ``None`` for a plan not read from or saved to a file)."""
        import json

        return json.loads(self._impl.inspect())

    @property
    def sources(self) -> List[Dict[str, Any]]:
        """The plan's sources (what a refit can supply), as ``inspect()["sources"]``."""
        return self.inspect().get("sources") or []

    @property
    def device(self) -> str:
        """Where the plan's nodes run: ``"cpu"`` or ``"cuda"`` (as built; a refit keeps it)."""
        return self._impl.device

    @property
    def mode(self) -> str:
        """The build mode: ``"baked"``, ``"refit"``, ``"refit-identical"`` or ``"refit-individual"``."""
        return self._impl.mode

    def __repr__(self) -> str:
        where = self._impl.path
        return "<reforge.Plan %s%s%s>" % (
            self._impl.mode,
            ", %d sources missing" % len(self.missing) if self.missing else "",
            ", %s" % where if where else "",
        )


class PlanSequence:
    """Runs of a plan for one sequence, its state carried in the engine (``Plan.sequence``).

    Each :meth:`run` takes the inputs that are not state; the state inputs come from the
    sequence's buffers, and the outputs that continue them are written there (in place where the
    kernel declares it: the Concat of a Hugging Face KV cache, TensorScatter). After the first
    runs a run allocates no tensor memory (``plan.stats()["last_run_allocations"]``). One run at a
    time per sequence; sequences of one plan may run on several threads at once. A run that fails
    after writing state in place leaves the sequence needing :meth:`reset`.
    """

    def __init__(self, plan: Plan, impl: "_reforge.Sequence") -> None:
        self._plan = plan
        self._impl = impl

    def run(self, inputs: Mapping[str, Any], copy: bool = True) -> Dict[str, Any]:
        """One step: returns ``{output name: numpy array}``, or torch tensors on the first input's
        device when the inputs are torch tensors (tensors on a device, CUDA included, are copied to
        the host for the step and its outputs copied back there). With ``copy=False`` the
        numpy arrays are read-only views of the sequence's buffers, valid until its next run or
        reset (torch tensors, which cannot be read-only, are copies)."""
        arrays = {name: _array(value, "input '%s'" % name) for name, value in inputs.items()}
        device = _torch_device(inputs.values())
        values = self._impl.run(arrays, copy)
        infos = self._plan.outputs
        if device is not None:
            values = [_to_torch(v, info.dtype, device) for v, info in zip(values, infos)]
        return dict(zip([v.name for v in infos], values))

    def reset(self) -> None:
        """Starts a new sequence: lengths to 0 (fixed-size state zero-filled); nothing is freed."""
        self._impl.reset()

    def value(self, name: str) -> Any:
        """A copy of state input ``name``'s current value."""
        return self._impl.value(name)

    @property
    def pairs(self) -> Dict[str, str]:
        """``{state input: the output that continues it}``."""
        return dict(self._impl.pairs)

    @property
    def length(self) -> int:
        """Positions held along the growing axis."""
        return self._impl.length

    @property
    def max_length(self) -> int:
        return self._impl.max_length

    @property
    def needs_reset(self) -> bool:
        return self._impl.needs_reset


def __getattr__(name: str) -> Any:
    # reforge.torch (Torch-TensorRT's workflow) imports torch: loaded on first use only.
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'reforge' has no attribute %r" % (name,))


def check(model: PathLike) -> List[str]:
    """The nodes of an ONNX model that reforge cannot run, one ``"node 'x' (Op), opset N: reason"``
    line each (empty when every node can run), as ``reforge check`` lists them.

    Raises :class:`InvalidModel` when the model cannot be imported."""
    return _reforge.check(os.fspath(model))


def _names_list(v: Any) -> bool:
    """True for a list or tuple of output names (ONNX Runtime's first argument of run)."""
    return isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)


def build(
    model: PathLike,
    *,
    refit: Union[bool, str, Sequence[str]] = False,
    strip_weights: bool = False,
    precision: str = "fp32",
    activations: str = "fp32",
    checkpoint: Union[None, PathLike, Sequence[PathLike], Mapping[str, Any]] = None,
    literals: Sequence[str] = (),
    bind: Optional[Mapping[str, str]] = None,
    bind_file: Optional[PathLike] = None,
    strict_binding: bool = False,
    allow_partial_binding: bool = False,
    skip_passes: Sequence[str] = (),
    threads: int = 0,
    device: str = "cpu",
    allow_cpu_fallback: bool = False,
    block_size: Optional[int] = None,
    allow_nonfinite: bool = False,
    reference_rounding: bool = False,
    strip_prefix: str = "",
    add_prefix: str = "",
    progress: Optional[Callable[[str, int, int, str], None]] = None,
    device_replay: bool = False,
) -> Plan:
    """Builds a plan from an ONNX model (``reforge build``).

    ``refit``: ``False`` (baked), ``True`` (every source refittable), ``"identical"`` (refit
    accepts only the build-time weights, checked by hash) or a list of glob patterns (only
    matching sources refittable). ``strip_weights`` leaves the refittable weight data out: the
    plan refuses to run until a refit. ``precision`` (``"fp32"``, ``"bf16"``, ``"fp16"``) is
    the storage type of MatMul/Gemm weights (``"int8"``, ``"int4"``: quantized, ``block_size``
    weights per int4 block along K, a power of two from 16 to 1048576, default 32);
    ``activations="bf16"`` (bf16 plans) rounds their inputs too. A weight holding NaN or Inf is
    refused (:class:`InvalidModel` naming it), as refit refuses one, unless ``allow_nonfinite``.
    ``checkpoint``: a safetensors file, files or sharded folder, or a dict of arrays (a state
    dict), to bind every source to by exact value, so that the plan refits
    from that framework's checkpoints; ``bind``/``bind_file``/``strict_binding``/
    ``allow_partial_binding`` as the CLI's options; ``reference_rounding`` rounds 16-bit softmax
    results as the ONNX reference does (``--reference-rounding``); ``strip_prefix``/``add_prefix`` rename the
    checkpoint's tensors first, as :meth:`Plan.refit` does. ``literals``: initializers to treat as
    structure. ``threads``: for the build and the plan's runs (0: all cores; at most 1024). ``device``:
    where the nodes run, ``"cpu"`` or ``"cuda"`` (an NVIDIA GPU; numpy inputs and outputs stay
    in host memory, copied to and from the GPU, while torch CUDA tensors stay on the GPU:
    :meth:`Plan.run`); a node the device has no kernel for
    fails the build, unless ``allow_cpu_fallback`` places it on the CPU with explicit copies
    (``inspect()["placement"]`` shows where each node runs). A CUDA plan builds anywhere and
    runs where a GPU is. ``progress(step, done, total, unit)`` is called as each step of the
    build starts (``"shape inference"``, ``"pass NAME"``, ``"verifying recipes"``, ``"hashing
    weights"``, ``"placing nodes"``) and as counted steps advance (``total`` > 0: bytes of
    weights packed or hashed, engine weights verified; ``unit`` says which); an exception it
    raises stops the build and propagates. ``device_replay`` (a GPU plan): each input signature's
    run is recorded after its first (a CUDA graph) and replayed, as ``--device-replay`` does;
    :meth:`Plan.generate` then records each decoding step once per window and replays it.

    Raises :class:`InvalidModel` when the model cannot be imported or built (unsupported nodes
    listed as :func:`check` lists them, a checkpoint that does not bind), :class:`Error` for
    inconsistent options, ``ValueError`` for a number out of its range (``threads``,
    ``block_size``).
    """
    _check_int(threads, "threads", 0, _MAX_THREADS, " (0: all cores)")
    if not os.path.exists(os.fspath(model)):
        raise FileNotFoundError(os.fspath(model))  # as load() raises it
    if block_size is not None:
        _check_block_size(block_size)
        if precision != "int4":
            raise ValueError("block_size applies to precision='int4' only, not %r" % (precision,))
    if refit is True:
        mode, individual = "refit", []
    elif refit is False:
        mode, individual = "baked", []
    elif refit == "identical":
        mode, individual = "refit-identical", []
    elif isinstance(refit, str):
        raise ValueError("refit must be True, False, 'identical' or a list of glob patterns, got %r" % (refit,))
    else:
        mode, individual = "refit-individual", [str(p) for p in refit]
    files: List[str] = []
    tensors = None
    if isinstance(checkpoint, Mapping):
        tensors = {str(k): _array(v, "checkpoint tensor '%s'" % k) for k, v in checkpoint.items()}
    elif isinstance(checkpoint, (str, os.PathLike)):
        files = [os.fspath(checkpoint)]
    elif checkpoint is not None:
        files = [os.fspath(c) for c in checkpoint]
    impl = _reforge.build(
        os.fspath(model),
        mode,
        individual,
        strip_weights,
        list(literals),
        precision,
        activations,
        list(skip_passes),
        files,
        tensors,
        dict(bind or {}),
        os.fspath(bind_file) if bind_file is not None else "",
        strict_binding,
        allow_partial_binding,
        threads,
        device,
        allow_cpu_fallback,
        0 if block_size is None else block_size,
        allow_nonfinite,
        reference_rounding,
        strip_prefix,
        add_prefix,
        progress,
        device_replay,
    )
    return Plan(impl)


def load(path: PathLike, *, verify: bool = True, threads: int = 0, device_replay: bool = False) -> Plan:
    """Reads a plan file (memory-mapped: weights are not copied).

    ``verify`` hashes every stored weight against the plan's hashes first (``--no-verify`` in
    the CLI is ``verify=False``). ``device_replay``: as :func:`build`'s. Raises :class:`CorruptPlan` naming what is wrong (damaged
    bytes, a weight that fails its hash, a newer format), ``FileNotFoundError`` when there is
    no file, ``ValueError`` for ``threads`` out of its range (0: all cores; at most 1024).
    """
    _check_int(threads, "threads", 0, _MAX_THREADS, " (0: all cores)")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    return Plan(_reforge.load(path, verify, threads, bool(device_replay)))


def load_timing_cache(path: PathLike, *, device: str = "cuda") -> bool:
    """Reads the choices a GPU backend times at a kernel's first call (cuDNN's convolution
    algorithms, per geometry) from a timing cache file, as TensorRT's timing cache: plans run
    afterwards in this process take the loaded choices without timing them, so processes given
    one file run the same algorithms. Returns False when there is no file yet. Raises
    :class:`Error` naming the file and the line for a cache that does not parse, names an
    algorithm out of range, or comes from another device or cuDNN; nothing of it is loaded.
    ``reforge run/bench --timing-cache FILE`` in the CLI."""
    return _reforge.load_timing_cache(os.fspath(path), device)


def save_timing_cache(path: PathLike, *, device: str = "cuda") -> None:
    """Writes every choice made or loaded in this process to a timing cache file, atomically
    (see :func:`load_timing_cache`)."""
    _reforge.save_timing_cache(os.fspath(path), device)
