#!/usr/bin/env python3
"""Real Hugging Face decoders exported for generation, with PyTorch's own generate as the reference:
models/hf/gpt2_generate/ and models/hf/qwen2_generate/.

Needs PyTorch 2.x, transformers, onnx, onnxscript, onnxruntime and safetensors (the GPU machine of
the `run` device tool has them, or a virtual environment of them from PyPI); runs on the CPU in
float32, seeded. Each model is tiny (2 layers, vocabulary 96) and made with seeded random weights,
every parameter moved from its initial value by seeded noise, as fine-tuning does:

  gpt2   GPT2LMHeadModel: learned positions, 4 heads of 16
  qwen2  Qwen2ForCausalLM: rotary positions, 4 query and 2 key-value heads of 16 (grouped query)

Each is exported by reforge.export_causal_lm (python/reforge/export.py: torch.onnx.export(dynamo=True),
opset 18) as one decoding step in the layout of optimum's `text-generation-with-past` export:

  inputs   input_ids [batch, seq], attention_mask [batch, total = past + seq], position_ids [batch, seq],
           past_key_values.<i>.key / .value [batch, kv_heads, past, 16]
  outputs  logits [batch, seq, 96], present.<i>.key / .value [batch, kv_heads, past + seq, 16]

Files per model, for weights A and B (B moves every parameter of A by more noise):

  checkpoint_A.safetensors, checkpoint_B.safetensors   the state dicts
  A/model.onnx, B/model.onnx                           the step, exported from a fresh model after
                                                       load_state_dict() of the checkpoint
  reference/A|B/prompt_ids.npy [1, 9]                  a prompt
  reference/A|B/tokens.npy [64]                        PyTorch's greedy tokens after it
                                                       (model.generate, do_sample=False)
  reference/A|B/batch_prompt_ids.npy [3, 9]            three prompts (9, 5 and 7 tokens) left-padded
  reference/A|B/batch_attention_mask.npy [3, 9]        with 0 under their attention mask, and
  reference/A|B/batch_tokens.npy [3, 16]               PyTorch's greedy tokens for the batch
  inputs/<input>.npy                                   one step's inputs (batch 2, 3 new positions
                                                       after a past of 5): what the refit oracle runs
  export.json                                          versions, config, ONNX Runtime's greedy decode
                                                       through each export: equal tokens, and its
                                                       max abs logits difference

    python3 scripts/models/export_hf_generate.py [--out models/hf] [--models gpt2,qwen2]
"""

import argparse
import json
import os

import numpy as np
import torch

OPSET = 18
LAYERS = 2
VOCAB = 96
PROMPT = 9
NEW_TOKENS = 64
BATCH_LENGTHS = (PROMPT, 5, 7)  # the batch: the prompt and two more, left-padded
BATCH_NEW_TOKENS = 16


def make_model(kind):
    import transformers as tf

    if kind == "gpt2":
        c = tf.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=64, n_layer=LAYERS, n_head=4, use_cache=True,
                          tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
        return tf.GPT2LMHeadModel(c), 4
    c = tf.Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, use_cache=True,
                       tie_word_embeddings=False)
    return tf.Qwen2ForCausalLM(c), 2


def reforge_export():
    """python/reforge/export.py, loaded alone (it needs no built extension), so the exports are made
    the way reforge.export_causal_lm makes them for users."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "reforge_export", os.path.join(here, "..", "..", "python", "reforge", "export.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def names():
    return reforge_export()._names(LAYERS)


def export(model, path):
    reforge_export().export_causal_lm(model, path, opset=OPSET, max_length=128)


def ort_greedy(path, prompt, kv_heads):
    """The export's own greedy decode in ONNX Runtime: the prompt with an empty past, then one token
    a step."""
    import onnxruntime as ort

    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ins, _ = names()
    past = [np.zeros((1, kv_heads, 0, 16), np.float32) for _ in range(2 * LAYERS)]
    ids = prompt.numpy()
    done, tokens, logits = 0, [], []
    for _ in range(NEW_TOKENS):
        pos = np.arange(done, done + ids.shape[1], dtype=np.int64).reshape(1, -1)
        mask = np.ones((1, done + ids.shape[1]), np.int64)
        out = s.run(None, dict(zip(ins, [ids, mask, pos, *past])))
        logits.append(out[0][0, -1])
        tokens.append(int(np.argmax(out[0][0, -1])))
        done += ids.shape[1]
        past = out[1:]
        ids = np.array([[tokens[-1]]], dtype=np.int64)
    return np.array(tokens), np.stack(logits)


def make(kind, out):
    from safetensors.torch import load_file, save_file
    import transformers

    d = os.path.join(out, f"{kind}_generate")
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    torch.manual_seed(0)
    model, kv_heads = make_model(kind)
    model.eval()
    sets = {}
    for w, seed in (("A", 3), ("B", 2)):
        gen = torch.Generator().manual_seed(seed)
        for _, p in sorted(model.named_parameters()):
            p.add_(torch.randn(p.shape, generator=gen) * 0.15)
        sets[w] = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    ins, outs = names()
    step_gen = torch.Generator().manual_seed(4)
    step = [torch.randint(0, VOCAB, (2, 3), generator=step_gen), torch.ones(2, 8, dtype=torch.int64),
            torch.arange(5, 8).reshape(1, 3).repeat(2, 1)]
    step += [torch.randn(2, kv_heads, 5, 16, generator=step_gen) for _ in range(2 * LAYERS)]
    for name, t in zip(ins, step):
        np.save(os.path.join(d, "inputs", name + ".npy"), t.numpy())
    info = {"model": f"{kind}_generate", "torch": torch.__version__, "transformers": transformers.__version__,
            "opset": OPSET,
            "exporter": "torch.onnx.export(dynamo=True), one decoding step, batch, seq and past symbolic",
            "inputs": ins, "outputs": outs, "prompt": PROMPT, "new_tokens": NEW_TOKENS}
    ok = True
    for w, sd in sets.items():
        ck = os.path.join(d, f"checkpoint_{w}.safetensors")
        save_file(sd, ck)
        torch.manual_seed(123)
        fresh, _ = make_model(kind)
        fresh.eval()
        fresh.load_state_dict(load_file(ck), strict=True)
        with torch.no_grad():
            gen_out = fresh.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
                                     do_sample=False, output_logits=True, return_dict_in_generate=True,
                                     pad_token_id=0, eos_token_id=None)
        tokens = gen_out.sequences[0, PROMPT:].numpy().copy()
        ref_logits = torch.stack([l[0] for l in gen_out.logits]).numpy()
        ref = os.path.join(d, "reference", w)
        os.makedirs(ref, exist_ok=True)
        np.save(os.path.join(ref, "prompt_ids.npy"), prompt.numpy())
        np.save(os.path.join(ref, "tokens.npy"), tokens)
        # A batch of prompts of different lengths, left-padded with 0 under an attention mask, as
        # a batch is given to generate; and each prompt alone, for comparison.
        rows = [prompt[0]] + [torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(10 + n))
                              for n in BATCH_LENGTHS[1:]]
        width = max(len(r) for r in rows)
        padded = torch.zeros(len(rows), width, dtype=torch.int64)
        mask = torch.zeros(len(rows), width, dtype=torch.int64)
        for i, r in enumerate(rows):
            padded[i, width - len(r):] = r
            mask[i, width - len(r):] = 1
        with torch.no_grad():
            batch = fresh.generate(padded, attention_mask=mask, max_new_tokens=BATCH_NEW_TOKENS, do_sample=False,
                                   pad_token_id=0, eos_token_id=None)[:, width:].numpy().copy()
            alone = [fresh.generate(r.reshape(1, -1), attention_mask=torch.ones(1, len(r), dtype=torch.int64),
                                    max_new_tokens=BATCH_NEW_TOKENS, do_sample=False, pad_token_id=0,
                                    eos_token_id=None)[0, len(r):].numpy() for r in rows]
        np.save(os.path.join(ref, "batch_prompt_ids.npy"), padded.numpy())
        np.save(os.path.join(ref, "batch_attention_mask.npy"), mask.numpy())
        np.save(os.path.join(ref, "batch_tokens.npy"), batch)
        info[f"batch_equals_alone_{w}"] = bool(all((batch[i] == alone[i]).all() for i in range(len(rows))))
        path = os.path.join(d, w, "model.onnx")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        export(fresh, path)
        ort_tokens, ort_logits = ort_greedy(path, prompt, kv_heads)
        info["class"] = type(fresh).__name__
        info[f"ort_tokens_equal_{w}"] = bool((ort_tokens == tokens).all())
        info[f"ort_max_abs_logits_{w}"] = float(np.max(np.abs(ort_logits - ref_logits)))
        info["config"] = json.loads(fresh.config.to_json_string())
        ok = ok and info[f"ort_tokens_equal_{w}"]
        print(kind, w, "tokens", tokens.tolist(), "ORT equal", info[f"ort_tokens_equal_{w}"], "max abs",
              info[f"ort_max_abs_logits_{w}"], "batch equals alone", info[f"batch_equals_alone_{w}"], flush=True)
    with open(os.path.join(d, "export.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    return ok


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "models", "hf"))
    ap.add_argument("--models", default="gpt2,qwen2")
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    ok = True
    for kind in a.models.split(","):
        ok = make(kind, a.out) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
