#!/usr/bin/env python3
"""Text generation on the GPU: reforge against PyTorch eager and torch.compile, side by side in one
run on one card.

The model is a Llama-shaped decoder made with `transformers` and seeded random weights (no
downloads), in bfloat16 on both sides:

  llama1b  hidden 2048, 16 layers, 32 query / 8 key-value heads, intermediate 8192, vocabulary
           32000 (2.2 GB: the reference model of the CUDA benchmarks)
  llama7b  Llama-2-7B's shape: hidden 4096, 32 layers, 32 heads, intermediate 11008, vocabulary
           32000 (13.5 GB: the seed model's size)
  tiny     hidden 256, 2 layers, 8 / 2 heads, intermediate 512, vocabulary 1000 (a check of this
           script, on any machine)

It is exported once with `reforge.export_causal_lm` (one decoding step with its KV cache, optimum's
with-past layout). Then, greedy, --batch prompts (1 by default) of --prompt random tokens, --new-tokens new ones:

  reforge        `reforge generate MODEL --device cuda --bench=ROUNDS --json`: one warm-up
                 generation, then ROUNDS timed; time to first token (median), per-token p50/p90 of
                 the decode steps, and the fraction of the device's copy bandwidth a step reaches
                 (session/generate_bench.h);
  eager          PyTorch eager, a decoding loop over `transformers`' DynamicCache (the model's
                 forward, argmax, the next token; each step timed between CUDA synchronizations);
                 one warm-up generation, then ROUNDS timed, the same statistics;
  compile        torch.compile(mode="reduce-overhead", fullgraph=True) of the decode step over a
                 StaticCache at its maximum length, the prompt run by the uncompiled model
                 (transformers' documented recipe); warm-up generations until the step stops
                 compiling, then ROUNDS timed. If it fails, the table says so.

The tokens of each peer are compared with reforge's (bfloat16 arithmetic differs between
libraries: the first position where they part is reported, not asserted).

    python3 bench/generate_gpu.py --reforge BUILD/reforge [--models llama1b] [--prompt 512]
                                  [--new-tokens 128] [--rounds 3] [--out DIR] [--peers eager,compile]
                                  [--batch N] [--step-bench]

Prints one table and writes DIR/generate_gpu.json.
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIGS = {
    "llama1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                    intermediate_size=8192, vocab_size=32000),
    "llama7b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                    intermediate_size=11008, vocab_size=32000),
    "tiny": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                 intermediate_size=512, vocab_size=1000),
}


def export_module():
    # python/reforge/export.py alone (it needs no extension): this runs where reforge's Python
    # package is not built.
    spec = importlib.util.spec_from_file_location("reforge_export",
                                                  os.path.join(HERE, "..", "python", "reforge", "export.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_model(name, device):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(max_position_embeddings=4096, tie_word_embeddings=False, **CONFIGS[name])
    model = tf.LlamaForCausalLM(cfg).to(torch.bfloat16).to(device).eval()
    return model


def stats(first_ms, step_ms):
    steps = sorted(step_ms)

    def pct(p):
        if not steps:
            return 0.0
        k = max(1, int(np.ceil(p / 100 * len(steps))))
        return steps[min(k, len(steps)) - 1]

    return {"first_token_ms": statistics.median(first_ms), "step_ms_p50": pct(50), "step_ms_p90": pct(90),
            "decode_tokens_per_s": 1000.0 / pct(50) if steps else 0.0}


def timed_rounds(one, warmups, rounds):
    """`warmups` untimed generations of `one` (tokens, first ms, step ms list), then `rounds` timed:
    the last tokens and the statistics of them all."""
    for _ in range(warmups):
        one()
    firsts, all_steps = [], []
    for _ in range(rounds):
        tokens, first, steps = one()
        firsts.append(first)
        all_steps += steps
    return tokens, stats(firsts, all_steps)


def eager(model, prompts, new_tokens, rounds, device):
    import torch
    from transformers.cache_utils import DynamicCache

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def one():
        ids = torch.tensor(prompts, device=device)
        cache = DynamicCache()
        tokens, first, steps = [], 0.0, []
        pos = 0
        with torch.no_grad():
            for i in range(new_tokens):
                sync()
                t0 = time.perf_counter()
                n = ids.shape[1]
                position_ids = torch.arange(pos, pos + n, device=device).unsqueeze(0).expand(ids.shape[0], n)
                logits = model(input_ids=ids, position_ids=position_ids, past_key_values=cache, use_cache=True).logits
                nxt = torch.argmax(logits[:, -1], dim=-1)
                tok = int(nxt[0].item())  # synchronizes; the first sequence's tokens are compared
                ms = (time.perf_counter() - t0) * 1e3
                pos += n
                tokens.append(tok)
                if i == 0:
                    first = ms
                else:
                    steps.append(ms)
                ids = nxt.unsqueeze(1)
        return tokens, first, steps

    return timed_rounds(one, 1, rounds)


def static_cache(model, batch, max_len, device):
    import torch
    from transformers import StaticCache

    tries = [dict(config=model.config, max_batch_size=batch, max_cache_len=max_len, device=device,
                  dtype=torch.bfloat16),
             dict(config=model.config, max_cache_len=max_len)]
    last = None
    for kw in tries:
        try:
            return StaticCache(**kw)
        except TypeError as e:  # the constructor's arguments differ between transformers versions
            last = e
    raise last


def compiled(model, prompts, new_tokens, rounds, device):
    import torch

    max_len = len(prompts[0]) + new_tokens + 1
    batch = len(prompts)
    cache = static_cache(model, batch, max_len, device)

    def decode_one(cur, position_ids, cache_position):
        logits = model(input_ids=cur, position_ids=position_ids, cache_position=cache_position,
                       past_key_values=cache, use_cache=True, return_dict=False)[0]
        return torch.argmax(logits[:, -1], dim=-1)[:, None]

    decode = torch.compile(decode_one, mode="reduce-overhead", fullgraph=True)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def one():
        cache.reset()
        n = len(prompts[0])
        ids = torch.tensor(prompts, device=device)
        tokens, steps = [], []
        with torch.no_grad():
            sync()
            t0 = time.perf_counter()
            cp = torch.arange(n, device=device)
            logits = model(input_ids=ids, position_ids=cp.unsqueeze(0).expand(batch, n), cache_position=cp,
                           past_key_values=cache, use_cache=True, return_dict=False)[0]
            cur = torch.argmax(logits[:, -1], dim=-1)[:, None]
            tokens.append(int(cur[0].item()))
            first = (time.perf_counter() - t0) * 1e3
            pos = n
            for _ in range(new_tokens - 1):
                t0 = time.perf_counter()
                cp = torch.tensor([pos], device=device)
                cur = decode(cur.clone(), cp.unsqueeze(0).expand(batch, 1), cp)
                tokens.append(int(cur[0].item()))  # synchronizes
                steps.append((time.perf_counter() - t0) * 1e3)
                pos += 1
        return tokens, first, steps

    return timed_rounds(one, 3, rounds)  # the warm-ups compile, record the CUDA graphs, then replay


def run_reforge(binary, model_path, prompt_path, new_tokens, rounds, device, skip_pass=None):
    """reforge generate on the export, or, with `skip_pass`, on a plan built without that pass."""
    env = dict(os.environ)
    if os.environ.get("REFORGE_LD_LIBRARY_PATH"):  # reforge's own libraries stay out of PyTorch's process
        env["LD_LIBRARY_PATH"] = os.environ["REFORGE_LD_LIBRARY_PATH"]
    if skip_pass:
        plan = os.path.join(os.path.dirname(model_path), f"skip-{skip_pass}.plan")
        build = [binary, "build", model_path, "-o", plan, "--skip-pass", skip_pass]
        if device == "cuda":
            build += ["--device", "cuda"]
        p = subprocess.run(build, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(build)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
        model_path = plan
    cmd = [binary, "generate", model_path, "--input-ids", prompt_path, "--max-new-tokens", str(new_tokens),
           f"--bench={rounds}", "--json"]
    if device == "cuda" and not skip_pass:
        cmd += ["--device", "cuda"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    j = json.loads(p.stdout)
    return j["tokens"][0], j["bench"]


def step_bench(binary, onnx_path, work, config, past, device, batch=1):
    """One decode step alone (one new token after `past` cached ones) through `reforge bench` on a
    plan built once: launched from the host, replayed as a CUDA graph (fixed shapes replay), and
    traced (kernel launches, time outside the products), plus the per-op profile."""
    env = dict(os.environ)
    if os.environ.get("REFORGE_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["REFORGE_LD_LIBRARY_PATH"]
    kv = config.num_key_value_heads
    head = config.hidden_size // config.num_attention_heads
    shapes = [f"input_ids={batch}x1", f"position_ids={batch}x1", f"attention_mask={batch}x{past + 1}"]
    for i in range(config.num_hidden_layers):
        for t in ("key", "value"):
            shapes.append(f"past_key_values.{i}.{t}={batch}x{kv}x{past}x{head}")
    plan = os.path.join(work, "step.plan")
    dev = ["--device", "cuda"] if device == "cuda" else []
    out = {}
    p = subprocess.run([binary, "build", onnx_path, "-o", plan] + dev, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    base = [binary, "bench", plan, "--iterations", "50", "--warmup", "5", "--int-range", "0:100"]
    for s in shapes:
        base += ["--shape", s]
    runs = {"eager": [], "replay": ["--device-replay"], "trace": ["--device-trace"], "profile": ["--profile"]}
    if device != "cuda":
        runs = {"eager": [], "profile": ["--profile"]}
    for name, extra in runs.items():
        cmd = base + (["--device-io"] if device == "cuda" else []) + extra
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = p.stdout.strip().splitlines()
        rec = {"rc": p.returncode, "stderr": p.stderr[-6000:]}
        try:
            rec["json"] = json.loads(lines[-1])
        except (IndexError, ValueError):
            rec["stdout"] = p.stdout[-2000:]
        out[name] = rec
    return out


def parted(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reforge", required=True)
    ap.add_argument("--models", default="llama1b")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1, help="prompts of --prompt tokens decoded as one batch")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers", default="eager,compile")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=".")
    ap.add_argument("--skip-pass", default="",
                    help="comma-separated build passes: for each, reforge also generates from a plan built without "
                         "it (a row 'no PASS', timed in the same run)")
    ap.add_argument("--step-bench", action="store_true",
                    help="also time one decode step alone with `reforge bench` (eager, replayed, traced, profiled)")
    args = ap.parse_args()
    import torch

    os.makedirs(args.out, exist_ok=True)
    card = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    results = {"card": card, "torch": torch.__version__, "prompt": args.prompt, "batch": args.batch,
               "new_tokens": args.new_tokens,
               "rounds": args.rounds, "models": {}}
    export_causal_lm = export_module().export_causal_lm
    for name in args.models.split(","):
        work = os.path.join(args.out, f"gen_{name}")
        os.makedirs(work, exist_ok=True)
        model = make_model(name, args.device)
        rng = np.random.default_rng(1)
        prompt = rng.integers(0, model.config.vocab_size, (args.batch, args.prompt)).astype(np.int64)
        prompt_path = os.path.join(work, "prompt.npy")
        np.save(prompt_path, prompt)
        onnx_path = os.path.join(work, "model.onnx")
        t0 = time.time()
        export_causal_lm(model, onnx_path, max_length=4096)
        row = {"export_s": time.time() - t0}
        print(f"{name}: exported in {row['export_s']:.0f} s", flush=True)
        ref_tokens, row["reforge"] = run_reforge(args.reforge, onnx_path, prompt_path, args.new_tokens, args.rounds,
                                                 args.device)
        print(f"{name}: reforge {row['reforge']}", flush=True)
        for sp in [x for x in args.skip_pass.split(",") if x]:
            try:
                tokens, row[f"no {sp}"] = run_reforge(args.reforge, onnx_path, prompt_path, args.new_tokens,
                                                      args.rounds, args.device, sp)
                row[f"no {sp}"]["tokens_part_at"] = parted(ref_tokens, tokens)
            except Exception as e:
                row[f"no {sp}"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"{name}: reforge without {sp}: {row[f'no {sp}']}", flush=True)
        if args.step_bench:
            row["step"] = step_bench(args.reforge, onnx_path, work, model.config, args.prompt, args.device,
                                     args.batch)
            for k, v in row["step"].items():
                if isinstance(v, dict):
                    j = v.get("json", {})
                    print(f"{name}: decode step alone, {k}: median {j.get('median_ms', j.get('p50_ms'))} ms", flush=True)
                    if k in ("trace", "profile"):
                        print(v.get("stderr", "")[-3500:], flush=True)
        for peer in args.peers.split(","):
            if not peer:
                continue
            try:
                fn = {"eager": eager, "compile": compiled}[peer]
                tokens, st = fn(model, prompt.tolist(), args.new_tokens, args.rounds, args.device)
                st["decode_tokens_per_s"] *= args.batch
                st["tokens_part_at"] = parted(ref_tokens, tokens)
                row[peer] = st
            except Exception as e:  # a peer that fails is reported, not hidden
                row[peer] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"{name}: {peer} {row[peer]}", flush=True)
        results["models"][name] = row
        del model
        if args.device == "cuda":
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "generate_gpu.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"\n{card}; prompt {args.prompt} tokens, {args.new_tokens} new, batch {args.batch}, greedy, bfloat16")
    print(f"{'model':10} {'side':10} {'TTFT ms':>9} {'p50 ms/tok':>11} {'p90':>8} {'tok/s':>8} {'reforge/this':>12}")
    for name, row in results["models"].items():
        base = row["reforge"]["step_ms_p50"]
        sides = ["reforge"] + [f"no {x}" for x in args.skip_pass.split(",") if x] + [p for p in args.peers.split(",") if p]
        for side in sides:
            st = row.get(side, {})
            if "error" in st:
                print(f"{name:10} {side:10} failed: {st['error'][:80]}")
                continue
            ratio = base / st["step_ms_p50"] if st.get("step_ms_p50") else 0
            print(f"{name:10} {side:10} {st['first_token_ms']:9.2f} {st['step_ms_p50']:11.3f} {st['step_ms_p90']:8.3f}"
                  f" {st['decode_tokens_per_s']:8.1f} {ratio:12.2f}")
        b = row["reforge"]
        print(f"{'':10} reforge: {100 * b['bandwidth_fraction']:.1f}% of the {b['copy_gb_s']:.0f} GB/s copy bandwidth "
              f"({b['step_bytes'] / 1e6:.0f} MB a step)")


if __name__ == "__main__":
    sys.exit(main())
