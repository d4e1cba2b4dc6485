#!/usr/bin/env python3
"""reforge vs ONNX Runtime on the same ONNX files, interleaved. Run via compare_ort.sh.

Suites:
  tiny   the models/ exports (models/manifest.json): dynamo and torch113 dynamic exports,
         weights A, first input set; or the exports named on the command line
  large  the benchmark models written by scripts/models/bench_models.py into --models-dir
         (Llama s1/s128, BERT-base, ResNet-50), each at every --batches size
  all    both

Every measurement is its own child process: `reforge bench` (import and build, or plan load,
then warm-up and timed runs) and bench/ort_worker.py (session creation with all graph
optimizations, intra_op_num_threads=N, inter_op_num_threads=1, then the same warm-up and timed
runs). Each child's peak resident memory is read through GNU time (see run_child). For each
model, batch and thread count, every round runs each side once, alternating which side goes
first, so slow drifts of the machine hit both alike; a side's latency is the median over rounds of its
per-round median, its build time the median over rounds, its peak memory the maximum.

With --iterations auto (the default) round 1 is a short probe (--min-iterations timed runs)
and later rounds time enough runs to fill about --target-s seconds per side (up to
--max-iterations), the same count for both sides; the probe's latencies count only where the
later rounds kept its count (slow models), so use at least 2 rounds.

Extra reforge variants, each timed in the same rounds:
  --refit  plans built by `reforge build` without and with --refit; reports refit / baked
  --bf16   `reforge bench --precision bf16` on the ONNX file; reports bf16 / ORT fp32
           (skipped, with a note, when this reforge has no --precision option)
  --fp16   the same with `--precision fp16` (skipped when this reforge's --precision has no
           fp16); reports fp16 / ORT fp32
  --bf16-act  the same with `--precision bf16 --activations bf16` (activations rounded to
           bfloat16 too; skipped when this reforge has no --activations); reports bf16a / ORT fp32
  --profile  `reforge bench --profile` once per case (first thread count): per-op-type share
Accuracy (where the case has a framework reference, i.e. batch 1 of the large suite and every
tiny case): `reforge run` of each variant once, error = max |out - ref| / max |ref| over all
outputs (a norm-wise relative error, well defined where ref has zeros).
"""

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_DIR = os.path.join(ROOT, "models")
LARGE_DIR = os.path.join(ROOT, "build-bench", "models")
WORKER = os.path.join(ROOT, "bench", "ort_worker.py")


# ------------------------------------------------------------------------------------------------
# Cases: one model file, one set of inputs
# ------------------------------------------------------------------------------------------------


def _case(suite, label, root, model, inputs, reference, batch):
    j = lambda p: os.path.join(root, p)  # noqa: E731
    return {"suite": suite, "label": label, "model": j(model),
            "inputs": {n: j(p) for n, p in inputs.items()},
            "reference": {n: j(p) for n, p in reference.items()} if reference else None,
            "batch": batch}


def tiny_cases(paths):
    manifest_path = os.path.join(TINY_DIR, "manifest.json")
    if not os.path.exists(manifest_path):
        sys.exit("compare_ort: %s missing (see scripts/models/README.md)" % manifest_path)
    with open(manifest_path) as f:
        exports = json.load(f)["exports"]
    if paths:
        by_path = {os.path.realpath(os.path.join(TINY_DIR, e["path"])): e for e in exports}
        picked = []
        for p in paths:
            full = os.path.realpath(p if os.path.isabs(p) or os.path.exists(p)
                                    else os.path.join(TINY_DIR, p))
            if full not in by_path:
                sys.exit("compare_ort: %s is not in models/manifest.json" % p)
            picked.append(by_path[full])
    else:
        picked = [e for e in exports if e["weights"] == "A" and (
            e["export"] == "dynamo" or (e["export"].startswith("torch113") and e["dynamic"]))]
    out = []
    for e in picked:
        s = e["input_sets"][0]
        label = e["path"][:-len("/model.onnx")] if e["path"].endswith("/model.onnx") else e["path"]
        batch = next(iter(np.load(os.path.join(TINY_DIR, p), mmap_mode="r").shape[0]
                          for p in s["inputs"].values()))
        out.append(_case("tiny", label, TINY_DIR, e["path"], s["inputs"], s.get("reference"), batch))
    return out


def large_cases(models_dir, batches, only):
    manifest_path = os.path.join(models_dir, "manifest.json")
    if not os.path.exists(manifest_path):
        sys.exit("compare_ort: %s missing; write the models first:\n"
                 "  /usr/bin/python3 scripts/models/bench_models.py --out %s" % (manifest_path, models_dir))
    with open(manifest_path) as f:
        models = json.load(f)["models"]
    out = []
    for e in models:
        if only and e["name"] not in only:
            continue
        for b in batches:
            if str(b) not in e["inputs"]:
                print("note: %s has no batch-%d inputs; skipped" % (e["name"], b), file=sys.stderr)
                continue
            out.append(_case("large", "%s b%d" % (e["name"], b), models_dir, e["path"],
                             e["inputs"][str(b)], e["reference"].get(str(b)), b))
    return out


# ------------------------------------------------------------------------------------------------
# Child processes
# ------------------------------------------------------------------------------------------------


GNU_TIME = "/usr/bin/time"


def run_child(cmd):
    """Runs cmd; returns (returncode, stdout, stderr, peak RSS in KB of that program).

    A child's ru_maxrss (os.wait4) never reads below its parent's RSS at fork time: Linux carries
    the forked address space's high-water mark across exec. So the program is started through
    GNU time, a small process, whose own child reports a clean figure (%M). Without GNU time the
    wait4 figure is used and is a floor of this Python process's RSS (noted once).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(mode="r") as peak:
        wrapped = [GNU_TIME, "-q", "-f", "%M", "-o", peak.name] + cmd if HAVE_TIME else cmd
        p = subprocess.Popen(wrapped, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        rss = usage.ru_maxrss
        if HAVE_TIME:
            lines = [l for l in peak.read().splitlines() if l.strip()]
            rss = int(lines[-1]) if lines and lines[-1].strip().isdigit() else None
        out.seek(0)
        err.seek(0)
        return (p.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                rss)


HAVE_TIME = os.access(GNU_TIME, os.X_OK) and subprocess.run(
    [GNU_TIME, "-q", "-f", "%M", "true"], capture_output=True).returncode == 0


def last_json(rc, stdout, stderr, what):
    lines = [l for l in stdout.strip().splitlines() if l.strip()]
    if rc != 0 or not lines:
        tail = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1][:200]
        raise RuntimeError("%s failed (rc %d): %s" % (what, rc, tail))
    return json.loads(lines[-1])


def input_args(inputs):
    return [a for n, p in inputs.items() for a in ("--input", "%s=%s" % (n, p))]


class Reforge:
    def __init__(self, binary):
        if not os.access(binary, os.X_OK):
            sys.exit("compare_ort: %s not found; build it first (ninja -C build reforge)" % binary)
        self.binary = binary
        helps = {c: subprocess.run([binary, c, "--help"], capture_output=True, text=True).stdout
                 for c in ("bench", "run", "build")}
        self.has_precision = {c: "--precision" in h for c, h in helps.items()}
        self.has_fp16 = {c: "--precision" in h and "fp16" in h for c, h in helps.items()}
        self.has_activations = {c: "--activations" in h for c, h in helps.items()}

    def bench(self, model, extra, inputs, threads, iterations, warmup):
        cmd = [self.binary, "bench", model] + input_args(inputs) + extra + [
            "--threads", str(threads), "--iterations", str(iterations), "--warmup", str(warmup)]
        rc, out, err, rss = run_child(cmd)
        r = last_json(rc, out, err, "reforge bench")
        return {"median_ms": r["median_ms"], "build_ms": r.get("build_ms"), "rss_kb": rss}

    def profile(self, model, inputs, threads, iterations):
        """Per-op-type share of kernel time from `reforge bench --profile`: [(op, nodes, ms, %)]."""
        cmd = [self.binary, "bench", model] + input_args(inputs) + [
            "--threads", str(threads), "--iterations", str(iterations), "--warmup", "1", "--profile"]
        rc, out, err, _ = run_child(cmd)
        last_json(rc, out, err, "reforge bench --profile")
        ops = []
        for line in err.splitlines():
            m = re.match(r"^\s+(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)%$", line)
            if m:
                ops.append({"op": m.group(1), "nodes": int(m.group(2)), "ms": float(m.group(3)),
                            "share": float(m.group(4))})
        return ops

    def build(self, model, plan, extra, threads):
        cmd = [self.binary, "build", model, "-o", plan, "--threads", str(threads)] + extra
        rc, out, err, rss = run_child(cmd)
        if rc != 0:
            raise RuntimeError("reforge build %s failed (rc %d): %s" % (
                " ".join(extra), rc, (err.strip() or out.strip() or "-").splitlines()[-1][:200]))

    def error_vs(self, model, extra, inputs, reference, threads, tmp):
        """max |out - ref| / max |ref| over every output named in reference."""
        d = tempfile.mkdtemp(dir=tmp)
        try:
            cmd = [self.binary, "run", model] + input_args(inputs) + extra + [
                "-o", d, "--threads", str(threads)]
            rc, out, err, _ = run_child(cmd)
            if rc != 0:
                raise RuntimeError("reforge run failed (rc %d): %s" % (
                    rc, (err.strip() or out.strip() or "-").splitlines()[-1][:200]))
            worst = 0.0
            for name, ref_path in reference.items():
                ref = np.load(ref_path).astype(np.float64)
                got = np.load(os.path.join(d, name + ".npy")).astype(np.float64)
                if got.shape != ref.shape:
                    raise RuntimeError("output %s has shape %s, reference %s" % (name, got.shape, ref.shape))
                worst = max(worst, float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)))
            return worst
        finally:
            shutil.rmtree(d, ignore_errors=True)


def run_ort(python, model, inputs, threads, iterations, warmup):
    cmd = [python, WORKER, model] + input_args(inputs) + [
        "--threads", str(threads), "--iterations", str(iterations), "--warmup", str(warmup)]
    rc, out, err, rss = run_child(cmd)
    r = last_json(rc, out, err, "ort_worker")
    return {"median_ms": r["median_ms"], "build_ms": r["create_ms"], "rss_kb": rss,
            "rss_before_session_kb": r["rss_before_session_kb"]}


# ------------------------------------------------------------------------------------------------
# Measurement
# ------------------------------------------------------------------------------------------------


def short(ex):
    s = str(ex).strip()
    return s.splitlines()[-1][:200] if s else repr(ex)


def measure(case, threads, sides, args):
    """sides: name -> fn(iterations, warmup) -> dict. Returns name -> summary."""
    samples = {s: [] for s in sides}
    errors = {}
    iterations = args.iterations if args.iterations != "auto" else args.min_iterations
    warmup = args.warmup
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(list(sides)))
        for s in order:
            if s in errors:
                continue
            try:
                samples[s].append(dict(sides[s](iterations, warmup), iterations=iterations))
            except Exception as ex:
                errors[s] = short(ex)
        if args.iterations == "auto" and r == 0:
            slowest = max([x[-1]["median_ms"] for x in samples.values() if x] or [1.0])
            iterations = int(min(args.max_iterations,
                                 max(args.min_iterations, round(args.target_s * 1e3 / slowest))))
            warmup = max(1, min(5, iterations // 10))
    out = {}
    for s in sides:
        xs = samples[s]
        out[s] = {"error": errors.get(s, "")}
        if xs:
            # Latency from the rounds timed with the final iteration count (auto: the probe
            # round counts only when the later rounds kept its count); build time and memory
            # from every round.
            timed = [x for x in xs if x["iterations"] == xs[-1]["iterations"]]
            out[s].update({"median_ms": statistics.median(x["median_ms"] for x in timed),
                           "round_ms": [x["median_ms"] for x in xs],
                           "iterations": [x["iterations"] for x in xs],
                           "build_ms": statistics.median(x["build_ms"] for x in xs
                                                         if x["build_ms"] is not None)
                           if any(x["build_ms"] is not None for x in xs) else None,
                           "rss_kb": max((x["rss_kb"] for x in xs if x["rss_kb"]), default=None)})
            if "rss_before_session_kb" in xs[0]:
                out[s]["rss_before_session_kb"] = max(x["rss_before_session_kb"] for x in xs)
    return out


def ratio(a, b):
    return a / b if a is not None and b else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="tiny suite: exports (paths under models/)")
    ap.add_argument("--suite", choices=["tiny", "large", "all"], default="tiny")
    ap.add_argument("--models-dir", default=LARGE_DIR, help="large suite folder (default %(default)s)")
    ap.add_argument("--only", default="", help="large suite: comma-separated model names")
    ap.add_argument("--batches", default="1,8", help="large suite batch sizes")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", default="auto", help="timed runs per side and round, or auto")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up runs (auto: round 1 only)")
    ap.add_argument("--target-s", type=float, default=2.0, help="auto: timed seconds per side and round")
    ap.add_argument("--min-iterations", type=int, default=3)
    ap.add_argument("--max-iterations", type=int, default=100)
    ap.add_argument("--refit", action="store_true", help="also time baked and --refit plans")
    ap.add_argument("--bf16", action="store_true", help="also time reforge --precision bf16")
    ap.add_argument("--fp16", action="store_true", help="also time reforge --precision fp16")
    ap.add_argument("--bf16-act", action="store_true",
                    help="also time reforge --precision bf16 --activations bf16")
    ap.add_argument("--profile", action="store_true",
                    help="also record reforge's per-op-type time (at the first thread count)")
    ap.add_argument("--no-accuracy", action="store_true", help="skip the reforge run accuracy check")
    ap.add_argument("--work-dir", default=os.path.join(ROOT, "build-bench", "work"),
                    help="plans and outputs (removed afterwards)")
    ap.add_argument("--reforge", default=os.path.join(ROOT, "build", "reforge"))
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()
    if args.models and args.suite == "large":
        ap.error("model paths select tiny-suite exports; for the large suite use --only NAME,...")
    if args.iterations != "auto":
        try:
            args.iterations = int(args.iterations)
        except ValueError:
            ap.error("--iterations expects a number or auto, got %r" % args.iterations)
    import onnxruntime as ort

    reforge = Reforge(args.reforge)
    cases = []
    if args.suite in ("tiny", "all"):
        cases += tiny_cases(args.models)
    if args.suite in ("large", "all"):
        cases += large_cases(args.models_dir, [int(b) for b in args.batches.split(",") if b],
                             set(n for n in args.only.split(",") if n))
    threads = [int(t) for t in args.threads.split(",") if t]
    bf16 = args.bf16 and reforge.has_precision["bench"]
    if args.bf16 and not bf16:
        print("note: %s bench has no --precision option: bf16 skipped" % args.reforge, file=sys.stderr)
    fp16 = args.fp16 and reforge.has_fp16["bench"]
    if args.fp16 and not fp16:
        print("note: %s bench has no --precision fp16: fp16 skipped" % args.reforge, file=sys.stderr)
    bf16a = args.bf16_act and reforge.has_activations["bench"]
    if args.bf16_act and not bf16a:
        print("note: %s bench has no --activations: bf16a skipped" % args.reforge, file=sys.stderr)
    if args.iterations == "auto" and args.rounds < 2:
        print("note: --iterations auto with 1 round times only the %d-run probe" % args.min_iterations,
              file=sys.stderr)
    print("onnxruntime %s, reforge %s, %d cases, threads %s, %d rounds, iterations %s" % (
        ort.__version__, args.reforge, len(cases), threads, args.rounds, args.iterations), file=sys.stderr)
    load0, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load0 > 0.5 * cores:
        print("warning: load average %.1f on %d cores: other work is running; timings (multi-thread "
              "ones especially) will be noisy" % (load0, cores), file=sys.stderr)
    if not HAVE_TIME:
        print("note: no GNU time at %s: peak RSS figures are floored at this script's own RSS "
              "(%d MB)" % (GNU_TIME, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024),
              file=sys.stderr)
    os.makedirs(args.work_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=args.work_dir)
    rows = []
    try:
        by_model = {}
        for c in cases:
            by_model.setdefault(c["model"], []).append(c)
        for model, model_cases in by_model.items():
            plans, plan_error = {}, ""
            if args.refit:
                try:
                    for kind, extra in (("baked", []), ("refit", ["--refit"])):
                        plans[kind] = os.path.join(tmp, kind + ".plan")
                        reforge.build(model, plans[kind], extra, max(threads))
                except Exception as ex:
                    plan_error, plans = short(ex), {}
            for c in model_cases:
                variants = {"fp32": (model, [])}
                variants.update({k: (p, []) for k, p in plans.items()})
                if bf16:
                    variants["bf16"] = (model, ["--precision", "bf16"])
                if fp16:
                    variants["fp16"] = (model, ["--precision", "fp16"])
                if bf16a:
                    variants["bf16a"] = (model, ["--precision", "bf16", "--activations", "bf16"])
                for n in threads:
                    sides = {"ort": lambda it, wu, c=c, n=n: run_ort(
                        sys.executable, c["model"], c["inputs"], n, it, wu)}
                    for v, (path, extra) in variants.items():
                        sides[v] = (lambda it, wu, c=c, n=n, path=path, extra=extra: reforge.bench(
                            path, extra, c["inputs"], n, it, wu))
                    res = measure(c, n, sides, args)
                    if plan_error:
                        res["baked"] = res["refit"] = {"error": plan_error}
                    if c["reference"] and not args.no_accuracy:
                        for v, (path, extra) in variants.items():
                            if v == "bf16" and not reforge.has_precision["run"]:
                                continue
                            if v == "fp16" and not reforge.has_fp16["run"]:
                                continue
                            if v == "bf16a" and not reforge.has_activations["run"]:
                                continue
                            try:
                                res[v]["rel_error"] = reforge.error_vs(path, extra, c["inputs"],
                                                                       c["reference"], n, tmp)
                            except Exception as ex:
                                res[v]["rel_error_failed"] = short(ex)
                    row = {"suite": c["suite"], "model": c["label"], "batch": c["batch"], "threads": n,
                           "sides": res}
                    ort_ms = res["ort"].get("median_ms")
                    row["ratio"] = ratio(res["fp32"].get("median_ms"), ort_ms)
                    if "refit" in res:
                        row["refit_over_baked"] = ratio(res["refit"].get("median_ms"),
                                                        res["baked"].get("median_ms"))
                    for h in ("bf16", "bf16a", "fp16"):
                        if h in res:
                            row[h + "_over_ort"] = ratio(res[h].get("median_ms"), ort_ms)
                    row["rss_ratio"] = ratio(res["fp32"].get("rss_kb"), res["ort"].get("rss_kb"))
                    if args.profile and n == threads[0]:
                        try:
                            row["profile"] = reforge.profile(c["model"], c["inputs"], n, args.min_iterations)
                        except Exception as ex:
                            row["profile_failed"] = short(ex)
                    rows.append(row)
                    print("  %s t=%d done" % (c["label"], n), file=sys.stderr, flush=True)
            for p in plans.values():
                if os.path.exists(p):
                    os.remove(p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"onnxruntime": ort.__version__, "reforge": args.reforge, "rounds": args.rounds,
                       "iterations": args.iterations, "target_s": args.target_s,
                       "load_average": [load0, os.getloadavg()[0]], "cores": cores,
                       "rows": rows}, f, indent=1)


def print_table(rows):
    if not rows:
        print("no results")
        return
    f = lambda v, fmt: (fmt % v) if v is not None else "-"  # noqa: E731
    extra_refit = any("refit_over_baked" in r for r in rows)
    halves = [h for h in ("bf16", "bf16a", "fp16") if any(h + "_over_ort" in r for r in rows)]
    head = ["model", "thr", "ORT ms", "reforge ms", "r/ORT"]
    if extra_refit:
        head += ["baked ms", "refit ms", "refit/baked"]
    for h in halves:
        head += ["%s ms" % h, "%s/ORT" % h, "%s err" % h]
    head += ["fp32 err", "RSS MB r/ORT", "build ms r/ORT"]
    table = [head]
    for r in rows:
        s = r["sides"]
        g = lambda v, k: s.get(v, {}).get(k)  # noqa: E731
        mb = lambda v: f(g(v, "rss_kb") / 1024.0 if g(v, "rss_kb") else None, "%.0f")  # noqa: E731
        line = [r["model"], str(r["threads"]), f(g("ort", "median_ms"), "%.3f"),
                f(g("fp32", "median_ms"), "%.3f"), f(r["ratio"], "%.2f")]
        if extra_refit:
            line += [f(g("baked", "median_ms"), "%.3f"), f(g("refit", "median_ms"), "%.3f"),
                     f(r.get("refit_over_baked"), "%.3f")]
        for h in halves:
            line += [f(g(h, "median_ms"), "%.3f"), f(r.get(h + "_over_ort"), "%.2f"),
                     f(g(h, "rel_error"), "%.1e")]
        line += [f(g("fp32", "rel_error"), "%.1e"), "%s / %s" % (mb("fp32"), mb("ort")),
                 "%s / %s" % (f(g("fp32", "build_ms"), "%.0f"), f(g("ort", "build_ms"), "%.0f"))]
        table.append(line)
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    for i, t in enumerate(table):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(t, widths))))
    for r in rows:
        if r.get("profile"):
            top = ", ".join("%s %.0f%%" % (o["op"], o["share"]) for o in r["profile"][:5])
            print("  profile %s t=%d: %s" % (r["model"], r["threads"], top))
        if r.get("profile_failed"):
            print("  profile %s t=%d failed: %s" % (r["model"], r["threads"], r["profile_failed"]))
        for side, v in r["sides"].items():
            for k in ("error", "rel_error_failed"):
                if v.get(k):
                    print("  %s t=%d %s: %s" % (r["model"], r["threads"], side, v[k]))


if __name__ == "__main__":
    main()
