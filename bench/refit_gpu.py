#!/usr/bin/env python3
"""Refit of a CUDA plan against the copy floors and PyTorch's weight loading, side by side on one
card in one run.

The model is bench/generate_gpu.py's bfloat16 Llama-shaped decoder (llama1b by default: 2.2 GB;
its `transformers` config, seeded random weights, no downloads), exported once with
`reforge.export_causal_lm`. Checkpoint A is its state dict, checkpoint B the same tensors plus
seeded noise, both written with safetensors. reforge builds the plan for the GPU refittable,
stripped and bound to A (`reforge build --device cuda --refit --strip-weights --checkpoint A`), then
reforge_refit_gpu_bench (bench/refit_gpu_bench.cc, its own process) times refits from B: the
page-cached file, a state dict in pinned host memory, and the floors of the same bytes (pinned and
pageable host-to-device copies, a device-to-device copy). In this process, PyTorch on the same
card: the pinned host-to-device copy of the same bytes, `model.load_state_dict` from pinned and from
pageable CPU tensors, and `safetensors.torch.load_file(B, device="cuda")` from the page cache.

    python3 bench/refit_gpu.py --reforge BUILD/reforge --bench BUILD/reforge_refit_gpu_bench
                               [--models llama1b] [--repeat 5] [--out DIR] [--staging-bytes N]
                               [--decode-steps 64]

With --decode-steps N (64 by default; 0: off) the bench also times a decoding step of the model
idle and while refits from the pinned state dict run back to back on another thread.

Prints one table (GB/s and ratio to the pinned copy floor) and writes DIR/refit_gpu.json.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def generate_gpu():
    spec = importlib.util.spec_from_file_location("generate_gpu", os.path.join(HERE, "generate_gpu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def reforge_env():
    env = dict(os.environ)
    if os.environ.get("REFORGE_LD_LIBRARY_PATH"):  # reforge's own libraries stay out of PyTorch's process
        env["LD_LIBRARY_PATH"] = os.environ["REFORGE_LD_LIBRARY_PATH"]
    return env


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=reforge_env())
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def timed(fn, repeat):
    """Best and median ms of `repeat` calls of fn after one untimed, each between CUDA synchronizations."""
    import torch

    fn()
    ms = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    return {"best_ms": ms[0], "median_ms": ms[len(ms) // 2]}


def torch_rows(model, path_b, state_b, repeat):
    import safetensors.torch
    import torch

    total = sum(t.numel() * t.element_size() for t in state_b.values())
    pinned = {k: v.pin_memory() for k, v in state_b.items()}
    rows = {}
    flat = torch.empty(total, dtype=torch.uint8).pin_memory()
    dev = torch.empty(total, dtype=torch.uint8, device="cuda")
    rows["torch: H2D pinned copy"] = timed(lambda: dev.copy_(flat, non_blocking=True), repeat)
    dev2 = torch.empty_like(dev)
    rows["torch: D2D copy"] = timed(lambda: dev2.copy_(dev), repeat)
    del flat, dev, dev2
    rows["torch: load_state_dict, pinned"] = timed(lambda: model.load_state_dict(pinned), repeat)
    rows["torch: load_state_dict, pageable"] = timed(lambda: model.load_state_dict(state_b), repeat)
    rows["safetensors load_file(device=cuda)"] = timed(
        lambda: safetensors.torch.load_file(path_b, device="cuda"), repeat)
    return total, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reforge", required=True)
    ap.add_argument("--bench", required=True, help="reforge_refit_gpu_bench")
    ap.add_argument("--models", default="llama1b")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--staging-bytes", type=int, default=0)
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    import safetensors.torch
    import torch

    gen = generate_gpu()
    os.makedirs(args.out, exist_ok=True)
    card = torch.cuda.get_device_name(0)
    results = {"card": card, "torch": torch.__version__, "repeat": args.repeat, "models": {}}
    for name in args.models.split(","):
        work = os.path.join(args.out, f"refit_{name}")
        os.makedirs(work, exist_ok=True)
        model = gen.make_model(name, "cuda")
        onnx_path = os.path.join(work, "model.onnx")
        t0 = time.time()
        gen.export_module().export_causal_lm(model, onnx_path, max_length=4096)
        row = {"export_s": time.time() - t0}
        state_a = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        g = torch.Generator().manual_seed(1)
        state_b = {k: (v.float() + 0.01 * torch.randn(v.shape, generator=g)).to(v.dtype).contiguous()
                   for k, v in state_a.items()}
        path_a, path_b = os.path.join(work, "A.safetensors"), os.path.join(work, "B.safetensors")
        safetensors.torch.save_file(state_a, path_a)
        safetensors.torch.save_file(state_b, path_b)
        del state_a
        plan = os.path.join(work, "model.plan")
        t0 = time.time()
        run([args.reforge, "build", onnx_path, "--device", "cuda", "--refit", "--strip-weights", "--checkpoint",
             path_a, "-o", plan])
        row["build_s"] = time.time() - t0
        print(f"{name}: exported in {row['export_s']:.0f} s, built in {row['build_s']:.0f} s", flush=True)
        cmd = [args.bench, "--plan", plan, "--checkpoint", path_b, "--repeat", str(args.repeat)]
        if args.staging_bytes:
            cmd += ["--staging-bytes", str(args.staging_bytes)]
        if args.decode_steps:
            cmd += ["--decode-steps", str(args.decode_steps)]
        out = run(cmd)
        print(out.rsplit("\n", 2)[0], flush=True)
        row["reforge"] = json.loads(out.strip().splitlines()[-1])
        total, row["torch"] = torch_rows(model, path_b, state_b, args.repeat)
        row["bytes"] = total
        results["models"][name] = row
        del model, state_b
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "refit_gpu.json"), "w") as f:
        json.dump(results, f, indent=1)

    print(f"\n{card}; bfloat16; best of {args.repeat}; ratios to the pinned host-to-device copy in the same run")
    print(f"{'model':9} {'source':40} {'best ms':>9} {'median':>9} {'GB/s':>7} {'x floor':>8}")
    for name, row in results["models"].items():
        floor = next(r["best_ms"] for r in row["reforge"]["rows"] if r["source"] == "floor: H2D pinned")
        lines = [("reforge: " + r["source"], r) for r in row["reforge"]["rows"]] + list(row["torch"].items())
        for label, r in lines:
            print(f"{name:9} {label:40} {r['best_ms']:9.2f} {r['median_ms']:9.2f} "
                  f"{row['bytes'] / 1e6 / r['best_ms']:7.1f} {r['best_ms'] / floor:8.2f}")
        d = row["reforge"].get("decode")
        if d:
            print(f"{name:9} decode step: idle p50 {d['idle_p50_ms']:.3f} ms (p90 {d['idle_p90_ms']:.3f}), while "
                  f"refitting p50 {d['during_refit_p50_ms']:.3f} ms (p90 {d['during_refit_p90_ms']:.3f}, "
                  f"{d['refits']} refits): {d['ratio_p50']:.2f}x idle")


if __name__ == "__main__":
    sys.exit(main())
