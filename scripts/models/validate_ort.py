#!/usr/bin/env python3
"""Runs every export of models/manifest.json in ONNX Runtime against its framework reference.

Needs numpy and onnxruntime only (no torch): a check that the exports themselves are right, so
that a reforge failure on them is reforge's. Exits non-zero if any export misses the tolerance.
    python3 scripts/models/validate_ort.py [--models-dir models] [--report out.json]
"""

import argparse
import json
import os
import sys

import numpy as np


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", default=os.path.join(here, "..", "..", "models"))
    ap.add_argument("--report", default="")
    args = ap.parse_args()
    import onnxruntime as ort

    root = args.models_dir
    with open(os.path.join(root, "manifest.json")) as f:
        manifest = json.load(f)
    results = []
    failures = 0
    for e in manifest["exports"]:
        tol = e["tolerance"]["max_abs_diff"]
        try:
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            sess = ort.InferenceSession(os.path.join(root, e["path"]), so,
                                        providers=["CPUExecutionProvider"])
            got_in = [i.name for i in sess.get_inputs()]
            got_out = [o.name for o in sess.get_outputs()]
            if got_in != e["inputs"] or got_out != e["outputs"]:
                raise RuntimeError("names: inputs %s outputs %s" % (got_in, got_out))
            for s in e["input_sets"]:
                feeds = {n: np.load(os.path.join(root, p)) for n, p in s["inputs"].items()}
                outs = sess.run(None, feeds)
                worst = 0.0
                for name, got in zip(e["outputs"], outs):
                    ref = np.load(os.path.join(root, s["reference"][name]))
                    if got.shape != ref.shape:
                        raise RuntimeError("%s %s: shape %s, reference %s" % (s["name"], name,
                                                                           got.shape, ref.shape))
                    worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - ref))))
                ok = worst <= tol
                failures += not ok
                results.append({"path": e["path"], "set": s["name"], "max_abs_diff": worst, "ok": ok})
                print("%-4s %-45s %-6s max_abs_diff %.3g" % ("ok" if ok else "FAIL", e["path"],
                                                             s["name"], worst))
        except Exception as ex:  # report and go on: one broken export must not hide the others
            failures += 1
            results.append({"path": e["path"], "error": str(ex)[:2000], "ok": False})
            print("FAIL %-45s error: %s" % (e["path"], str(ex)[:500]))
    print("onnxruntime %s: %d checks, %d failed" % (ort.__version__, len(results), failures))
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"onnxruntime": ort.__version__, "results": results}, f, indent=1)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
