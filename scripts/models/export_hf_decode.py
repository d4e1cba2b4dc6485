#!/usr/bin/env python3
"""A real Hugging Face Llama decode step with past/present key-values: models/hf/llama_decode/.

Needs PyTorch 2.x, transformers, onnx, onnxscript, onnxruntime and safetensors (the GPU machine of
the `run` device tool has them, or a virtual environment of them from PyPI); runs on the CPU in
float32, seeded. The model is the tiny
LlamaForCausalLM of export_hf.py (2 layers, 4 heads, 2 key-value heads, head size 16) with
use_cache=True, exported with torch.onnx.export(dynamo=True), opset 18, as one step:

  inputs   input_ids [1, seq], position_ids [1, seq],
           past.<i>.key / past.<i>.value [1, 2, past, 16] for each layer i
  outputs  logits [1, seq, 128], present.<i>.key / present.<i>.value [1, 2, past + seq, 16]

seq and past are symbolic: the prompt is one step with past = 0, each generated token one step
with seq = 1, its present fed back as the next step's past. Files:

  checkpoint_A.safetensors, checkpoint_B.safetensors   state dicts (each moved from the initial
                                                       parameters by seeded noise; B from A)
  A/model.onnx, B/model.onnx                           the step, exported from a fresh model after
                                                       load_state_dict() of the checkpoint
  reference/A|B/prompt_ids.npy [1, 7]                  the prompt
  reference/A|B/tokens.npy [12]                        PyTorch's greedy tokens after the prompt
                                                       (model.generate, do_sample=False)
  reference/A|B/step_logits.npy [12, 128]              the logits each token was chosen from
  inputs/<input>.npy                                   one step's inputs (3 new positions after a
                                                       past of 5, past key-values seeded noise):
                                                       what the refit oracle runs
  export.json                                          versions, config, ONNX Runtime's greedy
                                                       decode through the export and its max
                                                       abs difference from PyTorch's logits

    python3 scripts/models/export_hf_decode.py [--out models/hf] [--tar out.tar]
"""

import argparse
import json
import os
import sys
import tarfile

import numpy as np
import torch

OPSET = 18
LAYERS = 2
PROMPT = 7
NEW_TOKENS = 12


def make_model():
    import transformers as tf

    c = tf.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=True,
                       tie_word_embeddings=False)
    return tf.LlamaForCausalLM(c)


def cache_tensors(cache, i):
    if hasattr(cache, "layers"):
        return cache.layers[i].keys, cache.layers[i].values
    return cache.key_cache[i], cache.value_cache[i]


class Step(torch.nn.Module):
    """One decode step over flat past tensors (what an ONNX graph can take)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, position_ids, *past):
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache()
        for i in range(LAYERS):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, position_ids=position_ids, past_key_values=cache, use_cache=True)
        present = []
        for i in range(LAYERS):
            present.extend(cache_tensors(out.past_key_values, i))
        return (out.logits, *present)


def names():
    ins = ["input_ids", "position_ids"]
    outs = ["logits"]
    for i in range(LAYERS):
        ins += [f"past.{i}.key", f"past.{i}.value"]
        outs += [f"present.{i}.key", f"present.{i}.value"]
    return ins, outs


def export(model, path):
    ins, outs = names()
    seq, past = torch.export.Dim("seq", min=1, max=64), torch.export.Dim("past", min=1, max=63)
    ids = torch.randint(0, 128, (1, 3))
    pos = torch.arange(5, 8).reshape(1, 3)
    kv = [torch.randn(1, 2, 5, 16) for _ in range(2 * LAYERS)]
    shapes = {"input_ids": {1: seq}, "position_ids": {1: seq}, "past": tuple({2: past} for _ in range(2 * LAYERS))}
    program = torch.onnx.export(Step(model).eval(), (ids, pos, *kv), dynamic_shapes=shapes, dynamo=True,
                                opset_version=OPSET, input_names=ins, output_names=outs)
    program.save(path)


def greedy_reference(model, prompt):
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
    tokens = out.sequences[0, PROMPT:].numpy().copy()
    logits = torch.stack([l[0] for l in out.logits]).numpy().copy()
    return tokens, logits


def ort_greedy(path, prompt):
    """The export's own greedy decode in ONNX Runtime: prompt with past = 0, then one token a step."""
    import onnxruntime as ort

    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ins, _ = names()
    past = [np.zeros((1, 2, 0, 16), np.float32) for _ in range(2 * LAYERS)]
    ids = prompt.numpy()
    pos0, tokens, logits = 0, [], []
    for _ in range(NEW_TOKENS):
        pos = np.arange(pos0, pos0 + ids.shape[1], dtype=np.int64).reshape(1, -1)
        out = s.run(None, dict(zip(ins, [ids, pos, *past])))
        last = out[0][0, -1]
        logits.append(last)
        tokens.append(int(np.argmax(last)))
        pos0 += ids.shape[1]
        past = out[1:]
        ids = np.array([[tokens[-1]]], dtype=np.int64)
    return np.array(tokens), np.stack(logits)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "models", "hf"))
    ap.add_argument("--tar", default="")
    a = ap.parse_args()
    from safetensors.torch import load_file, save_file
    import transformers

    torch.set_grad_enabled(False)
    d = os.path.join(a.out, "llama_decode")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    model = make_model().eval()
    # A and B: every parameter moved from its initial value by seeded noise, as fine-tuning does
    # (initial norm weights are all ones: an exporter may then share one initializer among them).
    sets = {}
    for name, seed in (("A", 3), ("B", 2)):
        gen = torch.Generator().manual_seed(seed)
        for _, p in sorted(model.named_parameters()):
            p.add_(torch.randn(p.shape, generator=gen) * 0.02)
        sets[name] = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    prompt = torch.randint(0, 128, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    ins, outs = names()
    step_gen = torch.Generator().manual_seed(4)
    step = [torch.randint(0, 128, (1, 3), generator=step_gen), torch.arange(5, 8).reshape(1, 3)]
    step += [torch.randn(1, 2, 5, 16, generator=step_gen) for _ in range(2 * LAYERS)]
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    for name, t in zip(ins, step):
        np.save(os.path.join(d, "inputs", name + ".npy"), t.numpy())
    info = {"model": "llama_decode", "class": "LlamaForCausalLM", "torch": torch.__version__,
            "transformers": transformers.__version__, "opset": OPSET,
            "exporter": "torch.onnx.export(dynamo=True), one decode step, seq and past symbolic",
            "inputs": ins, "outputs": outs, "prompt": PROMPT, "new_tokens": NEW_TOKENS,
            "config": json.loads(model.config.to_json_string())}
    ok = True
    for w, sd in sets.items():
        ck = os.path.join(d, f"checkpoint_{w}.safetensors")
        save_file(sd, ck)
        torch.manual_seed(123)
        fresh = make_model().eval()
        fresh.load_state_dict(load_file(ck), strict=True)
        tokens, logits = greedy_reference(fresh, prompt)
        ref = os.path.join(d, "reference", w)
        os.makedirs(ref, exist_ok=True)
        np.save(os.path.join(ref, "prompt_ids.npy"), prompt.numpy())
        np.save(os.path.join(ref, "tokens.npy"), tokens)
        np.save(os.path.join(ref, "step_logits.npy"), logits)
        path = os.path.join(d, w, "model.onnx")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        export(fresh, path)
        ort_tokens, ort_logits = ort_greedy(path, prompt)
        info[f"ort_tokens_equal_{w}"] = bool((ort_tokens == tokens).all())
        info[f"ort_max_abs_logits_{w}"] = float(np.max(np.abs(ort_logits - logits)))
        ok = ok and info[f"ort_tokens_equal_{w}"]
        print(w, "tokens", tokens.tolist(), "ORT equal", info[f"ort_tokens_equal_{w}"], "max abs",
              info[f"ort_max_abs_logits_{w}"], flush=True)
    with open(os.path.join(d, "export.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    if a.tar:
        with tarfile.open(a.tar, "w") as t:
            t.add(d, arcname="llama_decode")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
