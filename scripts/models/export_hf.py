#!/usr/bin/env python3
"""Real Hugging Face `transformers` exports for checkpoint refit: models/hf/<model>/.

Needs PyTorch 2.x, transformers, onnx, onnxscript, onnxruntime and safetensors (the GPU
machine of the `run` device tool has them). Everything runs on the CPU in float32, seeded.

For each model (tiny configs, randomly initialised):
  checkpoint_A.safetensors  model.state_dict() as initialised (norm weights ones, biases zero)
  checkpoint_B.safetensors  every parameter changed (seeded noise), state_dict saved likewise
  A/model.onnx, B/model.onnx  torch.onnx.export(dynamo=True), opset 18, static shapes
                              (the exporter's optimizer folds position tables, rotary tables,
                              relative-position buckets and masks into constants)
  inputs/<name>.npy
  reference/A|B/<output>.npy  PyTorch's outputs: a fresh model of the same config after
                              load_state_dict() of checkpoint A or B
  export.json                 versions, config, inputs/outputs, ONNX Runtime's max abs diff,
                              and the float initializers that are not checkpoint tensors by name

    python3 scripts/models/export_hf.py [--out models/hf] [--tar out.tar] [--only gpt2,bert]
"""

import argparse
import json
import os
import sys
import tarfile
import traceback

import numpy as np
import torch

SEQ = 16
BATCH = 2
OPSET = 18


def configs():
    import transformers as tf

    def gpt2():
        c = tf.GPT2Config(vocab_size=128, n_positions=128, n_embd=64, n_layer=2, n_head=4, use_cache=False)
        return tf.GPT2LMHeadModel(c), ["input_ids"], ["logits"]

    def bert():
        c = tf.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=128, max_position_embeddings=64, type_vocab_size=2)
        return tf.BertModel(c), ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"]

    def llama():
        c = tf.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                           use_cache=False, tie_word_embeddings=False)
        return tf.LlamaForCausalLM(c), ["input_ids"], ["logits"]

    def t5():
        c = tf.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                        relative_attention_num_buckets=32, relative_attention_max_distance=64,
                        feed_forward_proj="relu", use_cache=False)
        return tf.T5EncoderModel(c), ["input_ids", "attention_mask"], ["last_hidden_state"]

    def vit():
        c = tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=128)
        return tf.ViTModel(c, add_pooling_layer=True), ["pixel_values"], ["last_hidden_state", "pooler_output"]

    return {"gpt2": gpt2, "bert": bert, "llama": llama, "t5": t5, "vit": vit}


def make_inputs(name, gen):
    if name == "vit":
        return {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=gen)}
    ids = torch.randint(0, 128, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    out = {"input_ids": ids}
    if name in ("bert", "t5"):
        mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
        mask[1, SEQ - 5:] = 0  # padding in the second sequence
        out["attention_mask"] = mask
    return out


def state_dict_copy(model):
    # Every entry its own contiguous tensor (tied weights appear under each of their names).
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def change_every_parameter(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.add_(torch.randn(p.shape, generator=gen) * 0.05 + 0.01)


def outputs_of(model, inputs, names):
    with torch.no_grad():
        out = model(**inputs)
    return {n: getattr(out, n).detach().numpy().copy() for n in names}


def export_onnx(model, inputs, in_names, out_names, path):
    program = torch.onnx.export(model, (), kwargs=dict(inputs), dynamo=True, opset_version=OPSET,
                                input_names=in_names, output_names=out_names)
    program.save(path)


def ort_diff(path, inputs, ref):
    import onnxruntime as ort

    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = s.run(None, {k: v.numpy() for k, v in inputs.items()})
    names = [o.name for o in s.get_outputs()]
    return {n: float(np.max(np.abs(g - ref[n]))) for n, g in zip(names, got) if n in ref}


def unnamed_initializers(path, ckpt_names):
    import onnx
    from onnx import numpy_helper

    m = onnx.load(path)
    out = []
    for t in m.graph.initializer:
        if t.name in ckpt_names or t.data_type not in (1, 10, 16):
            continue
        a = numpy_helper.to_array(t)
        if a.size <= 1:
            continue
        out.append({"name": t.name, "shape": list(a.shape), "first": [float(x) for x in a.reshape(-1)[:4]]})
    return out


def make(name, build, root, log):
    from safetensors.torch import load_file, save_file

    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    model, in_names, out_names = build()
    model.eval()
    gen = torch.Generator().manual_seed(1)
    inputs = make_inputs(name, gen)
    for k, v in inputs.items():
        os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
        np.save(os.path.join(d, "inputs", k + ".npy"), v.numpy())

    info = {"model": name, "class": type(model).__name__, "torch": torch.__version__, "opset": OPSET,
            "exporter": "torch.onnx.export(dynamo=True), static shapes", "inputs": in_names,
            "outputs": out_names, "batch": BATCH, "seq": SEQ, "config": json.loads(model.config.to_json_string())}
    import transformers

    info["transformers"] = transformers.__version__
    sets = {}
    sets["A"] = state_dict_copy(model)
    change_every_parameter(model, seed=2)
    sets["B"] = state_dict_copy(model)
    for w, sd in sets.items():
        ck = os.path.join(d, "checkpoint_%s.safetensors" % w)
        save_file(sd, ck)
        # The reference: a fresh model of the same config, load_state_dict() of the checkpoint.
        torch.manual_seed(123)
        fresh, _, _ = build()
        fresh.eval()
        missing, unexpected = fresh.load_state_dict(load_file(ck), strict=False)
        if unexpected or [m for m in missing if m in sd]:
            raise RuntimeError("load_state_dict: missing %s unexpected %s" % (missing, unexpected))
        ref = outputs_of(fresh, inputs, out_names)
        for n, a in ref.items():
            os.makedirs(os.path.join(d, "reference", w), exist_ok=True)
            np.save(os.path.join(d, "reference", w, n + ".npy"), a)
        onnx_path = os.path.join(d, w, "model.onnx")
        os.makedirs(os.path.dirname(onnx_path), exist_ok=True)
        export_onnx(fresh, inputs, in_names, out_names, onnx_path)
        info["ort_max_abs_" + w] = ort_diff(onnx_path, inputs, ref)
        info["unnamed_float_initializers_" + w] = unnamed_initializers(onnx_path, set(sd))
        info["checkpoint_tensors_" + w] = len(sd)
        log.append("%s %s: exported, ORT max abs %s" % (name, w, info["ort_max_abs_" + w]))
    with open(os.path.join(d, "export.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "hf"))
    ap.add_argument("--tar", default="")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    log = []
    ok = True
    for name, build in configs().items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            make(name, build, args.out, log)
        except Exception:
            ok = False
            log.append("%s: FAILED\n%s" % (name, traceback.format_exc()))
        print(log[-1], flush=True)
    if args.tar:
        with tarfile.open(args.tar, "w") as t:
            t.add(args.out, arcname="hf")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
