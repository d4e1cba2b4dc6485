"""The oracle's driver: draws cases from a seed, runs them in worker processes, counts outcomes per
generator, shrinks and saves every new violation, and re-runs the saved regression cases.

    python -m refit_oracle --cases N --seed S [--device cuda] [--jobs J] [--time-limit SECONDS]
    python -m refit_oracle --case '<json>'
    python -m refit_oracle --self-test

Exit status: 0 when no case violates the invariant, 1 otherwise (2: the oracle itself failed or
cannot run here; 3: no violation, but the time limit stopped the run before every case ran).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from typing import Dict, List, Optional, Tuple

from . import catalog, gen

HERE = os.path.dirname(os.path.abspath(__file__))
REGRESSIONS = os.path.join(HERE, "regressions")
PY = sys.executable
CASE_TIMEOUT = 300


class Worker:
    def __init__(self, cache: str, device: str):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + env.get("PYTHONPATH", "")
        self.p = subprocess.Popen(
            [PY, "-m", "refit_oracle.worker", "--cache", cache, "--device", device],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.case: Optional[dict] = None
        self.started = 0.0

    def send(self, case: dict) -> None:
        self.case, self.started = case, time.monotonic()
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(case) + "\n")
        self.p.stdin.flush()

    def kill(self) -> None:
        self.p.kill()
        self.p.wait()


def run_cases(cases: List[dict], jobs: int, cache: str, device: str, progress: bool = False, deadline: Optional[float] = None) -> List[Optional[dict]]:
    """Each case's result ({"outcome", "detail", "secs"}), in order. A worker that dies takes its
    case with it as a crash; one past CASE_TIMEOUT is killed, the case a hang. Past `deadline`
    (time.monotonic()) no case is started; those not started have no result (None)."""
    results: List[Optional[dict]] = [None] * len(cases)
    todo = list(range(len(cases)))[::-1]
    sel = selectors.DefaultSelector()
    workers: List[Worker] = []
    index: Dict[int, int] = {}  # id(worker) -> case index

    def start() -> Worker:
        w = Worker(cache, device)
        sel.register(w.p.stdout, selectors.EVENT_READ, w)  # type: ignore[arg-type]
        workers.append(w)
        return w

    def feed(w: Worker) -> None:
        if todo and deadline is not None and time.monotonic() > deadline:
            todo.clear()
        if todo:
            i = todo.pop()
            index[id(w)] = i
            w.send(cases[i])
        else:
            w.case = None

    for _ in range(max(1, min(jobs, len(cases)))):
        feed(start())
    done = 0
    while any(w.case is not None for w in workers):
        for key, _ in sel.select(timeout=5):
            w: Worker = key.data
            line = w.p.stdout.readline()  # type: ignore[union-attr]
            i = index[id(w)]
            if line:
                results[i] = json.loads(line)
                feed(w)
            else:
                rc = w.p.wait()
                results[i] = {"outcome": "VIOLATION:crash", "detail": "the worker died (exit %d) on this case" % rc, "secs": 0}
                sel.unregister(w.p.stdout)  # type: ignore[arg-type]
                workers.remove(w)
                nw = start()
                feed(nw)
            done += 1
            if progress and done % 50 == 0:
                print("  %d/%d cases" % (done, len(cases)), file=sys.stderr, flush=True)
        now = time.monotonic()
        for w in list(workers):
            if w.case is not None and now - w.started > CASE_TIMEOUT:
                i = index[id(w)]
                results[i] = {"outcome": "VIOLATION:hang", "detail": "no answer in %d s" % CASE_TIMEOUT, "secs": CASE_TIMEOUT}
                sel.unregister(w.p.stdout)  # type: ignore[arg-type]
                w.kill()
                workers.remove(w)
                feed(start())
                done += 1
    for w in workers:
        w.p.stdin.close()  # type: ignore[union-attr]
        w.p.wait()
    return results  # type: ignore[return-value]


# ---- shrinking ----


def _variants(case: dict, models: Dict[str, catalog.Model]) -> List[dict]:
    """Simpler versions of a case, simplest change first."""
    out = []

    def v(**change) -> None:
        c = json.loads(json.dumps(case))
        for where, fn in change.items():
            fn(c)
        if c != case:
            out.append(c)

    b, s, p = case["build"], case["source"], case["path"]
    if s["k"] != "A":
        v(x=lambda c: c.update(source={"k": "A"}, path={"via": "py", "mode": "fast"}))
    for key in ("literals", "bind", "strip", "block"):
        if key in b:
            v(x=lambda c, k=key: c["build"].pop(k))
    if b.get("precision", "fp32") != "fp32":
        v(x=lambda c: (c["build"].pop("precision"), c["build"].pop("block", None)))
    if "ckpt" in b and not s["k"].startswith(("ckpt", "dict-ckpt")):
        v(x=lambda c: (c["build"].pop("ckpt"), c["build"].pop("ckpt_t", None)))
    if b.get("mode") in ("identical", "individual", "baked"):
        v(x=lambda c: (c["build"].update(mode="refit"), c["build"].pop("pat", None), c["build"].pop("patterns", None)))
    if p.get("via") == "cli":
        v(x=lambda c: c["path"].update(via="py", mode=c["path"].get("mode", "fast")) or c["path"].pop("out", None))
    if p.get("mode") in ("slow", "verify"):
        v(x=lambda c: c["path"].update(mode="fast"))
    if p.get("out") is False:
        v(x=lambda c: c["path"].update(out=True))
    if s.get("mut") not in (None, "none"):
        v(x=lambda c: c["source"].update(mut="none"))
    for key in ("t", "e", "i"):
        if s.get(key):
            v(x=lambda c, k=key: c["source"].update({k: 0}))
    if s.get("d") not in (None, 1.0):
        v(x=lambda c: c["source"].update(d=1.0))
    cur = models[case["model"]]
    for m in sorted(models.values(), key=lambda m: m.size):
        if m.size >= cur.size or len(out) > 40:
            break
        if bool(m.b) >= bool(cur.b) and bool(m.ckpt_b) >= bool(cur.ckpt_b) and bool(m.others) >= bool(cur.others):
            v(x=lambda c, mid=m.id: c.update(model=mid))
    return out


def shrink(case: dict, outcome: str, cache: str, device: str, models, budget: int = 60) -> Tuple[dict, dict]:
    """The smallest variant that still fails the same way (greedy, first simplification that holds)."""
    best, best_res = case, None
    tries = 0
    changed = True
    while changed and tries < budget:
        changed = False
        cands = _variants(best, models)
        for c in cands:
            tries += 1
            r = run_cases([c], 1, cache, device)[0]
            if r["outcome"] == outcome:
                best, best_res, changed = c, r, True
                break
            if tries >= budget:
                break
    if best_res is None:
        best_res = run_cases([best], 1, cache, device)[0]
    return best, best_res


def signature(case: dict, outcome: str) -> str:
    b, s, p = case["build"], case["source"], case["path"]
    if outcome == "VIOLATION:build-accepted":  # the source and the path play no part
        return "|".join(str(x) for x in (outcome, b.get("mode"), b.get("ckpt", ""), b.get("pat", "")))
    return "|".join(
        str(x)
        for x in (outcome, s["k"], s.get("mut", ""), b.get("mode"), b.get("ckpt", ""), bool(b.get("strip")), b.get("precision", "fp32"), p.get("via"), p.get("mode", ""), case["model"].split("/")[0])
    )


def load_regressions() -> List[dict]:
    out = []
    for f in sorted(glob.glob(os.path.join(REGRESSIONS, "*.json"))):
        with open(f) as fh:
            j = json.load(fh)
        j["file"] = os.path.relpath(f, os.getcwd())
        out.append(j)
    return out


def save_regression(case: dict, result: dict) -> str:
    os.makedirs(REGRESSIONS, exist_ok=True)
    kind = result["outcome"].split(":", 1)[-1]
    base = "%s-%s-%s" % (kind, case["source"]["k"], case["model"].replace("/", "_"))
    n = 0
    while os.path.exists(os.path.join(REGRESSIONS, "%s-%d.json" % (base, n))):
        n += 1
    path = os.path.join(REGRESSIONS, "%s-%d.json" % (base, n))
    doc = {
        "description": "%s: %s" % (result["outcome"], result["detail"].splitlines()[0][:240] if result["detail"] else ""),
        "signature": signature(case, result["outcome"]),
        "case": case,
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    return path


def table(rows: Dict[str, Counter], title: str) -> str:
    outcomes = sorted({o for c in rows.values() for o in c})
    lines = [title, "| generator | cases | " + " | ".join(outcomes) + " |", "| --- | ---: | " + " | ".join("---:" for _ in outcomes) + " |"]
    total: Counter = Counter()
    for g in sorted(rows):
        total.update(rows[g])
        lines.append("| %s | %d | %s |" % (g, sum(rows[g].values()), " | ".join(str(rows[g][o]) for o in outcomes)))
    lines.append("| **all** | %d | %s |" % (sum(total.values()), " | ".join(str(total[o]) for o in outcomes)))
    return "\n".join(lines)


def device_check(device: str, models: Dict[str, catalog.Model]) -> Optional[str]:
    """Why no case can run here, or None. Checked once up front: otherwise every worker would die
    on its first case (counted as crashes) or every build would be refused (counted as cases)."""
    if device not in ("cpu", "cuda"):
        return "unknown device %r (cpu or cuda)" % device
    try:
        import reforge
    except ImportError as e:
        return "%s cannot import the reforge package (%s): run scripts/setup.sh, or name the interpreter and build with REFORGE_PYTHON and REFORGE_BUILD_DIR" % (PY, e)
    from .execute import CLI

    if not os.access(CLI, os.X_OK):
        return "no reforge CLI at %s: build it, or name the build folder with REFORGE_BUILD_DIR" % CLI
    if device == "cpu":
        return None
    if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0:
        return "--device cuda needs an NVIDIA GPU and its driver (nvidia-smi finds none on this machine)"
    # a package built without the CUDA backend, or a GPU it cannot use, fails every build alike
    # (the quantized models have nodes without a CUDA kernel: the cases build them with host fallback)
    smallest = min((m for m in models.values() if not m.id.startswith("quant/")), key=lambda m: m.size)
    try:
        reforge.build(smallest.a, refit=True, device="cuda", threads=1)
    except reforge.Error as e:
        return "--device cuda: a build of %s for the GPU fails here: %s" % (smallest.id, str(e).splitlines()[0])
    return None


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/oracle.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--time-limit", type=float, help="start no case after this many seconds; the counts are of the cases run (exit 3 if some did not)")
    ap.add_argument("--case", help="run one case (its JSON) and print the result")
    ap.add_argument("--no-regressions", action="store_true", help="skip the saved regression cases")
    ap.add_argument("--no-shrink", action="store_true", help="report violations without shrinking or saving them")
    ap.add_argument("--cache", help="folder for built plans and made sources (default: a temporary one)")
    ap.add_argument("--self-test", action="store_true", help="run the oracle's own tests (pytest)")
    ap.add_argument("--list", action="store_true", help="print each case's JSON and result")
    a = ap.parse_args(argv)
    if a.self_test:
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return subprocess.call([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join(HERE, "test_oracle.py")], env=env)
    for name, v in (("--cases", a.cases), ("--jobs", a.jobs)):
        if v < 0 or (name == "--jobs" and v < 1):
            print("oracle: error: %s must be %s, got %d" % (name, "at least 1" if name == "--jobs" else "0 or more", v), file=sys.stderr)
            return 2
    if a.time_limit is not None and a.time_limit <= 0:
        print("oracle: error: --time-limit must be more than 0 seconds, got %g" % a.time_limit, file=sys.stderr)
        return 2
    models = catalog.load()
    err = device_check(a.device, models)
    if err:
        print("oracle: error: " + err, file=sys.stderr)
        return 2
    cache = a.cache or tempfile.mkdtemp(prefix="refit-oracle-")
    os.makedirs(cache, exist_ok=True)
    try:
        if a.case:
            case = json.loads(a.case)
            case.setdefault("seed", 0)
            r = run_cases([case], 1, cache, a.device)[0]
            print(json.dumps({"case": case, **r}))
            return 1 if r["outcome"].startswith("VIOLATION") or r["outcome"] == "ORACLE-ERROR" else 0
        regs = [] if a.no_regressions else load_regressions()
        rng = random.Random(a.seed)
        drawn = [gen.draw(rng.getrandbits(48), models) for _ in range(a.cases)]
        t0 = time.monotonic()
        deadline = t0 + a.time_limit if a.time_limit is not None else None
        results = run_cases([r["case"] for r in regs] + drawn, a.jobs, cache, a.device, progress=True, deadline=deadline)
        secs = time.monotonic() - t0
        status = 0
        unrun = sum(r is None for r in results)
        if unrun:
            # cases start in order (the regression cases first), so those run are a prefix
            print("stopped at the time limit (%g s): %d of %d cases not run" % (a.time_limit, unrun, len(results)))
            status = 3
            ran = len(results) - unrun
            regs, drawn, results = regs[:ran], drawn[: max(0, ran - len(regs))], results[:ran]
        reg_res, res = results[: len(regs)], results[len(regs) :]
        if regs:
            still = [(g, r) for g, r in zip(regs, reg_res) if r["outcome"].startswith("VIOLATION")]
            print("regression cases: %d, still violating: %d" % (len(regs), len(still)))
            for g, r in still:
                print("  %s: %s" % (g["file"], r["outcome"]))
            if still:
                status = 1
        rows: Dict[str, Counter] = defaultdict(Counter)
        for c, r in zip(drawn, res):
            rows[gen.generator(c)][r["outcome"]] += 1
        print(table(rows, "cases: %d (seed %d, %s, %d jobs, %.0f s)" % (len(drawn), a.seed, a.device, a.jobs, secs)))
        errors = [(c, r) for c, r in zip(drawn, res) if r["outcome"] == "ORACLE-ERROR"]
        for c, r in errors[:5]:
            print("ORACLE-ERROR %s\n%s" % (json.dumps(c), r["detail"]), file=sys.stderr)
        if errors:
            status = 2
        bad = [(c, r) for c, r in zip(drawn, res) if r["outcome"].startswith("VIOLATION")]
        if a.list:
            for c, r in zip(drawn, res):
                print(json.dumps({"case": c, **r}))
        if bad:
            status = 1 if status in (0, 3) else status
            known = {g.get("signature") for g in regs}
            seen = set()
            print("violations: %d" % len(bad))
            for c, r in bad:
                sig = signature(c, r["outcome"])
                if sig in seen or sig in known:
                    continue
                seen.add(sig)
                print("- %s %s\n  %s" % (r["outcome"], json.dumps(c), r["detail"][:400]))
                if a.no_shrink:
                    continue
                if deadline is not None and time.monotonic() > deadline:
                    print("  not shrunk: past the time limit")
                    continue
                small, sr = shrink(c, r["outcome"], cache, a.device, models)
                if signature(small, sr["outcome"]) in known:
                    print("  shrinks to a saved case")
                    continue
                if not sr["outcome"].startswith("VIOLATION"):
                    print("  did not reproduce on its own (%s): not saved" % sr["outcome"])
                    continue
                known.add(signature(small, sr["outcome"]))
                print("  shrunk: %s\n  saved: %s" % (json.dumps(small), os.path.relpath(save_regression(small, sr))))
        return status
    finally:
        if not a.cache:
            shutil.rmtree(cache, ignore_errors=True)
