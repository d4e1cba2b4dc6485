"""Runs an ONNX model in ONNX Runtime for `reforge run --compare-onnxrt`.

usage: onnxrt_run.py MODEL.onnx FOLDER

FOLDER holds inputs.json ({"NAME": "FILE.npy", ...}, the .npy files beside it) and marked.json
(values of the model to return besides its outputs: names, or ["all"] for every value a node
makes, Constant nodes' aside, as Polygraphy marks them); the outputs are
written to FOLDER as out_<i>.npy, in the model's output order, and their names to outputs.json
(["NAME", ...]). Runs on the CPU execution provider, all graph optimizations on (ORT's default).
Exit status 3 when onnxruntime is not installed, 1 on any other failure (the reason on stderr).
"""

import json
import os
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model, folder = sys.argv[1], sys.argv[2]
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"onnxruntime is not installed in {sys.executable}: {e} "
              f"(pip install onnxruntime, or scripts/setup.sh)", file=sys.stderr)
        return 3
    with open(os.path.join(folder, "inputs.json")) as f:
        files = json.load(f)
    feeds = {name: np.load(os.path.join(folder, file)) for name, file in files.items()}
    marked = []
    if os.path.exists(os.path.join(folder, "marked.json")):
        with open(os.path.join(folder, "marked.json")) as f:
            marked = json.load(f)
    if marked:
        import onnx

        proto = onnx.load(model)
        have = {o.name for o in proto.graph.output}
        for node in proto.graph.node:
            if marked == ["all"] and node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                continue
            for value in node.output:
                if value and value not in have and (marked == ["all"] or value in marked):
                    proto.graph.output.append(onnx.helper.make_empty_tensor_value_info(value))
                    have.add(value)
        model = proto.SerializeToString()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outs = session.run(names, feeds)
    for i, value in enumerate(outs):
        np.save(os.path.join(folder, f"out_{i}.npy"), np.asarray(value))
    with open(os.path.join(folder, "outputs.json"), "w") as f:
        json.dump(names, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
