"""A refit never applies new weights in part: in a plan built with some sources refittable
(``refit=[patterns]``, the CLI's --refit-individual) the others are baked, and new weights that hold
other values for a baked source than the plan was built with are refused, naming them, on every
path (ONNX fast, slow and verify; a checkpoint; a dict; the CLI), with the plan unchanged; unless
``keep_baked=True`` (``--keep-baked``) says to keep the plan's values, which the report counts.

On the real GPT-2 export (models/hf/gpt2): its MLP weights refittable, the rest baked; B differs
from A in every parameter."""

import numpy as np
import pytest
import safetensors.numpy

import reforge
from conftest import CLI, TOLERANCE, hf_checkpoint, hf_inputs, hf_onnx, hf_reference, max_diff

MLP = ["transformer.h.*.mlp.*"]


def outputs_equal(a, b):
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def gpt2():
    inputs = hf_inputs("gpt2")
    refs = {w: hf_reference("gpt2", w) for w in "AB"}
    assert max_diff(refs["A"], refs["B"]) > 100 * TOLERANCE
    return inputs, refs


@pytest.mark.parametrize("mode", ["fast", "slow", "verify"])
def test_onnx_refit_with_other_baked_values_is_refused_and_changes_nothing(gpt2, mode):
    inputs, refs = gpt2
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=MLP)
    before = plan.run(inputs)
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(hf_onnx("gpt2", "B"), mode=mode)
    msg = str(e.value)
    assert "baked source(s)" in msg and "--keep-baked" in msg, msg
    assert "transformer.wte.weight" in msg or "lm_head" in msg or "attn" in msg, msg
    assert outputs_equal(plan.run(inputs), before)
    assert max_diff(plan.run(inputs), refs["A"]) <= TOLERANCE


@pytest.mark.parametrize("mode", ["fast", "slow", "verify"])
def test_keep_baked_keeps_the_plans_values_and_counts_them(gpt2, mode):
    inputs, refs = gpt2
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=MLP)
    rep = plan.refit(hf_onnx("gpt2", "B"), mode=mode, keep_baked=True)
    baked = [s for s in plan.sources if not s["refittable"]]
    assert rep["baked_given"] == len(baked) > 0
    assert 0 < len(rep["baked_differing_kept"]) <= len(baked)
    assert "with other values than the plan's were ignored (--keep-baked)" in rep["summary"]
    mixed = plan.run(inputs)
    # Neither A nor B: the MLP of B, the rest of A, as asked.
    assert max_diff(mixed, refs["A"]) > 100 * TOLERANCE
    assert max_diff(mixed, refs["B"]) > 100 * TOLERANCE
    # The same mix whichever path made it.
    fast = reforge.build(hf_onnx("gpt2", "A"), refit=MLP)
    fast.refit(hf_onnx("gpt2", "B"), keep_baked=True)
    assert outputs_equal(mixed, fast.run(inputs))


def test_refit_from_the_build_time_weights_is_accepted(gpt2):
    inputs, refs = gpt2
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=MLP)
    rep = plan.refit(hf_onnx("gpt2", "A"))
    assert rep["baked_given"] > 0 and rep["baked_differing_kept"] == []
    assert "all equal to the plan's" in rep["summary"]
    assert max_diff(plan.run(inputs), refs["A"]) <= TOLERANCE


def test_every_source_refittable_takes_all_of_b(gpt2):
    inputs, refs = gpt2
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=["*"])
    rep = plan.refit(hf_onnx("gpt2", "B"))
    assert rep["baked_given"] == 0
    assert max_diff(plan.run(inputs), refs["B"]) <= TOLERANCE


def test_checkpoint_refit_with_other_baked_values_is_refused(gpt2):
    inputs, refs = gpt2
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=MLP, checkpoint=hf_checkpoint("gpt2", "A"))
    before = plan.run(inputs)
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(hf_checkpoint("gpt2", "B"))
    assert "baked source(s)" in str(e.value)
    state_b = safetensors.numpy.load_file(str(hf_checkpoint("gpt2", "B")))
    with pytest.raises(reforge.RefitRefused):
        plan.refit(state_b)
    assert outputs_equal(plan.run(inputs), before)
    # The MLP biases of A are all zero, so the exporter dropped them: their sources are named
    # after their Gemm nodes, no pattern over MLP names matches them, and they are baked, bound to
    # the checkpoint's MLP biases. B's biases differ: B's MLP alone is refused too.
    baked_names = {n for s in plan.sources if not s["refittable"] for n in s["binding"]["checkpoint"]}
    assert "transformer.h.0.mlp.c_fc.bias" in baked_names
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit({k: v for k, v in state_b.items() if ".mlp." in k})
    assert "transformer.h.0.mlp.c_fc.bias" in str(e.value)
    # A checkpoint holding only the tensors of refittable sources leaves the baked ones as built.
    refittable_names = {n for s in plan.sources if s["refittable"] for n in s["binding"]["checkpoint"]}
    mlp_only = {k: v for k, v in state_b.items() if k in refittable_names and k not in baked_names}
    assert mlp_only
    rep = plan.refit(mlp_only)
    assert rep["baked_given"] == 0
    kept = plan.run(inputs)
    plan.refit(state_b, keep_baked=True)
    assert outputs_equal(plan.run(inputs), kept)


def test_a_dict_by_onnx_names_compares_baked_values(gpt2):
    inputs, _ = gpt2
    plan = reforge.build(hf_onnx("gpt2", "A"), refit=MLP)
    baked = next(s for s in plan.sources if not s["refittable"] and s["dtype"] == "float32")
    before = plan.run(inputs)
    shape = tuple(baked["shape"])
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit({baked["key"]: np.full(shape, 0.5, np.float32)}, names="onnx", incremental=True)
    assert baked["key"] in str(e.value)
    assert outputs_equal(plan.run(inputs), before)


def test_cli_refit_refuses_and_writes_nothing(tmp_path, gpt2):
    import subprocess

    if not CLI.exists():
        pytest.skip("the reforge CLI is not built at %s" % CLI)
    plan = tmp_path / "ind.plan"
    out = tmp_path / "x.plan"
    r = subprocess.run(
        [str(CLI), "build", str(hf_onnx("gpt2", "A")), "-o", str(plan), "--refit-individual", MLP[0]],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    original = plan.read_bytes()
    r = subprocess.run(
        [str(CLI), "refit", str(plan), "--weights", str(hf_onnx("gpt2", "B")), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "baked source(s)" in r.stderr and "--keep-baked" in r.stderr, r.stderr
    assert not out.exists() and plan.read_bytes() == original
    r = subprocess.run(
        [str(CLI), "refit", str(plan), "--weights", str(hf_onnx("gpt2", "B")), "-o", str(out), "--keep-baked"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "were ignored (--keep-baked)" in r.stderr, r.stderr
    assert out.exists()


def test_checkpoint_refit_refuses_other_values_for_a_declared_literal(tmp_path):
    # BERT (torch 1.13 export): its word embeddings declared literal in a build bound to checkpoint
    # A, which holds them under the same name. B's checkpoint holds other values for them: the plan
    # would keep A's, so the refit is refused unless keep_baked.
    from conftest import ROOT

    bert = ROOT / "models" / "bert"
    literal = "embeddings.word_embeddings.weight"
    inputs = {p.stem: np.load(p) for p in sorted((bert / "inputs" / "b1_s7").glob("*.npy"))}
    plan = reforge.build(
        bert / "torch113_fold_static" / "A" / "model.onnx",
        refit=True,
        checkpoint=bert / "checkpoint_A.safetensors",
        literals=[literal],
    )
    lit = next(e for e in plan.inspect()["literals"] if e["name"] == literal)
    assert lit["checkpoint"] == [literal]
    before = plan.run(inputs)
    with pytest.raises(reforge.RefitRefused) as e:
        plan.refit(bert / "checkpoint_B.safetensors")
    assert literal in str(e.value) and "--literal" in str(e.value) and "--keep-baked" in str(e.value)
    assert outputs_equal(plan.run(inputs), before)
    rep = plan.refit(bert / "checkpoint_A.safetensors")
    assert rep["literals_given"] == 1 and literal not in rep["unused_checkpoint_tensors"]
    rep = plan.refit(bert / "checkpoint_B.safetensors", keep_baked=True)
    assert "literals (--literal) in the checkpoint: 1, 1 with other values" in rep["summary"]
    # Saved and loaded, the plan still knows the literal's checkpoint tensor.
    plan.save(tmp_path / "p.plan")
    again = reforge.load(tmp_path / "p.plan")
    with pytest.raises(reforge.RefitRefused):
        again.refit(bert / "checkpoint_B.safetensors")


def test_cli_run_with_weights_refuses_other_baked_values(tmp_path):
    import subprocess

    if not CLI.exists():
        pytest.skip("the reforge CLI is not built at %s" % CLI)
    from conftest import HF

    plan = tmp_path / "ind.plan"
    feed = "input_ids=%s" % (HF / "gpt2" / "inputs" / "input_ids.npy")
    run = lambda *a: subprocess.run([str(CLI), *map(str, a)], capture_output=True, text=True)  # noqa: E731
    assert run("build", hf_onnx("gpt2", "A"), "-o", plan, "--refit-individual", MLP[0]).returncode == 0
    r = run("run", plan, "--weights", hf_onnx("gpt2", "B"), "--input", feed, "--output-dir", tmp_path / "out")
    assert r.returncode == 1 and "baked source(s)" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    r = run("run", plan, "--weights", hf_onnx("gpt2", "B"), "--keep-baked", "--input", feed)
    assert r.returncode == 0 and "--keep-baked" in r.stderr, r.stderr
    r = run("run", plan, "--keep-baked", "--input", feed)
    assert r.returncode == 1 and "--keep-baked applies when refitting with --weights" in r.stderr, r.stderr
