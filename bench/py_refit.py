#!/usr/bin/env python3
"""Refit from Python: plan.refit(state_dict) next to a copy of the same bytes, in one run.

    .venv/bin/python bench/py_refit.py [--models gpt2,bert,llama,t5,vit] [--gb 1.0] [--repeat 5]
                                       [--dir DIR] [--threads N]

For each bundled Hugging Face export (models/hf) and, with --gb G, a synthetic Llama-style
decoder of G x 10^9 bytes of float32 weights (written by build/reforge_refit_bench
--write-models), the plan is built refittable and bound to checkpoint A; weights B are read
with the safetensors package into a dict of numpy arrays, the state dict a training loop holds.
Timed, best of --repeat, refits alternating between B and A so that every refit changes every
weight:

  memcpy     numpy copies of every array of the dict into preallocated arrays (np.copyto):
             moving the bytes once, the floor of any refit that does not alias caller memory
  refit      plan.refit(dict): binding replay, validation (completeness, shapes, NaN/Inf, hashes
             of kept values), recipe replay (packing; weights used as they are copied into
             memory the plan owns), commit
  torch      model.load_state_dict(dict of torch tensors) of a torch module with the same
             parameters (when torch is installed), and plan.refit of those torch tensors

Printed as ratios: refit / memcpy, and refit / (memcpy + the replay the refit reports), the
issue's goal being at most 1; refit / load_state_dict with torch. Ends with a JSON line. Not a test.
"""

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import safetensors.numpy

import reforge

ROOT = Path(__file__).resolve().parents[1]

try:
    import torch
except ImportError:
    torch = None


def best_of(repeat, fn):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def torch_module(state):
    """A torch module whose state_dict has the keys, shapes and dtypes of `state`."""
    root = torch.nn.Module()
    for name, value in state.items():
        *path, leaf = name.split(".")
        m = root
        for part in path:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        t = torch.from_numpy(np.zeros_like(value))
        if t.is_floating_point():
            m.register_parameter(leaf, torch.nn.Parameter(t, requires_grad=False))
        else:
            m.register_buffer(leaf, t)
    return root


def measure(label, onnx_a, ckpt_a, ckpt_b, repeat, threads):
    t0 = time.perf_counter()
    plan = reforge.build(onnx_a, refit=True, checkpoint=ckpt_a, threads=threads)
    build_ms = (time.perf_counter() - t0) * 1e3
    states = {"A": safetensors.numpy.load_file(str(ckpt_a)), "B": safetensors.numpy.load_file(str(ckpt_b))}
    nbytes = sum(v.nbytes for v in states["B"].values())
    dst = {k: np.empty_like(v) for k, v in states["B"].items()}
    for v in dst.values():
        v.fill(0)  # resident destination pages

    def copy_all():
        for k, v in states["B"].items():
            np.copyto(dst[k], v)

    memcpy_ms = best_of(repeat, copy_all)

    turn = {"i": 0}
    reports = []

    def refit(kind):
        def go():
            w = "B" if turn["i"] % 2 == 0 else "A"
            turn["i"] += 1
            reports.append(plan.refit(kind[w]))

        return go

    refit_ms = best_of(repeat, refit(states))
    best = min(reports, key=lambda r: r["read_ms"] + r["validate_ms"] + r["replay_ms"] + r["commit_ms"])
    replay_ms = best["replay_ms"]
    row = {
        "model": label,
        "bytes": nbytes,
        "build_ms": round(build_ms, 1),
        "memcpy_ms": round(memcpy_ms, 3),
        "refit_ms": round(refit_ms, 3),
        "refit_phases_ms": {
            k: round(best[k], 3) for k in ("read_ms", "validate_ms", "replay_ms", "commit_ms")
        },
        "bytes_copied": best["bytes_copied"],
        "refit_over_memcpy": round(refit_ms / memcpy_ms, 2),
        "refit_over_memcpy_plus_replay": round(refit_ms / (memcpy_ms + replay_ms), 2),
    }
    if torch is not None:
        tstates = {w: {k: torch.from_numpy(v) for k, v in s.items()} for w, s in states.items()}
        module = torch_module(states["B"])
        load_ms = best_of(repeat, lambda: module.load_state_dict(tstates["B"]))
        reports.clear()
        refit_torch_ms = best_of(repeat, refit(tstates))
        row.update(
            {
                "load_state_dict_ms": round(load_ms, 3),
                "refit_torch_ms": round(refit_torch_ms, 3),
                "refit_torch_over_load_state_dict": round(refit_torch_ms / load_ms, 2),
            }
        )
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,bert,llama,t5,vit")
    ap.add_argument("--gb", type=float, default=0.0, help="also a synthetic model of this many 10^9 bytes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the synthetic model's files go")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    print("reforge %s, numpy %s, torch %s, %d cpus" % (reforge.__version__, np.__version__,
                                                      torch.__version__ if torch else "absent", os.cpu_count()))
    rows = []
    hf = ROOT / "models" / "hf"
    for m in [m for m in a.models.split(",") if m]:
        rows.append(
            measure(m, hf / m / "A" / "model.onnx", hf / m / "checkpoint_A.safetensors",
                    hf / m / "checkpoint_B.safetensors", a.repeat, a.threads))
    if a.gb > 0:
        with tempfile.TemporaryDirectory(dir=a.dir, prefix="reforge_py_refit_") as d:
            tool = ROOT / "build" / "reforge_refit_bench"
            subprocess.run([str(tool), "--gb", str(a.gb), "--write-models", d], check=True)
            d = Path(d)
            rows.append(
                measure("synthetic %.1f GB" % a.gb, d / "model_a.onnx", d / "weights_a.safetensors",
                        d / "weights_b.safetensors", a.repeat, a.threads))
    head = "%-18s %12s %10s %10s %8s %15s" % ("model", "bytes", "memcpy ms", "refit ms", "/memcpy", "/(memcpy+replay)")
    if torch is not None:
        head += " %12s %12s %8s" % ("load_sd ms", "refit(t) ms", "/load_sd")
    print(head)
    for r in rows:
        line = "%-18s %12d %10.3f %10.3f %8.2f %15.2f" % (r["model"], r["bytes"], r["memcpy_ms"], r["refit_ms"],
                                                          r["refit_over_memcpy"], r["refit_over_memcpy_plus_replay"])
        if torch is not None:
            line += " %12.3f %12.3f %8.2f" % (r["load_state_dict_ms"], r["refit_torch_ms"],
                                              r["refit_torch_over_load_state_dict"])
        print(line)
    print(json.dumps({"bench": "py_refit", "repeat": a.repeat, "rows": rows}))


if __name__ == "__main__":
    main()
