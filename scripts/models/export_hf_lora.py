#!/usr/bin/env python3
"""LoRA adapters made by PEFT for the real `transformers` Llama of models/hf/llama:
models/hf/llama/lora/.

Needs PyTorch 2.x, transformers, peft and safetensors; runs on the CPU in float32, seeded, in a
few seconds. The base is models/hf/llama/checkpoint_A.safetensors loaded into a LlamaForCausalLM of
the config export_hf.py recorded (export.json); its output is checked against reference/A first.

  A/adapter_config.json, A/adapter_model.safetensors
        get_peft_model(LoraConfig(r=4, lora_alpha=8, every Linear of the layers)).save_pretrained()
  B/... likewise, r=8, lora_alpha=16, use_rslora, q_proj, v_proj and down_proj only
        Both with random non-zero A and B matrices (seeded), as after training.
  merged_A.safetensors, merged_B.safetensors
        merge_and_unload().state_dict() of each: PEFT's own merge, in the base checkpoint's names
  reference/A/logits.npy, reference/B/logits.npy
        the PEFT model's outputs (adapter unmerged) on models/hf/llama/inputs/input_ids.npy
  dora/adapter_config.json, dora/adapter_model.safetensors
        a DoRA adapter (use_dora), which a merge of W + scale * B @ A does not express: refused

    /path/to/python scripts/models/export_hf_lora.py [--root models/hf/llama]
"""

import argparse
import json
import os

import numpy as np
import torch


def base_model(root):
    import transformers as tf
    from safetensors.torch import load_file

    with open(os.path.join(root, "export.json")) as f:
        config = tf.LlamaConfig.from_dict(json.load(f)["config"])
    model = tf.LlamaForCausalLM(config).eval()
    model.load_state_dict(load_file(os.path.join(root, "checkpoint_A.safetensors")))
    return model


def randomize_lora(model, seed, std):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "lora_A" in name or "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def make(root, name, config, seed, input_ids):
    from peft import get_peft_model
    from safetensors.torch import save_file

    model = get_peft_model(base_model(root), config).eval()
    randomize_lora(model, seed, 0.1)
    out = os.path.join(root, "lora")
    model.save_pretrained(os.path.join(out, name))
    os.remove(os.path.join(out, name, "README.md"))  # PEFT's model card template
    # PEFT writes target_modules from a set, in hash order: sorted, so that a rerun writes the same bytes.
    path = os.path.join(out, name, "adapter_config.json")
    with open(path) as f:
        written = json.load(f)
    written["target_modules"] = sorted(written["target_modules"])
    with open(path, "w") as f:
        f.write(json.dumps(written, indent=2, sort_keys=True))
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits.numpy()
    ref = os.path.join(out, "reference", name)
    os.makedirs(ref, exist_ok=True)
    np.save(os.path.join(ref, "logits.npy"), logits)
    merged = model.merge_and_unload()
    state = {k: v.contiguous() for k, v in merged.state_dict().items()}
    save_file(state, os.path.join(out, "merged_%s.safetensors" % name))
    return logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", "..", "models", "hf", "llama"))
    args = ap.parse_args()
    from peft import LoraConfig

    torch.manual_seed(0)
    root = os.path.normpath(args.root)
    input_ids = torch.from_numpy(np.load(os.path.join(root, "inputs", "input_ids.npy")))
    with torch.no_grad():
        base = base_model(root)(input_ids=input_ids).logits.numpy()
    want = np.load(os.path.join(root, "reference", "A", "logits.npy"))
    assert np.abs(base - want).max() <= 1e-5, "the base model does not reproduce reference/A"
    every = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    a = make(root, "A", LoraConfig(r=4, lora_alpha=8, target_modules=every, init_lora_weights=False), 10, input_ids)
    b = make(root, "B", LoraConfig(r=8, lora_alpha=16, use_rslora=True, target_modules=["q_proj", "v_proj", "down_proj"],
                                   init_lora_weights=False), 11, input_ids)
    make(root, "dora", LoraConfig(r=2, lora_alpha=4, use_dora=True, target_modules=["q_proj"], init_lora_weights=False),
         12, input_ids)
    # The dora folder is for the refusal only: its outputs and merge are not references.
    for extra in ("merged_dora.safetensors", os.path.join("reference", "dora", "logits.npy")):
        os.remove(os.path.join(root, "lora", extra))
    os.rmdir(os.path.join(root, "lora", "reference", "dora"))
    print("max |logits - base|: A %.3g, B %.3g" % (np.abs(a - base).max(), np.abs(b - base).max()))


if __name__ == "__main__":
    main()
