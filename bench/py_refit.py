#!/usr/bin/env python3
"""Refit from Python: plan.refit(state_dict) next to a copy of the same bytes, in one run.

    .venv/bin/python bench/py_refit.py [--models gpt2,bert,llama,t5,vit] [--gb 1.0] [--repeat 5]
                                       [--dir DIR] [--threads N] [--torchvision vit_l_16]

For each bundled Hugging Face export (models/hf) and, with --gb G, a synthetic Llama-style
decoder of G x 10^9 bytes of float32 weights (written by build/reforge_refit_bench
--write-models), the plan is built refittable and bound to checkpoint A; weights B are read
with the safetensors package into a dict of numpy arrays, the state dict a training loop holds.

--torchvision NAME adds a real model made by torchvision (vit_l_16: 304M parameters, 1.22 GB
of float32): two instances, seeds 0 (A) and 1 (B), random initialization (no download), every
parameter then moved by N(0, 0.02^2) (torchvision initializes the head to zero and the norms to
one, equal in A and B); A exported with torch.onnx.export (opset 17, batch 1, constant
folding unless --no-constant-folding) and both state dicts saved as safetensors, all cached under
--dir/reforge_py_refit_NAME[_nofold] (about 3.7 GB; delete it to export again). load_state_dict
is then that torchvision module's, and after the timings plan.refit(B) is checked once against
the module with B loaded (eval, no_grad): the maximum absolute difference of the logits must be
at most 1e-4. It needs torch and torchvision, which .venv does not have (CI and the tests do not
need them): Debian 12's python3-torch 1.13 and python3-torchvision 0.14, with an environment that
sees them and has the safetensors package:

    apt-get install python3-torch python3-torchvision
    /usr/bin/python3 -m venv --system-site-packages build/torch-venv
    build/torch-venv/bin/pip install safetensors
    PYTHONPATH=python:build/python build/torch-venv/bin/python bench/py_refit.py --models "" \
        --torchvision vit_l_16 --dir build-bench

(build/python holds the extension that scripts/setup.sh builds for .venv's Python 3.11.)

Timed, best of --repeat, refits alternating between B and A so that every refit changes every
weight:

  memcpy     numpy copies of every array of the dict into preallocated arrays (np.copyto):
             moving the bytes once, the floor of any refit that does not alias caller memory
  refit      plan.refit(dict): binding replay, validation (completeness, shapes, NaN/Inf, hashes
             of kept values), recipe replay (packing; weights used as they are copied into
             memory the plan owns), commit
  torch      model.load_state_dict(dict of torch tensors), alternating B and A, of a torch
             module with the same parameters (when torch is installed; for the Hugging Face and
             synthetic models a stand-in built from the state dict's keys, for --torchvision
             the real module), with torch at --threads threads (all cores by default, as
             reforge), and plan.refit of those torch tensors

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


def torchvision_model(name, seed):
    """torchvision's `name`, randomly initialized with `seed`, every parameter then moved by
    N(0, 0.02^2) so that two seeds share no value; eval mode."""
    import torchvision

    torch.manual_seed(seed)
    model = getattr(torchvision.models, name)(weights=None)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.02)
    return model.eval()


def torchvision_files(name, cache, image, fold):
    """The ONNX export of `name` with weights A (constant folding if `fold`) and the safetensors
    checkpoints A and B, written once into `cache` (kept for the next run)."""
    import safetensors.torch

    files = {"onnx": cache / "A.onnx", "A": cache / "A.safetensors", "B": cache / "B.safetensors"}
    if all(f.exists() for f in files.values()):
        return files
    cache.mkdir(parents=True, exist_ok=True)
    for weights, seed in (("A", 0), ("B", 1)):
        t0 = time.perf_counter()
        model = torchvision_model(name, seed)
        safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                                    str(files[weights]) + ".tmp")
        if weights == "A":
            # Traced with gradients enabled: under no_grad, eval-mode nn.MultiheadAttention takes
            # the fused aten::_native_multi_head_attention, which torch 1.13 cannot export.
            torch.onnx.export(model, (torch.zeros(1, 3, image, image),), str(files["onnx"]) + ".tmp",
                              opset_version=17, do_constant_folding=fold, input_names=["image"],
                              output_names=["logits"])
            os.replace(str(files["onnx"]) + ".tmp", files["onnx"])
        os.replace(str(files[weights]) + ".tmp", files[weights])
        print("%s %s: written in %.1f s" % (name, weights, time.perf_counter() - t0), flush=True)
        del model
    return files


def measure(label, onnx_a, ckpt_a, ckpt_b, repeat, threads, module=None, check_input=None):
    """One model's row. `module`: the torch module whose load_state_dict is timed (a stand-in
    from the state dict's keys by default); `check_input`: an input on which, after plan.refit(B),
    the plan's output is compared with `module`'s with B loaded."""
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
        if module is None:
            module = torch_module(states["B"])
        loads = {"i": 0}

        def load():
            module.load_state_dict(tstates["B" if loads["i"] % 2 == 0 else "A"])
            loads["i"] += 1

        load_ms = best_of(repeat, load)
        reports.clear()
        refit_torch_ms = best_of(repeat, refit(tstates))
        best_t = min(reports, key=lambda r: r["read_ms"] + r["validate_ms"] + r["replay_ms"] + r["commit_ms"])
        row.update(
            {
                "torch_threads": torch.get_num_threads(),
                "load_state_dict_ms": round(load_ms, 3),
                "refit_torch_ms": round(refit_torch_ms, 3),
                "refit_torch_phases_ms": {
                    k: round(best_t[k], 3) for k in ("read_ms", "validate_ms", "replay_ms", "commit_ms")
                },
                "refit_torch_over_memcpy_plus_replay": round(refit_torch_ms / (memcpy_ms + best_t["replay_ms"]), 2),
                "refit_torch_over_load_state_dict": round(refit_torch_ms / load_ms, 2),
            }
        )
        if check_input is not None:
            plan.refit(tstates["B"])
            module.load_state_dict(tstates["B"])
            name = plan.inputs[0].name
            got = plan.run({name: check_input.numpy()})
            got = next(iter(got.values()))
            with torch.no_grad():
                want = module(check_input).numpy()
            diff = float(np.max(np.abs(got - want)))
            row["check_max_abs_diff"] = diff
            row["check_max_abs_ref"] = float(np.max(np.abs(want)))
            print("%s: plan.refit(B) then run vs torch with B loaded: max abs diff %.3g (|logits| up to %.3g)"
                  % (label, diff, row["check_max_abs_ref"]), flush=True)
            if not diff <= 1e-4:
                raise SystemExit("%s: refit plan differs from torch by %.3g > 1e-4" % (label, diff))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,bert,llama,t5,vit")
    ap.add_argument("--gb", type=float, default=0.0, help="also a synthetic model of this many 10^9 bytes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the synthetic model's files go")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--torchvision", default="", help="also this torchvision model, e.g. vit_l_16 (needs torch)")
    ap.add_argument("--image", type=int, default=224, help="the torchvision model's input height and width")
    ap.add_argument("--no-constant-folding", action="store_true",
                    help="export the torchvision model with do_constant_folding=False")
    a = ap.parse_args()
    if torch is not None:
        torch.set_num_threads(a.threads or os.cpu_count())
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
    if a.torchvision:
        if torch is None:
            raise SystemExit("--torchvision needs torch and torchvision (see the docstring: python3-torch)")
        fold = not a.no_constant_folding
        cache = Path(a.dir) / ("reforge_py_refit_%s%s" % (a.torchvision, "" if fold else "_nofold"))
        files = torchvision_files(a.torchvision, cache, a.image, fold)
        torch.manual_seed(2)
        image = torch.randn(1, 3, a.image, a.image)
        rows.append(
            measure("%s%s" % (a.torchvision, "" if fold else " nofold"), files["onnx"], files["A"], files["B"],
                    a.repeat, a.threads, module=torchvision_model(a.torchvision, 0), check_input=image))
    head = "%-24s %12s %10s %10s %8s %15s" % ("model", "bytes", "memcpy ms", "refit ms", "/memcpy", "/(memcpy+replay)")
    if torch is not None:
        head += " %12s %12s %15s %8s" % ("load_sd ms", "refit(t) ms", "/(memcpy+replay)", "/load_sd")
    print(head)
    for r in rows:
        line = "%-24s %12d %10.3f %10.3f %8.2f %15.2f" % (r["model"], r["bytes"], r["memcpy_ms"], r["refit_ms"],
                                                          r["refit_over_memcpy"], r["refit_over_memcpy_plus_replay"])
        if torch is not None:
            line += " %12.3f %12.3f %15.2f %8.2f" % (r["load_state_dict_ms"], r["refit_torch_ms"],
                                                     r["refit_torch_over_memcpy_plus_replay"],
                                                     r["refit_torch_over_load_state_dict"])
        print(line)
    print(json.dumps({"bench": "py_refit", "repeat": a.repeat, "rows": rows}))


if __name__ == "__main__":
    main()
