#!/usr/bin/python3
"""Rewrites models/manifest.json from the export.json files under models/ (after unpacking the
dynamo exports, say). Either interpreter works: it needs torch only for the model specs.
    /usr/bin/python3 scripts/models/make_manifest.py [--models-dir models]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-dir", default=common.MODELS_DIR)
    args = ap.parse_args()
    m = common.build_manifest(args.models_dir)
    counts = {}
    for e in m["exports"]:
        counts[e["export"]] = counts.get(e["export"], 0) + 1
    print("manifest: %d exports %s" % (len(m["exports"]), counts))


if __name__ == "__main__":
    main()
