#!/usr/bin/env python3
"""Text generation on the CPU against ONNX Runtime GenAI, on the model its own builder makes, side
by side in one run, same threads.

`--make DIR` writes the model: a `transformers` LlamaForCausalLM of llama_s1's size (hidden 1024, 8
layers, 16 heads over 4 key-value heads, intermediate 2816, vocabulary 32000; seeded random
weights) exported by ONNX Runtime GenAI's model builder (`python -m onnxruntime_genai.models.builder
-p fp32 -e cpu`: GroupQueryAttention with packed QKV and rotary, SkipSimplifiedLayerNormalization;
the cache shared between past and present). Needs torch, transformers and onnxruntime-genai.

Per thread count, greedy, the same prompt of --prompt random tokens and --new-tokens new ones:
  reforge   `reforge generate DIR/model.onnx --threads T --bench=ROUNDS --json`: one warm-up
            generation, then ROUNDS timed; the prompt's time and the median decode step;
  genai     onnxruntime_genai's Generator with T intra-op threads (genai_config.json's session
            options): append_tokens, then generate_next_token per token; one warm-up generation,
            then ROUNDS timed, the same statistics;
the two in turn, and their tokens compared.

    python3 bench/generate_genai_cpu.py --make DIR
    python3 bench/generate_genai_cpu.py DIR [--reforge build/reforge] [--threads 1,2] [--prompt 64]
                                        [--new-tokens 32] [--rounds 3]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def make(d):
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                   num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                                   bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with tempfile.TemporaryDirectory() as tmp:
        hf = os.path.join(tmp, "hf")
        model.save_pretrained(hf)
        # The builder saves a tokenizer beside the model: a word-level one over the ids.
        words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(32000)}, unk_token="t0"))
        words.pre_tokenizer = pre_tokenizers.Whitespace()
        transformers.PreTrainedTokenizerFast(tokenizer_object=words, bos_token="t1", eos_token="t2",
                                             pad_token="t2").save_pretrained(hf)
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf, "-o", d, "-p", "fp32",
                        "-e", "cpu", "-c", os.path.join(tmp, "cache")], check=True)
    print(f"wrote {d}")


def with_threads(folder, threads, work):
    """A copy of the model folder (links to its files) whose genai_config.json asks for `threads`
    intra-op threads."""
    d = os.path.join(work, f"genai_{threads}")
    if not os.path.isdir(d):
        os.makedirs(d)
        for f in os.listdir(folder):
            if f != "genai_config.json":
                os.symlink(os.path.abspath(os.path.join(folder, f)), os.path.join(d, f))
        with open(os.path.join(folder, "genai_config.json")) as f:
            cfg = json.load(f)
        so = cfg["model"]["decoder"].setdefault("session_options", {})
        so["intra_op_num_threads"] = threads
        so["inter_op_num_threads"] = 1
        with open(os.path.join(d, "genai_config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
    return d


def genai_rounds(folder, prompt, new_tokens, rounds):
    import onnxruntime_genai as og

    model = og.Model(folder)

    def one():
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
        gen = og.Generator(model, params)
        t0 = time.perf_counter()
        gen.append_tokens(np.array([prompt], dtype=np.int32))
        gen.generate_next_token()
        first = (time.perf_counter() - t0) * 1e3
        steps = []
        while not gen.is_done():
            t0 = time.perf_counter()
            gen.generate_next_token()
            steps.append((time.perf_counter() - t0) * 1e3)
        return [int(t) for t in gen.get_sequence(0)[len(prompt):]], first, steps

    one()  # warm-up
    runs = [one() for _ in range(rounds)]
    return runs[0][0], statistics.median(r[1] for r in runs), statistics.median(s for r in runs for s in r[2])


def reforge_rounds(binary, model, ids, new_tokens, threads, rounds):
    p = subprocess.run([binary, "generate", model, "--input-ids", ids, "--max-new-tokens", str(new_tokens),
                        "--threads", str(threads), f"--bench={rounds}", "--json", "-q"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    j = json.loads(p.stdout.strip().splitlines()[-1])
    return j["tokens"][0], j["bench"]["first_token_ms"], j["bench"]["step_ms_p50"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", help="the builder's output folder")
    ap.add_argument("--make", default="")
    ap.add_argument("--reforge", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                      "reforge"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.make:
        return make(a.make)
    if not a.model:
        ap.error("give the model folder (or --make DIR)")
    prompt = [int(t) for t in np.random.default_rng(1).integers(3, 1000, a.prompt)]
    work = tempfile.mkdtemp(prefix="generate_genai_cpu_")
    try:
        ids = os.path.join(work, "prompt.npy")
        np.save(ids, np.array(prompt, np.int64))
        rows = []
        for threads in [int(t) for t in a.threads.split(",")]:
            r_tokens, r_first, r_step = reforge_rounds(a.reforge, os.path.join(a.model, "model.onnx"), ids,
                                                       a.new_tokens, threads, a.rounds)
            g_tokens, g_first, g_step = genai_rounds(with_threads(a.model, threads, work), prompt, a.new_tokens,
                                                     a.rounds)
            row = {"threads": threads, "reforge_first_ms": round(r_first, 3), "genai_first_ms": round(g_first, 3),
                   "reforge_step_ms": round(r_step, 3), "genai_step_ms": round(g_step, 3),
                   "step_reforge_over_genai": round(r_step / g_step, 3), "tokens_equal": r_tokens == g_tokens}
            rows.append(row)
            print(json.dumps(row), flush=True)
        print(f"\n{'threads':>7} {'first ms':>9} {'GenAI first':>12} {'step ms':>8} {'GenAI step':>11} {'ratio':>6} tokens")
        for r in rows:
            print(f"{r['threads']:>7} {r['reforge_first_ms']:>9.2f} {r['genai_first_ms']:>12.2f} "
                  f"{r['reforge_step_ms']:>8.2f} {r['genai_step_ms']:>11.2f} {r['step_reforge_over_genai']:>6.2f} "
                  f"{'equal' if r['tokens_equal'] else 'DIFFER'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
