"""run releases the GIL and is safe next to a refit: several Python threads run one plan while
another thread refits it back and forth between two weight sets; every result equals PyTorch's
output for one of the two sets (never a mix of them)."""

import threading

import safetensors.numpy

import reforge
from conftest import TOLERANCE, hf_checkpoint, hf_inputs, hf_onnx, hf_reference, max_diff


def test_runs_during_refits_see_old_or_new_weights_never_a_mix():
    model = "llama"
    inputs = hf_inputs(model)
    refs = {"A": hf_reference(model, "A"), "B": hf_reference(model, "B")}
    assert max_diff(refs["A"], refs["B"]) > 100 * TOLERANCE
    states = {w: safetensors.numpy.load_file(str(hf_checkpoint(model, w))) for w in "AB"}
    plan = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"))

    done = threading.Event()
    seen = {"A": 0, "B": 0}
    failures = []
    lock = threading.Lock()

    def runner():
        while not done.is_set():
            out = plan.run(inputs)
            matches = [w for w in "AB" if max_diff(out, refs[w]) <= TOLERANCE]
            with lock:
                if len(matches) != 1:
                    failures.append({w: max_diff(out, refs[w]) for w in "AB"})
                else:
                    seen[matches[0]] += 1

    threads = [threading.Thread(target=runner) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(40):
            plan.refit(states["B" if i % 2 == 0 else "A"])
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not failures, failures[:3]
    assert seen["A"] > 0 and seen["B"] > 0, seen


def test_gil_is_released_while_running():
    # A second Python thread records timestamps in a loop while this one runs the plan: a
    # timestamp strictly inside a run() call means that thread executed bytecode during the call,
    # which it cannot while the call holds the GIL.
    import bisect
    import time

    plan = reforge.build(hf_onnx("vit", "A"))
    inputs = hf_inputs("vit")
    plan.run(inputs)  # warm up
    stamps = []
    stop = threading.Event()

    def stamp():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    t = threading.Thread(target=stamp)
    t.start()
    intervals = []
    try:
        for _ in range(20):
            t0 = time.perf_counter()
            plan.run(inputs)
            intervals.append((t0, time.perf_counter()))
    finally:
        stop.set()
        t.join()
    inside = sum(bisect.bisect_left(stamps, b) - bisect.bisect_right(stamps, a) for a, b in intervals)
    assert inside > 0
