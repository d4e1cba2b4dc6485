"""run releases the GIL and is safe next to a refit: several Python threads run one plan while
another thread refits it back and forth between two weight sets; every result equals PyTorch's
output for one of the two sets (never a mix of them). Nothing here depends on how threads are
scheduled: the threads wait for each other with conditions and the extension's run gate (a test
hook, python/src/run_gate.h), never for an amount of time."""

import threading

import safetensors.numpy

import reforge
from reforge import _reforge
from conftest import TOLERANCE, hf_checkpoint, hf_inputs, hf_onnx, hf_reference, max_diff


def test_runs_during_refits_see_old_or_new_weights_never_a_mix():
    model = "llama"
    inputs = hf_inputs(model)
    refs = {"A": hf_reference(model, "A"), "B": hf_reference(model, "B")}
    assert max_diff(refs["A"], refs["B"]) > 100 * TOLERANCE
    states = {w: safetensors.numpy.load_file(str(hf_checkpoint(model, w))) for w in "AB"}
    plan = reforge.build(hf_onnx(model, "A"), refit=True, checkpoint=hf_checkpoint(model, "A"))
    refits = 40

    def weights_after(k):  # the plan's weights once refit k (from 1) returned; 0: as built
        return "A" if k % 2 == 0 else "B"

    # Refit k begins with begun = k and ends with done = k. A run that starts at done = k and ends
    # with begun still k overlapped no refit: it must see weights_after(k) exactly ("clean").
    cond = threading.Condition()
    shared = {"begun": 0, "done": 0, "stop": False, "alive": 3}
    clean = set()  # the refits k after which a clean run completed
    mixes, stale, errors, seen = [], [], [], {"A": 0, "B": 0}

    def runner():
        try:
            while True:
                with cond:
                    if shared["stop"]:
                        return
                    lo = shared["done"]
                out = plan.run(inputs)
                matches = [w for w in "AB" if max_diff(out, refs[w]) <= TOLERANCE]
                with cond:
                    if len(matches) != 1:
                        mixes.append({w: max_diff(out, refs[w]) for w in "AB"})
                    else:
                        seen[matches[0]] += 1
                        if shared["begun"] == lo:
                            clean.add(lo)
                            if matches[0] != weights_after(lo):
                                stale.append((lo, matches[0]))
                    cond.notify_all()
        except Exception as e:  # reported by the main thread
            with cond:
                errors.append(repr(e))
        finally:
            with cond:
                shared["alive"] -= 1
                cond.notify_all()

    threads = [threading.Thread(target=runner) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for k in range(1, refits + 1):
            with cond:
                shared["begun"] = k
            plan.refit(states[weights_after(k)])
            with cond:
                shared["done"] = k
                # Each weight set is run: the next refit waits for a clean run of this one.
                cond.wait_for(lambda: k in clean or mixes or shared["alive"] == 0)
                if k not in clean:
                    break
    finally:
        with cond:
            shared["stop"] = True
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    assert not mixes, mixes[:3]
    assert not stale, stale[:3]  # (refit, weights seen) of runs that overlapped no refit
    assert set(range(1, refits + 1)) <= clean, sorted(set(range(1, refits + 1)) - clean)
    assert seen["A"] >= refits // 2 and seen["B"] >= refits // 2, seen


def test_gil_is_released_while_running():
    # The run gate parks this thread's run() inside the section that runs the engine; a second
    # thread, told so by the gate, takes a lock and sets an event (Python bytecode, which needs the
    # GIL) and only then lets the run go on. Had run() kept the GIL, the gate would not park it
    # and would say so (parked False): the test fails instead of hanging.
    plan = reforge.build(hf_onnx("vit", "A"))
    inputs = hf_inputs("vit")
    ref = hf_reference("vit", "A")
    order = []
    lock = threading.Lock()
    other_ran = threading.Event()

    def other():
        parked = _reforge._test_wait_parked()
        with lock:
            order.append("run parked" if parked else "run holds the GIL")
            other_ran.set()
            order.append("other thread ran")
        _reforge._test_unpark()

    _reforge._test_park_next_run()
    t = threading.Thread(target=other)
    t.start()
    try:
        out = plan.run(inputs)
        with lock:
            order.append("run returned")
    finally:
        _reforge._test_unpark()  # disarms the gate if run() failed before reaching it
        t.join()
    assert other_ran.is_set()
    assert order == ["run parked", "other thread ran", "run returned"], order
    assert max_diff(out, ref) <= TOLERANCE
    # Unarmed, the gate lets runs through untouched.
    assert max_diff(plan.run(inputs), ref) <= TOLERANCE
