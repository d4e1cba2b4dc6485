"""A tiny Llama exported by ONNX Runtime GenAI's model builder, with ONNX Runtime's references, into
models/genai/llama_gqa/ (tests/genai_model_test.cc).

A seeded `transformers` LlamaForCausalLM (2 layers, hidden 64, 4 attention heads over 2 key-value
heads, head size 16, vocabulary 256) is saved and exported by
`python -m onnxruntime_genai.models.builder -p fp32 -e cpu` (GroupQueryAttention with packed QKV
and rotary, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization). References:
  - reference/prompt_<i>.npy: the two prompts (int64, of different lengths);
  - reference/tokens_<i>.npy: onnxruntime-genai's 16 greedy tokens for each prompt alone;
  - reference/batch_tokens.npy: its tokens for both prompts as one batch, right-padded with the
    pad token (the padding its GroupQueryAttention reads correctly: each row's tokens equal the
    prompt's alone, which the script checks);
  - reference/prompt_logits.npy: ONNX Runtime's logits for prompt 0 with an empty cache, and
    reference/decode_logits.npy: for the next step (its first greedy token) on that cache.

Needs torch, transformers, onnxruntime and onnxruntime-genai (0.18 and 1.32 wrote the files):
    python scripts/models/export_genai_builder.py
"""
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[2] / "models" / "genai" / "llama_gqa"
PROMPTS = [[1, 17, 42, 99, 3, 7, 11, 60], [1, 8, 9, 10, 200]]
NEW_TOKENS = 16


def make_checkpoint(folder):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(20240607)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                         rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # weights of a spread that makes the greedy tokens vary
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    model.save_pretrained(folder)
    # The builder saves a tokenizer beside the model: a word-level one over the 256 ids ("t0".."t255").
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(256)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, bos_token="t1", eos_token="t2", pad_token="t2").save_pretrained(folder)


def genai_tokens(folder, rows):
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    width = max(len(r) for r in rows)
    padded = np.array([r + [2] * (width - len(r)) for r in rows], dtype=np.int32)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=width + NEW_TOKENS, do_sample=False, batch_size=len(rows))
    gen = og.Generator(model, params)
    gen.append_tokens(padded)
    while not gen.is_done():
        gen.generate_next_token()
    return [np.array(gen.get_sequence(i), dtype=np.int64)[width:] for i in range(len(rows))]


def ort_logits(folder, prompt, next_token):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    cache = [i.name for i in sess.get_inputs() if i.name.startswith("past_key_values")]
    feed = {"input_ids": np.array([prompt], dtype=np.int64),
            "attention_mask": np.ones((1, len(prompt)), dtype=np.int64)}
    feed.update({n: np.zeros((1, 2, 0, 16), dtype=np.float32) for n in cache})
    names = [o.name for o in sess.get_outputs()]
    out = dict(zip(names, sess.run(None, feed)))
    step = {"input_ids": np.array([[next_token]], dtype=np.int64),
            "attention_mask": np.ones((1, len(prompt) + 1), dtype=np.int64)}
    step.update({n: out[n.replace("past_key_values", "present")] for n in cache})
    return out["logits"], dict(zip(names, sess.run(None, step)))["logits"]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        hf, og_dir = pathlib.Path(tmp) / "hf", pathlib.Path(tmp) / "og"
        make_checkpoint(hf)
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(og_dir),
                        "-p", "fp32", "-e", "cpu", "-c", str(pathlib.Path(tmp) / "cache")], check=True)
        if OUT.exists():
            shutil.rmtree(OUT)
        (OUT / "reference").mkdir(parents=True)
        for f in ("model.onnx", "model.onnx.data", "genai_config.json"):
            shutil.copy(og_dir / f, OUT / f)
        alone = [genai_tokens(og_dir, [p])[0] for p in PROMPTS]
        batch = genai_tokens(og_dir, PROMPTS)
        for a, b in zip(alone, batch):
            assert (a == b).all(), f"a right-padded batch row differs from its prompt alone: {a} vs {b}"
        prompt_logits, decode_logits = ort_logits(og_dir, PROMPTS[0], int(alone[0][0]))
        assert int(prompt_logits[0, -1].argmax()) == alone[0][0] and int(decode_logits[0, -1].argmax()) == alone[0][1]
    ref = OUT / "reference"
    for i, (p, t) in enumerate(zip(PROMPTS, alone)):
        np.save(ref / f"prompt_{i}.npy", np.array(p, dtype=np.int64))
        np.save(ref / f"tokens_{i}.npy", t)
    np.save(ref / "batch_tokens.npy", np.stack(batch))
    np.save(ref / "prompt_logits.npy", prompt_logits)
    np.save(ref / "decode_logits.npy", decode_logits)
    print(json.dumps({"tokens": [t.tolist() for t in alone]}))


if __name__ == "__main__":
    main()
