"""Build progress from Python: the build's steps reach the callback in order, counted steps end at
their total, and an exception the callback raises stops the build and reaches the caller."""

import numpy as np
import pytest

import reforge
from conftest import hf_inputs, hf_onnx


def test_build_reports_its_steps_in_order():
    events = []
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True, progress=lambda *e: events.append(e))
    steps = []
    for step, _, _, _ in events:
        if not steps or steps[-1] != step:
            steps.append(step)
    assert steps[0] == "shape inference"
    assert steps[-3:] == ["verifying recipes", "hashing weights", "placing nodes"]
    assert all(s.startswith("pass ") for s in steps[1:-3]) and len(steps) > 4
    assert len(set(steps)) == len(steps)
    hashed = [e for e in events if e[0] == "hashing weights"]
    assert hashed[0][1] == 0
    assert hashed[-1][1] == hashed[-1][2] > 0 and hashed[-1][3] == "bytes"
    assert all(a[1] < b[1] for a, b in zip(hashed, hashed[1:]))
    verified = [e for e in events if e[0] == "verifying recipes"]
    assert verified[-1][1] == verified[-1][2] == len(plan.inspect()["weights"])
    assert verified[-1][3] == "weights"


def test_an_exception_in_the_callback_stops_the_build():
    class Stop(Exception):
        pass

    def stop_at_the_first_pass(step, done, total, unit):
        if step.startswith("pass "):
            raise Stop(step)

    with pytest.raises(Stop) as e:
        reforge.build(hf_onnx("gpt2", "A"), progress=stop_at_the_first_pass)
    assert str(e.value).startswith("pass ")


def test_refit_reports_reading_validation_and_replay():
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True)
    events = []
    report = plan.refit(hf_onnx("gpt2", "B"), progress=lambda *e: events.append(e))
    steps = []
    for step, _, _, _ in events:
        if not steps or steps[-1] != step:
            steps.append(step)
    assert steps == ["importing the model", "validating sources", "replaying recipes"]
    replayed = [e for e in events if e[0] == "replaying recipes"]
    assert replayed[0][1] == 0
    assert replayed[-1][1] == replayed[-1][2] == report["bytes_out"] > 0
    assert all(e[3] == "bytes" for e in replayed)


def test_an_exception_in_the_refit_callback_leaves_the_plan_unchanged():
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True)
    ids = hf_inputs("gpt2")

    def outputs():
        return [np.array(v, copy=True) for v in plan.run(ids).values()]

    before = outputs()

    def stop_in_the_replay(step, done, total, unit):
        if step == "replaying recipes" and done > 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        plan.refit(hf_onnx("gpt2", "B"), progress=stop_in_the_replay)
    after = outputs()
    assert len(after) == len(before) > 0
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    # The same refit without the interruption does change the outputs.
    plan.refit(hf_onnx("gpt2", "B"))
    assert not all(np.array_equal(a, b) for a, b in zip(before, outputs()))


def test_save_reports_writing_the_files_bytes_and_a_stop_leaves_no_file(tmp_path):
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=True)
    events = []
    path = tmp_path / "gpt2.plan"
    plan.save(path, progress=lambda *e: events.append(e))
    steps = []
    for step, _, _, _ in events:
        if not steps or steps[-1] != step:
            steps.append(step)
    assert steps == ["encoding the plan", "writing the plan", "syncing to disk"]
    written = [e for e in events if e[0] == "writing the plan" and e[2] > 0]
    assert written[0][1] == 0 and written[-1][1] == written[-1][2] == path.stat().st_size
    assert all(e[3] == "bytes" for e in written)

    def stop_while_writing(step, done, total, unit):
        if step == "writing the plan" and done > 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        plan.save(tmp_path / "other.plan", progress=stop_while_writing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt2.plan"]
