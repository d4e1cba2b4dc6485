"""A worker process: reads one case (JSON) per line on stdin, runs it, writes one result line.

The driver runs cases in workers so that a crash or a hang of the code under test is a finding
about that case (the worker dies or is killed, the driver starts another) rather than the end of
the run."""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    from .execute import Runner

    runner = Runner(a.cache, a.device)
    out = sys.stdout
    sys.stdout = sys.stderr  # anything the library prints must not corrupt the protocol
    for line in sys.stdin:
        case = json.loads(line)
        t0 = time.monotonic()
        try:
            r = runner.run_case(case)
            res = {"outcome": r.outcome, "detail": r.detail}
        except Exception as e:  # noqa: BLE001 - an oracle bug, reported as such
            res = {"outcome": "ORACLE-ERROR", "detail": "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()[-1500:])}
        res["secs"] = round(time.monotonic() - t0, 3)
        out.write(json.dumps(res) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
