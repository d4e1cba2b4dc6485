"""Plan.generate on the real Hugging Face decode exports (models/hf/llama_decode, gpt2_generate): greedy
tokens equal PyTorch's generate (the reference the export script saved), the callback streams
them, sampling repeats with its seed, a batch of prompts of different lengths equals PyTorch's
left-padded batch, and a model without a cache is refused."""

import numpy as np
import pytest

import reforge
from conftest import ROOT

DIR = ROOT / "models" / "hf" / "llama_decode"


def plan():
    return reforge.build(str(DIR / "A" / "model.onnx"), threads=1)


def test_greedy_tokens_equal_pytorch_and_stream():
    p = plan()
    prompt = np.load(DIR / "reference" / "A" / "prompt_ids.npy")
    want = np.load(DIR / "reference" / "A" / "tokens.npy")
    seen = []
    got = p.generate(prompt[0], max_new_tokens=len(want), callback=lambda i, t: seen.append((i, t)))
    assert got.dtype == np.int64 and got.shape == (1, len(want))
    assert got[0].tolist() == want.tolist()
    assert seen == [(0, int(t)) for t in want]
    # Two prompts, one a prefix of the other; the second stops at a stop token (padded with -1).
    both = p.generate([prompt[0].tolist(), prompt[0][:3].tolist()], max_new_tokens=6, stop_tokens=[int(want[1])])
    assert both[0][:2].tolist() == want[:2].tolist() and (both[0][2:] == -1).all()
    alone = p.generate(prompt[0][:3], max_new_tokens=6, stop_tokens=[int(want[1])])
    assert both[1][: alone.shape[1]].tolist() == alone[0].tolist()


def test_sampling_repeats_with_its_seed():
    p = plan()
    prompt = np.load(DIR / "reference" / "A" / "prompt_ids.npy")
    a = p.generate(prompt, max_new_tokens=16, temperature=1.5, top_p=0.95, seed=3)
    assert (p.generate(prompt, max_new_tokens=16, temperature=1.5, top_p=0.95, seed=3) == a).all()
    assert ((a >= 0) & (a < 128)).all()


def test_a_model_without_a_cache_is_refused():
    p = reforge.build(str(ROOT / "models" / "llama" / "dynamo" / "A" / "model.onnx"))
    with pytest.raises(reforge.Error, match="carries no cache"):
        p.generate([1, 2, 3], max_new_tokens=2)
    with pytest.raises(reforge.InvalidInput, match="token ids are integers"):
        p.generate(np.zeros(3, dtype=np.float32))


def test_a_batch_of_prompts_equals_pytorchs_batch():
    d = ROOT / "models" / "hf" / "gpt2_generate"
    p = reforge.build(str(d / "A" / "model.onnx"), threads=1)
    padded = np.load(d / "reference" / "A" / "batch_prompt_ids.npy")
    mask = np.load(d / "reference" / "A" / "batch_attention_mask.npy")
    want = np.load(d / "reference" / "A" / "batch_tokens.npy")
    prompts = [row[m == 1].tolist() for row, m in zip(padded, mask)]
    assert len({len(q) for q in prompts}) == 3
    assert (p.generate(prompts, max_new_tokens=want.shape[1]) == want).all()


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_windows_replayed_equal_pytorchs_batch(device, tmp_path):
    # device_replay=True: a GPU plan records each decoding step once per window and replays it
    # (on the CPU the option changes nothing); windows of 8 positions, a left-padded batch.
    d = ROOT / "models" / "hf" / "gpt2_generate"
    try:
        p = reforge.build(str(d / "A" / "model.onnx"), threads=1, device=device, device_replay=True)
        padded = np.load(d / "reference" / "A" / "batch_prompt_ids.npy")
        mask = np.load(d / "reference" / "A" / "batch_attention_mask.npy")
        want = np.load(d / "reference" / "A" / "batch_tokens.npy")
        prompts = [row[m == 1].tolist() for row, m in zip(padded, mask)]
        got = p.generate(prompts, max_new_tokens=want.shape[1], window=8)
    except reforge.Error as e:
        if device == "cuda" and ("cannot run here" in str(e) or "not registered" in str(e) or "no CUDA" in str(e)):
            pytest.skip("no usable GPU: " + str(e))
        raise
    assert (got == want).all()
    p.save(tmp_path / "p.plan")
    loaded = reforge.load(tmp_path / "p.plan", threads=1, device_replay=True)
    assert (loaded.generate(prompts, max_new_tokens=want.shape[1], window=8) == want).all()


def test_onnxruntime_genai_builder_export_gives_its_tokens():
    """models/genai/llama_gqa (ONNX Runtime GenAI's model builder: GroupQueryAttention, right-padded
    batches): the greedy tokens equal onnxruntime-genai's, alone and as one batch."""
    d = ROOT / "models" / "genai" / "llama_gqa"
    p = reforge.build(str(d / "model.onnx"), threads=1)
    prompts = [np.load(d / "reference" / f"prompt_{i}.npy") for i in range(2)]
    want = [np.load(d / "reference" / f"tokens_{i}.npy") for i in range(2)]
    assert p.generate(prompts[0], max_new_tokens=16)[0].tolist() == want[0].tolist()
    both = p.generate([q.tolist() for q in prompts], max_new_tokens=16)
    assert both.tolist() == np.load(d / "reference" / "batch_tokens.npy").tolist()
    assert both.tolist() == [w.tolist() for w in want]


def test_generate_on_a_named_version_and_the_version_of_each_token():
    """A plan bound to checkpoint A with B refit into version "B": generate(version="B") gives
    PyTorch's tokens for B while the current weights stay A's; return_versions gives each token's
    version id, which a refit of the current weights changes."""
    p = reforge.build(str(DIR / "A" / "model.onnx"), refit=True, checkpoint=str(DIR / "checkpoint_A.safetensors"),
                      threads=1)
    want = {w: np.load(DIR / "reference" / w / "tokens.npy") for w in ("A", "B")}
    prompt = {w: np.load(DIR / "reference" / w / "prompt_ids.npy")[0] for w in ("A", "B")}
    p.refit(str(DIR / "checkpoint_B.safetensors"), version="B")
    got_b, on_b = p.generate(prompt["B"], max_new_tokens=len(want["B"]), version="B", return_versions=True)
    assert got_b[0].tolist() == want["B"].tolist()
    assert (on_b == p.version_id("B")).all()
    got_a, on_a = p.generate(prompt["A"], max_new_tokens=len(want["A"]), return_versions=True)
    assert got_a[0].tolist() == want["A"].tolist()
    first = p.version_id()
    assert (on_a == first).all() and first != p.version_id("B")
    # A refit of the current weights makes a new version: later tokens carry its id.
    p.refit(str(DIR / "checkpoint_B.safetensors"))
    got, on = p.generate(prompt["B"], max_new_tokens=len(want["B"]), return_versions=True)
    assert got[0].tolist() == want["B"].tolist()
    assert p.version_id() not in (first, p.version_id("B")) and (on == p.version_id()).all()
    # Padding is -1 in both arrays.
    both, both_on = p.generate([prompt["A"].tolist(), prompt["A"][:3].tolist()], max_new_tokens=6,
                               stop_tokens=[int(want["B"][0])], return_versions=True)
    assert ((both == -1) == (both_on == -1)).all()
    with pytest.raises(reforge.Error, match="'C'"):
        p.generate(prompt["A"], max_new_tokens=2, version="C")
    with pytest.raises(reforge.Error, match="'C'"):
        p.version_id("C")
    with pytest.raises(reforge.InvalidInput, match="return_versions"):
        p.generate("text", max_new_tokens=2, return_versions=True, tokenizer=None)
