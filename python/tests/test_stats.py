"""Plan.stats(): the runtime's counters, checked from outside. Sequence lengths inside one shape bucket
cost no shape inference and no arena plan; a new bucket costs one of each; `reforge bench`'s JSON
carries the same counters under "stats"; a refit makes a new weight version and the old one is
retired."""

import json
import subprocess

import numpy as np
import pytest

import reforge
from conftest import CLI, ROOT

LLAMA = ROOT / "models" / "llama" / "dynamo" / "A" / "model.onnx"
KEYS = {"runs", "inference_passes", "arena_plans", "shape_buckets", "shape_buckets_evicted", "recordings_made",
        "replays", "recordings_evicted", "recordings_retired", "live_recordings", "eager_runs",
        "last_run_allocations", "live_weight_versions", "weight_allocations",
        "weight_bytes_uploaded"}


def ids(seq):
    return {"input_ids": (np.arange(seq, dtype=np.int64) % 97).reshape(1, seq)}


def test_lengths_inside_a_bucket_cost_no_inference_and_no_plan():
    plan = reforge.build(LLAMA, threads=1)
    assert set(plan.stats()) == KEYS
    plan.run(ids(33))  # bucket 64
    # The first run also shows the arena which kernels return views of their inputs
    # (runtime/arena.h): the second run's plan is made again with that, once.
    plan.run(ids(34))
    first = plan.stats()
    assert first["runs"] == 2 and first["inference_passes"] == 1 and first["arena_plans"] >= 1
    for seq in range(35, 65):  # the same bucket
        plan.run(ids(seq))
    same = plan.stats()
    assert same["runs"] == 32
    assert same["inference_passes"] == first["inference_passes"]
    assert same["arena_plans"] == first["arena_plans"]
    plan.run(ids(65))  # bucket 128
    assert plan.stats()["inference_passes"] == 2
    assert plan.stats()["shape_buckets"] == 2
    assert plan.stats()["live_weight_versions"] == 1


def test_bench_json_carries_the_same_counters(tmp_path):
    if not CLI.exists():
        pytest.skip("the reforge CLI is not built at %s" % CLI)
    np.save(tmp_path / "ids.npy", ids(20)["input_ids"])
    out = subprocess.run([str(CLI), "bench", str(LLAMA), "--input", "input_ids=%s" % (tmp_path / "ids.npy"),
                          "--iterations", "5", "--threads", "1"], check=True, capture_output=True, text=True)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(doc["stats"]) == KEYS
    assert doc["stats"]["runs"] >= 5
    assert doc["stats"]["inference_passes"] == 1  # one input size: one bucket


def test_a_refit_makes_a_new_version_and_retires_the_old(tmp_path):
    onnx_b = ROOT / "models" / "llama" / "dynamo" / "B" / "model.onnx"
    if not onnx_b.exists():
        import pytest

        pytest.skip("no weight set B of the Llama export")
    plan = reforge.build(LLAMA, refit=True, threads=1)
    before = plan.run(ids(9))
    plan.refit(str(onnx_b))
    after = plan.run(ids(9))
    assert not np.array_equal(next(iter(before.values())), next(iter(after.values())))
    assert plan.stats()["live_weight_versions"] == 1
