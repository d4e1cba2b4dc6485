"""A real Hugging Face Llama decode step (models/hf/llama_decode) decoded greedily from Python through
plan.sequence(): the KV caches live in the engine, updated in place, and the tokens equal PyTorch's
(model.generate after load_state_dict of each checkpoint), before and after a refit to B; after
the first decode step no run allocates a tensor. Also what a sequence refuses."""

import numpy as np
import pytest

import reforge
from conftest import HF

DECODE = HF / "llama_decode"


def greedy(plan, seq, weights):
    ref = DECODE / "reference" / weights
    ids = np.load(ref / "prompt_ids.npy")
    want_tokens = np.load(ref / "tokens.npy")
    want_logits = np.load(ref / "step_logits.npy")
    position = 0
    allocations = []
    for step in range(len(want_tokens)):
        pos = np.arange(position, position + ids.shape[1], dtype=np.int64).reshape(1, -1)
        out = seq.run({"input_ids": ids, "position_ids": pos}, copy=False)
        allocations.append(plan.stats()["last_run_allocations"])
        position += ids.shape[1]
        assert seq.length == position
        last = out["logits"][0, -1]
        assert np.abs(last - want_logits[step]).max() <= 1e-4, (weights, step)
        token = int(np.argmax(last))
        assert token == want_tokens[step], (weights, step)
        ids = np.array([[token]], dtype=np.int64)
    assert allocations[2:] == [0] * (len(allocations) - 2), allocations


def test_greedy_decode_in_a_sequence_matches_pytorch():
    plan = reforge.build(DECODE / "A" / "model.onnx", refit=True, checkpoint=DECODE / "checkpoint_A.safetensors")
    seq = plan.sequence(max_length=32)
    assert seq.pairs == {"past.%d.%s" % (i, kv): "present.%d.%s" % (i, kv) for i in range(2) for kv in ("key", "value")}
    greedy(plan, seq, "A")
    assert seq.value("past.0.key").shape == (1, 2, 18, 16)  # the prompt of 7, then 11 tokens fed back
    plan.refit(DECODE / "checkpoint_B.safetensors")
    seq.reset()
    assert seq.length == 0
    greedy(plan, seq, "B")


def test_prompt_step_with_empty_past_runs_without_a_sequence():
    # The stateless form of the same step: the caller gives the (empty) past.
    plan = reforge.build(DECODE / "A" / "model.onnx")
    ids = np.load(DECODE / "reference" / "A" / "prompt_ids.npy")
    pos = np.arange(ids.shape[1], dtype=np.int64).reshape(1, -1)
    feed = {"input_ids": ids, "position_ids": pos}
    feed.update({"past.%d.%s" % (i, kv): np.zeros((1, 2, 0, 16), np.float32) for i in range(2) for kv in ("key", "value")})
    out = plan.run(feed)
    want = np.load(DECODE / "reference" / "A" / "step_logits.npy")[0]
    assert np.abs(out["logits"][0, -1] - want).max() <= 1e-4
    assert out["present.0.key"].shape == (1, 2, 7, 16)


def test_sequence_refusals():
    plan = reforge.build(DECODE / "A" / "model.onnx")
    with pytest.raises(reforge.Error, match="max_length must be > 0"):
        plan.sequence()
    with pytest.raises(reforge.Error, match="'nope' is not a graph input"):
        plan.sequence(max_length=8, pairs={"nope": "present.0.key"})
    seq = plan.sequence(max_length=8)
    ids = np.zeros((1, 9), dtype=np.int64)
    pos = np.arange(9, dtype=np.int64).reshape(1, -1)
    with pytest.raises(reforge.Error, match="max_length 8"):
        seq.run({"input_ids": ids, "position_ids": pos})
    assert not seq.needs_reset and seq.length == 0
    past = np.zeros((1, 2, 0, 16), dtype=np.float32)  # numpy's strides of an empty array are zeros
    with pytest.raises(reforge.Error, match="carried by the state"):
        seq.run({"input_ids": ids[:, :1], "position_ids": pos[:, :1], "past.0.key": past})
    # Copies by default: a kept output does not change with the next step; a view does.
    kept = seq.run({"input_ids": ids[:, :1], "position_ids": pos[:, :1]})["logits"]
    snapshot = kept.copy()
    view = seq.run({"input_ids": ids[:, 1:2] + 5, "position_ids": pos[:, 1:2]}, copy=False)["logits"]
    view_then = view.copy()
    assert not view.flags.writeable
    seq.run({"input_ids": ids[:, :1] + 9, "position_ids": pos[:, 2:3]})
    assert np.array_equal(kept, snapshot)
    assert not np.array_equal(view, view_then)  # the next step wrote the sequence's buffer
