#!/usr/bin/env python3
"""Bar and line charts of the current benchmark figures, for docs/benchmarks.md (into docs/img/).

Inputs are the benchmarks' own JSON, never figures typed in:

  --ort FILE      bench/compare_ort.py --json FILE: per model, batch and thread count, reforge's
                  median latency and peak RSS as ratios to ONNX Runtime's (lower is better; 1 is
                  parity) -> ort_latency.png, ort_memory.png
  --refit FILE    the final JSON lines of build/reforge_refit_bench runs at several sizes, one per
                  line (e.g. `for g in 0.1 0.25 0.5 1; do build/reforge_refit_bench --gb $g --no-slow
                  | tail -1; done > refit.jsonl`): fast refit time from safetensors and from ONNX
                  external data against weight bytes, with the memcpy of the same bytes
                  -> refit_vs_size.png
  --label TEXT    the machine and date shown in each title

Needs matplotlib (`.venv/bin/pip install -r bench/requirements.txt`).

    .venv/bin/python bench/plot_benchmarks.py --ort ort.json --refit refit.jsonl \\
        --label "AMD EPYC Zen 3, 2 vCPUs, 2026-12-05" [--out docs/img]
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def group_of(r):
    """"model bN": compare_ort's large-suite rows already name the batch in `model`."""
    suffix = " b%s" % r["batch"]
    return r["model"] if r["model"].endswith(suffix) else r["model"] + suffix


def ratio_chart(rows, key, ylabel, title, path):
    """Grouped bars: one group per model and batch, one bar per thread count."""
    groups = []
    for r in rows:
        g = group_of(r)
        if g not in groups:
            groups.append(g)
    threads = sorted({r["threads"] for r in rows})
    width = 0.8 / max(1, len(threads))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(groups) + 2), 4))
    for k, t in enumerate(threads):
        xs, ys = [], []
        for i, g in enumerate(groups):
            for r in rows:
                if group_of(r) == g and r["threads"] == t and r.get(key) is not None:
                    xs.append(i + (k - (len(threads) - 1) / 2) * width)
                    ys.append(r[key])
        bars = ax.bar(xs, ys, width, label="%d thread%s" % (t, "" if t == 1 else "s"))
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def refit_chart(points, title, path):
    points = sorted(points, key=lambda p: p["weight_bytes"])
    gb = [p["weight_bytes"] / 1e9 for p in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("fast_refit_safetensors_ms", "refit from safetensors"),
                       ("fast_refit_onnx_ms", "refit from ONNX external data"),
                       ("memcpy_ms", "memcpy of the same bytes"),
                       ("memcpy_fresh_ms", "memcpy into fresh pages")):
        ys = [p.get(key) for p in points]
        if any(y is None for y in ys):
            continue
        ax.plot(gb, ys, marker="o", label=label, linestyle="--" if key.startswith("memcpy") else "-")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("float32 weights (GB)")
    ax.set_ylabel("ms (best of the run's repeats)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ort", help="bench/compare_ort.py --json output")
    ap.add_argument("--refit", help="reforge_refit_bench JSON lines, one per size")
    ap.add_argument("--label", required=True, help="machine and date, shown in the titles")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "img"))
    a = ap.parse_args()
    if not a.ort and not a.refit:
        ap.error("give --ort, --refit or both")
    os.makedirs(a.out, exist_ok=True)
    written = []
    if a.ort:
        with open(a.ort) as f:
            doc = json.load(f)
        rows = [r for r in doc["rows"] if r.get("ratio") is not None]
        if not rows:
            sys.exit("plot_benchmarks: %s has no rows with both sides timed" % a.ort)
        p = os.path.join(a.out, "ort_latency.png")
        ratio_chart(rows, "ratio", "reforge / ONNX Runtime median latency",
                    "Latency against ONNX Runtime %s (lower is better)\n%s" % (doc.get("onnxruntime", ""), a.label), p)
        written.append(p)
        p = os.path.join(a.out, "ort_memory.png")
        ratio_chart([r for r in rows if r.get("rss_ratio") is not None], "rss_ratio",
                    "reforge / ONNX Runtime peak RSS", "Peak memory against ONNX Runtime (lower is better)\n%s" % a.label,
                    p)
        written.append(p)
    if a.refit:
        points = []
        with open(a.refit) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    points.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit("plot_benchmarks: %s line %d is not JSON (%s)" % (a.refit, n, e))
        if not points:
            sys.exit("plot_benchmarks: %s has no JSON lines" % a.refit)
        p = os.path.join(a.out, "refit_vs_size.png")
        refit_chart(points, "Fast refit time against model size\n%s" % a.label, p)
        written.append(p)
    for p in written:
        print(os.path.relpath(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
