#!/usr/bin/env python3
"""reforge's CUDA backend against PyTorch eager on the same GPU, side by side in one run.

Runs on a machine with an NVIDIA GPU, PyTorch, transformers, torchvision (optional), onnx and
onnxscript (the device tool's machine has them). For each model and batch:

  1. the model is made in PyTorch with seeded random weights (no downloads) and exported with
     torch.onnx.export(dynamo=True), opset 18, static shapes;
  2. PyTorch eager runs it on the GPU in float32 (TF32 off, as reforge's float32 is exact):
     inputs already on the GPU, CUDA-event timing of each iteration, median of --iterations
     after --warmup;
  3. `reforge build MODEL --device cuda` makes a plan; `reforge bench PLAN --device-io` times it
     on the same inputs, already on the GPU, leaving the outputs there (as eager's timing does;
     median of its iterations); the time with both copies (plain `reforge bench`) is reported
     beside it;
  4. the plans are timed with `--device-replay` (each run after the first replays the run recorded
     as a CUDA graph); the same model built refittable (`--refit`) is timed the same way (refit /
     baked), and the baked plan with `--no-device-replay` (every kernel launched from the host in
     every run); the three are timed in turn, three times each, and each side's figure is the median of its three
     medians (one process after another on a GPU drifts by a few per cent: timing one plan first
     and the other second made a 10% difference between two plans with identical kernels); every
     `reforge` process of a model shares one timing cache (`--timing-cache`), so the baked and the
     refittable plan run the convolution algorithms the first process timed, not each its own;
  5. `reforge bench PLAN --device-trace` traces the baked plan with CUPTI: kernel launches per
     run, the share of the run outside the matrix products, each product in the run against the
     same product run alone (with the device's caches flushed before each call, nvbench's
     convention; the back-to-back figure, operands left in the cache, is in the JSON too), and
     the device memory the plan held (weights, workspaces, the activations' peak);
  6. `reforge run PLAN` writes the outputs, compared with PyTorch's outputs on the GPU in the
     model's dtype (max abs and max relative difference).

Models: bert (BERT-base: hidden 768, 12 layers, 12 heads, sequence 128, attention mask) and
resnet50 (torchvision ResNet-50, 224x224), float32 at batches 1 and 8; llama1b (a Llama-shaped
1.1B model from `transformers`: hidden 2048, 16 layers, 32 query and 8 KV heads, intermediate
8192, vocabulary 32000), bfloat16 on both sides, one 512-token prompt (logits of every
position, cast to float32 in the model so that both sides write the same file). Its export is
over 2 GB, so its weights go to external data. llama1b_dynamic: the same model exported with the
prompt's length a symbol (torch.export dims), run on the same prompt.

    python3 bench/gpu_bench.py --reforge BUILD/reforge [--out DIR] [--models bert,resnet50,llama1b]

Prints one table and writes DIR/gpu_bench.json.
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
import torch

SEQ = 128


def make_bert():
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                        vocab_size=30522, max_position_embeddings=512, attn_implementation="eager")
    model = tf.BertModel(cfg, add_pooling_layer=False).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def inputs(batch):
        g = torch.Generator().manual_seed(batch)
        ids = torch.randint(0, cfg.vocab_size, (batch, SEQ), generator=g)
        mask = torch.ones(batch, SEQ, dtype=torch.int64)
        mask[:, SEQ - SEQ // 8:] = 0  # padding at the end of every row
        return {"input_ids": ids, "attention_mask": mask}

    return Wrap(model).eval(), inputs, ["last_hidden_state"]


def make_resnet50():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()

    def inputs(batch):
        g = torch.Generator().manual_seed(batch)
        return {"pixel_values": torch.randn(batch, 3, 224, 224, generator=g)}

    return model, inputs, ["logits"]


def make_llama1b():
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         intermediate_size=8192, vocab_size=32000, max_position_embeddings=2048, use_cache=False,
                         tie_word_embeddings=False)
    model = tf.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids).logits.float()

    def inputs(batch):
        g = torch.Generator().manual_seed(batch)
        return {"input_ids": torch.randint(0, cfg.vocab_size, (batch, 512), generator=g)}

    return Wrap(model).eval(), inputs, ["logits"]


MODELS = {"bert": make_bert, "resnet50": make_resnet50, "llama1b": make_llama1b, "llama1b_dynamic": make_llama1b}
DTYPE = {"llama1b": "bfloat16", "llama1b_dynamic": "bfloat16"}
BATCHES = {"llama1b": [1], "llama1b_dynamic": [1]}  # one prompt
# llama1b_dynamic: the same model exported with the prompt's length symbolic (as a server that takes
# prompts of any length exports it), run on the same 512-token prompt.
DYNAMIC = {"llama1b_dynamic": {"input_ids": {1: ("seq", 2, 2048)}}}


def export(model, feeds, names, path, external, dynamic=None):
    args = tuple(feeds.values())
    shapes = None
    if dynamic:  # {input: {axis: (name, min, max)}} as torch.export dims, in the inputs' order
        shapes = tuple({ax: torch.export.Dim(n, min=lo, max=hi) for ax, (n, lo, hi) in dynamic.get(k, {}).items()}
                       or None for k in feeds)
    torch.onnx.export(model, args, path, dynamo=True, opset_version=18, input_names=list(feeds.keys()),
                      output_names=names, external_data=external, dynamic_shapes=shapes)


def time_eager(model, feeds, warmup, iterations):
    dev = {k: v.cuda() for k, v in feeds.items()}
    times = []
    with torch.no_grad():
        for _ in range(warmup):
            model(*dev.values())
        torch.cuda.synchronize()
        for _ in range(iterations):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            model(*dev.values())
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def reforge_env():
    # reforge's own libraries (the GPU machine's unpacked packages) stay out of PyTorch's process.
    env = dict(os.environ)
    if os.environ.get("REFORGE_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["REFORGE_LD_LIBRARY_PATH"]
    return env


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=reforge_env())
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reforge", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--models", default="bert,resnet50,llama1b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--profile", action="store_true",
                    help="also print reforge's time per op type and slowest nodes (bench --profile; "
                         "each node waits for the GPU)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    work = tempfile.mkdtemp(prefix="gpu_bench_")
    for name in a.models.split(","):
        model, make_inputs, out_names = MODELS[name]()
        for batch in BATCHES.get(name, [int(b) for b in a.batches.split(",")]):
            row = {"model": name, "batch": batch, "dtype": DTYPE.get(name, "float32")}
            rows.append(row)
            d = os.path.join(work, f"{name}_b{batch}")
            os.makedirs(os.path.join(d, "in"), exist_ok=True)
            feeds = make_inputs(batch)
            try:
                onnx_path = os.path.join(d, "model.onnx")
                t0 = time.time()
                export(model, feeds, out_names, onnx_path, external=name in DTYPE, dynamic=DYNAMIC.get(name))
                row["export_s"] = round(time.time() - t0, 1)
                # The reference: PyTorch on the GPU (TF32 off), in the model's own dtype.
                model.cuda()
                with torch.no_grad():
                    ref = model(*[v.cuda() for v in feeds.values()])
                ref = (ref if isinstance(ref, (tuple, list)) else [ref])[0].float().cpu().numpy()
                ref32 = None
                if name in DTYPE:  # the same weights in float32: how far each 16-bit side is from it
                    model.float()
                    with torch.no_grad():
                        ref32 = model(*[v.cuda() for v in feeds.values()])
                    ref32 = (ref32 if isinstance(ref32, (tuple, list)) else [ref32])[0].float().cpu().numpy()
                    model.to(getattr(torch, DTYPE[name]))
                inputs = []
                for k, v in feeds.items():
                    np.save(os.path.join(d, "in", k + ".npy"), v.numpy())
                    inputs += ["-i", f"{k}={os.path.join(d, 'in', k + '.npy')}"]
                row["torch_ms"] = round(time_eager(model, feeds, a.warmup, a.iterations), 3)
                model.cpu()
                torch.cuda.empty_cache()
                plan_path = os.path.join(d, "model.plan")  # built once, run by bench and run
                cache = os.path.join(d, "timing.cache")  # one timing cache for the model's processes
                t0 = time.time()
                run([a.reforge, "build", onnx_path, "-o", plan_path, "--device", "cuda", "--quiet"])
                row["reforge_build_s"] = round(time.time() - t0, 1)
                out = run([a.reforge, "bench", plan_path, "--device", "cuda", "--timing-cache", cache, "--warmup", str(a.warmup),
                           "--iterations", str(a.iterations)] + inputs)
                stats = json.loads(out.strip().splitlines()[-1])
                row["reforge_host_io_ms"] = round(stats["median_ms"], 3)
                # The same model built refittable (every weight a refittable source): timed in turn
                # with the baked plan, three times each.
                refit_path = os.path.join(d, "model.refit.plan")
                run([a.reforge, "build", onnx_path, "-o", refit_path, "--device", "cuda", "--refit", "--quiet"])
                # The baked plan also with replay off (every kernel launched from the host each run).
                variants = {"baked": [plan_path, "--device-replay"], "refit": [refit_path, "--device-replay"],
                            "eager": [plan_path, "--no-device-replay"]}
                medians = {k: [] for k in variants}
                for _ in range(3):
                    for k, v in variants.items():
                        out = run([a.reforge, "bench"] + v + ["--device", "cuda", "--timing-cache", cache, "--device-io", "--warmup",
                                                              str(a.warmup), "--iterations", str(a.iterations)] + inputs)
                        stats = json.loads(out.strip().splitlines()[-1])
                        medians[k].append(stats["median_ms"])
                        if k == "baked":  # how many runs replayed a recording (CUDA graphs), or why none
                            for key in ("device_replays", "device_eager_runs", "device_replay_declined",
                                        "device_replay_failure", "device_replay_peak_bytes"):
                                if key in stats:
                                    row[key] = stats[key]
                row["reforge_ms"] = round(statistics.median(medians["baked"]), 3)
                row["reforge_refit_ms"] = round(statistics.median(medians["refit"]), 3)
                row["reforge_eager_ms"] = round(statistics.median(medians["eager"]), 3)
                row["speedup"] = round(row["torch_ms"] / row["reforge_ms"], 3)
                row["refit_over_baked"] = round(row["reforge_refit_ms"] / row["reforge_ms"], 3)
                # The device's own account of a run (CUPTI), and the plan's device memory.
                p = subprocess.run([a.reforge, "bench", plan_path, "--device", "cuda", "--timing-cache", cache, "--device-io", "--warmup",
                                    str(a.warmup), "--iterations", "20", "--device-trace"] + inputs,
                                   capture_output=True, text=True, env=reforge_env())
                if p.returncode == 0:
                    trace = json.loads(p.stdout.strip().splitlines()[-1])
                    for k in ("kernel_launches_per_run", "device_busy_ms", "outside_products_fraction",
                              "outside_products_and_convolutions_fraction", "products",
                              "products_within_10pct_of_alone", "products_in_run_over_alone",
                              "products_worst_in_run_over_alone", "products_in_run_over_alone_warm",
                              "products_alone_caches_flushed", "device_weights_bytes", "device_workspace_bytes",
                              "device_activations_peak_bytes", "device_peak_bytes"):
                        if k in trace:
                            row[k] = trace[k]
                    print(f"== device trace of {name} batch {batch}\n{p.stderr[-3000:]}", flush=True)
                else:
                    row["device_trace_error"] = p.stderr[-500:]
                if a.profile:
                    p = subprocess.run([a.reforge, "bench", plan_path, "--device", "cuda", "--timing-cache", cache, "--warmup", "3",
                                        "--iterations", "10", "--profile"] + inputs, capture_output=True, text=True,
                                       env=dict(os.environ, LD_LIBRARY_PATH=os.environ.get(
                                           "REFORGE_LD_LIBRARY_PATH", os.environ.get("LD_LIBRARY_PATH", ""))))
                    print(f"== profile of {name} batch {batch}\n{p.stderr[-4000:]}", flush=True)
                run([a.reforge, "run", plan_path, "--device", "cuda", "--timing-cache", cache, "-o", os.path.join(d, "out")] + inputs)
                got = np.load(os.path.join(d, "out", out_names[0] + ".npy"))
                diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
                row["max_abs_diff"] = float(diff.max())
                row["max_ref"] = float(np.abs(ref).max())
                row["max_rel_diff"] = float((diff / np.maximum(np.abs(ref), 1e-6)).max())
                row["max_abs_diff_over_max_ref"] = row["max_abs_diff"] / max(row["max_ref"], 1e-30)
                if ref32 is not None:
                    scale = max(float(np.abs(ref32).max()), 1e-30)
                    row["reforge_vs_fp32_max_abs_over_max_ref"] = float(np.abs(got - ref32).max()) / scale
                    row["torch_vs_fp32_max_abs_over_max_ref"] = float(np.abs(ref - ref32).max()) / scale
            except Exception as e:  # a failing row is reported, the others still run
                row["error"] = str(e)[-2000:]
                model.cpu()
                torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)
    print()
    print(f"GPU: {torch.cuda.get_device_name(0)}; PyTorch {torch.__version__}; TF32 off; "
          f"median of {a.iterations} after {a.warmup} warm-up")
    print(f"{'model':10} {'dtype':9} {'batch':>5} {'torch ms':>9} {'reforge ms':>10} {'torch/reforge':>13} "
          f"{'eager ms':>8} {'replayed':>8} "
          f"{'max abs diff':>12} {'/ max |ref|':>11} {'refit/baked':>11} {'launches':>8} {'outside products':>16} "
          f"{'products <=1.1x alone':>21} {'device MB':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:10} {r['dtype']:9} {r['batch']:5} error: {r['error'].splitlines()[-1][:150]}")
            continue
        print(f"{r['model']:10} {r['dtype']:9} {r['batch']:5} {r['torch_ms']:9.3f} {r['reforge_ms']:10.3f} "
              f"{r['speedup']:13.2f} {r['reforge_eager_ms']:8.3f} "
              f"{'yes' if r.get('device_replays', 0) > 0 else 'no':>8} {r['max_abs_diff']:12.2e} {r['max_abs_diff_over_max_ref']:11.2e} "
              f"{r['refit_over_baked']:11.3f} {r.get('kernel_launches_per_run', 0):8.0f} "
              f"{r.get('outside_products_fraction', float('nan')):16.3f} "
              f"{str(r.get('products_within_10pct_of_alone', '-')) + '/' + str(r.get('products', '-')):>21} "
              f"{r.get('device_peak_bytes', 0) / 2**20:9.0f}")
    with open(os.path.join(a.out, "gpu_bench.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
