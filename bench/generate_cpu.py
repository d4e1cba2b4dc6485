#!/usr/bin/env python3
"""Text generation on the CPU: reforge's decoding loop against ONNX Runtime running the same export
in a loop with I/O binding, side by side in one run, same threads.

The model is a decoder exported with its KV cache in optimum's with-past layout (input_ids,
attention_mask, position_ids, past_key_values.N.key/value -> logits, present.N.key/value), as
`reforge.export_causal_lm` writes it; `--make DIR` writes one: a `transformers` LlamaForCausalLM of
llama_s1's size (hidden 1024, 8 layers, 16 heads, 4 key-value heads, intermediate 2816, vocabulary
32000; 616 MB float32) with seeded random weights (needs torch and transformers, e.g. the device
machine's or a PyPI virtual environment).

Per thread count: reforge (`reforge generate --json`: the prompt's run, then the median and p90 of
the decode steps, each a run of the engine with the cache in place) and ONNX Runtime
(InferenceSession with that many intra-op threads; the prompt's run, then each step with I/O
binding: the previous step's present outputs bound as the next step's past inputs, no copies
through numpy), greedy, the same prompt; the tokens of both are compared.

    python3 bench/generate_cpu.py --make DIR                 # once (torch, transformers)
    python3 bench/generate_cpu.py DIR/model.onnx [--reforge build/reforge] [--threads 1,2]
                                  [--prompt 64] [--new-tokens 32] [--rounds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def make(d):
    import torch
    import transformers

    import importlib.util

    # python/reforge/export.py alone (it needs no extension), so this runs where reforge is not built.
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("reforge_export", os.path.join(here, "..", "python", "reforge",
                                                                                 "export.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    export_causal_lm = mod.export_causal_lm

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                   num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
    model = transformers.LlamaForCausalLM(cfg).eval()
    os.makedirs(d, exist_ok=True)
    print(export_causal_lm(model, os.path.join(d, "model.onnx"), max_length=2048))


def ort_generate(path, prompt, new_tokens, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ins = [i.name for i in s.get_inputs()]
    outs = [o.name for o in s.get_outputs()]
    past_names = [n for n in ins if n.startswith("past_key_values.")]
    present_names = ["present." + n[len("past_key_values."):] for n in past_names]
    kv = s.get_inputs()[ins.index(past_names[0])].shape
    heads, head = kv[1], kv[3]
    n = len(prompt)
    feed = {"input_ids": np.array([prompt], np.int64), "attention_mask": np.ones((1, n), np.int64),
            "position_ids": np.arange(n, dtype=np.int64).reshape(1, n)}
    for p in past_names:
        feed[p] = np.zeros((1, heads, 0, head), np.float32)
    t0 = time.perf_counter()
    out = s.run(None, feed)
    first_ms = (time.perf_counter() - t0) * 1e3
    tokens = [int(np.argmax(out[0][0, -1]))]
    presents = {name: ort.OrtValue.ortvalue_from_numpy(out[outs.index(name)]) for name in present_names}
    steps = []
    for step in range(1, new_tokens):
        b = s.io_binding()
        total = n + step
        b.bind_cpu_input("input_ids", np.array([[tokens[-1]]], np.int64))
        b.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        b.bind_cpu_input("position_ids", np.array([[total - 1]], np.int64))
        for p, q in zip(past_names, present_names):
            b.bind_ortvalue_input(p, presents[q])
        for name in outs:
            b.bind_output(name, "cpu")
        t0 = time.perf_counter()
        s.run_with_iobinding(b)
        steps.append((time.perf_counter() - t0) * 1e3)
        values = b.get_outputs()
        tokens.append(int(np.argmax(values[0].numpy()[0, -1])))
        presents = {name: values[outs.index(name)] for name in present_names}
    return tokens, first_ms, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
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
        ap.error("give the model (or --make DIR)")
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, 1000, a.prompt)]
    work = tempfile.mkdtemp(prefix="generate_cpu_")
    ids = os.path.join(work, "prompt.npy")
    np.save(ids, np.array(prompt, np.int64))
    rows = []
    for threads in [int(t) for t in a.threads.split(",")]:
        r_first, r_steps, o_first, o_steps = [], [], [], []
        equal = True
        for _ in range(a.rounds):  # the two in turn, each round
            p = subprocess.run([a.reforge, "generate", a.model, "--input-ids", ids, "--max-new-tokens",
                                str(a.new_tokens), "--threads", str(threads), "--json", "-q"],
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(p.stderr)
            j = json.loads(p.stdout.strip().splitlines()[-1])
            r_first.append(j["first_token_ms"][0])
            r_steps.append(j["step_ms_p50"])
            tokens, first, steps = ort_generate(a.model, prompt, a.new_tokens, threads)
            o_first.append(first)
            o_steps.append(statistics.median(steps))
            equal = equal and tokens == j["tokens"][0]
        row = {"threads": threads, "reforge_first_ms": round(statistics.median(r_first), 3),
               "ort_first_ms": round(statistics.median(o_first), 3),
               "reforge_step_ms": round(statistics.median(r_steps), 3),
               "ort_step_ms": round(statistics.median(o_steps), 3), "tokens_equal": equal}
        row["step_reforge_over_ort"] = round(row["reforge_step_ms"] / row["ort_step_ms"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'threads':>7} {'first ms':>9} {'ORT first':>10} {'step ms':>8} {'ORT step':>9} {'ratio':>6} tokens")
    for r in rows:
        print(f"{r['threads']:>7} {r['reforge_first_ms']:>9.2f} {r['ort_first_ms']:>10.2f} {r['reforge_step_ms']:>8.2f} "
              f"{r['ort_step_ms']:>9.2f} {r['step_reforge_over_ort']:>6.2f} {'equal' if r['tokens_equal'] else 'DIFFER'}")


if __name__ == "__main__":
    sys.exit(main())
