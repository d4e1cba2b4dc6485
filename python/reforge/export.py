"""Exporting a `transformers` causal language model for generation, the way reforge's decoding loop
(and ONNX Runtime's) takes it, so nobody has to learn the exporter's cache arguments.

Needs PyTorch 2.x with its ONNX exporter (``onnxscript``) and ``transformers``; reforge itself does
not depend on them.
"""

from __future__ import annotations

import os
from typing import Any, List, Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]


def _cache_shape(config: Any) -> Tuple[int, int, int]:
    """(layers, key-value heads, head size) of a decoder's config."""
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    if layers is None or heads is None:
        raise ValueError("export_causal_lm: the model's config has no num_hidden_layers / num_attention_heads")
    kv = getattr(config, "num_key_value_heads", None) or heads
    hidden = getattr(config, "hidden_size", None)
    head = getattr(config, "head_dim", None) or (hidden // heads if hidden else None)
    if not head:
        raise ValueError("export_causal_lm: cannot tell the head size from the model's config")
    return int(layers), int(kv), int(head)


def _names(layers: int) -> Tuple[List[str], List[str]]:
    ins = ["input_ids", "attention_mask", "position_ids"]
    outs = ["logits"]
    for i in range(layers):
        ins += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outs += [f"present.{i}.key", f"present.{i}.value"]
    return ins, outs


def export_causal_lm(model: Any, path: PathLike, *, opset: int = 18, max_length: int = 4096) -> str:
    """Exports ``model`` (a ``transformers`` causal LM, e.g. ``AutoModelForCausalLM``) as one
    decoding step with its key-value cache, in the layout of optimum's
    ``text-generation-with-past`` export, which :meth:`Plan.generate` and ``reforge generate``
    take:

      inputs   ``input_ids`` [batch, seq], ``attention_mask`` [batch, past + seq],
               ``position_ids`` [batch, seq], ``past_key_values.<i>.key|value``
               [batch, kv_heads, past, head_size]
      outputs  ``logits`` [batch, seq, vocab], ``present.<i>.key|value``
               [batch, kv_heads, past + seq, head_size]

    with batch, seq and past symbolic (``torch.onnx.export(dynamo=True)``, opset ``opset``; lengths
    up to ``max_length``). The model is exported in its own dtype, in eval mode; weights go to an
    external data file beside ``path`` when they pass 1.5 GB. Returns ``path``.
    """
    import torch
    from transformers.cache_utils import DynamicCache

    layers, kv_heads, head = _cache_shape(model.config)
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device

    def tensors(cache: Any, i: int) -> Tuple[Any, Any]:
        if hasattr(cache, "layers"):
            return cache.layers[i].keys, cache.layers[i].values
        return cache.key_cache[i], cache.value_cache[i]

    class Step(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any) -> Any:
            cache = DynamicCache()
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
            present = []
            for i in range(layers):
                present.extend(tensors(out.past_key_values, i))
            return (out.logits, *present)

    ins, outs = _names(layers)
    batch = torch.export.Dim("batch", min=1, max=1024)
    seq = torch.export.Dim("seq", min=1, max=max_length)
    past = torch.export.Dim("past", min=1, max=max_length - 1)
    total = torch.export.Dim("total", min=2, max=2 * max_length)
    vocab = int(getattr(model.config, "vocab_size", 2))
    example = [torch.randint(0, vocab, (2, 3), device=device), torch.ones(2, 8, dtype=torch.int64, device=device),
               torch.arange(5, 8, device=device).reshape(1, 3).repeat(2, 1)]
    example += [torch.zeros(2, kv_heads, 5, head, dtype=dtype, device=device) for _ in range(2 * layers)]
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: total},
              "position_ids": {0: batch, 1: seq}, "past": tuple({0: batch, 2: past} for _ in range(2 * layers))}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            program = torch.onnx.export(Step(model), tuple(example), dynamic_shapes=shapes, dynamo=True,
                                        opset_version=opset, input_names=ins, output_names=outs)
    finally:
        model.train(was_training)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    path = os.fspath(path)
    program.save(path, external_data=size > 1_500_000_000)
    return path
