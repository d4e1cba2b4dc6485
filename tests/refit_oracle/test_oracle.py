"""The oracle must be able to fail: a refit broken on purpose (values given to the wrong source, a
tensor skipped, a checkpoint replayed on swapped tensors) is reported as a violation, and the same
case with the real refit is not."""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from refit_oracle import catalog, onnxproto, safet, sources  # noqa: E402
from refit_oracle.execute import OK, Runner  # noqa: E402

MODEL = "cnn/dynamo"


def _swap_same_shaped(tensors):
    """Two different tensors of one shape trade values: a recipe replayed on the wrong source.
    Copies of one tied parameter (GPT-2's lm_head.weight and transformer.wte.weight) are left
    alone: one swapped away from its twin is refused as such, which tests nothing here."""
    seen = {}
    for n in sorted(tensors):
        seen.setdefault(np.asarray(tensors[n]).tobytes(), []).append(n)
    tied = {n for names in seen.values() if len(names) > 1 for n in names}
    by_shape = {}
    for n in sorted(set(tensors) - tied):
        v = np.asarray(tensors[n])
        by_shape.setdefault((v.dtype.str, v.shape), []).append(n)
    for names in by_shape.values():
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                a, b = names[i], names[j]
                if not np.array_equal(tensors[a], tensors[b]):
                    out = dict(tensors)
                    out[a], out[b] = tensors[b], tensors[a]
                    return out
    raise AssertionError("no two different tensors of one shape")


def swap_dict(plan, weights, **kw):
    if isinstance(weights, dict):
        weights = _swap_same_shaped(weights)
    return plan.refit(weights, **kw)


def swap_file(plan, weights, **kw):
    """Rewrites an ONNX or safetensors source with two same-shaped tensors swapped, then refits."""
    tmp = tempfile.mkdtemp()
    if str(weights).endswith(".onnx"):
        m = onnxproto.Model.load(weights)
        swapped = _swap_same_shaped({k: v for k, v in m.arrays().items() if v.dtype == np.float32 and v.size > 1})
        for n, v in swapped.items():
            m.set(n, v)
        weights = os.path.join(tmp, "swapped.onnx")
        m.save(weights)
    elif str(weights).endswith(".safetensors"):
        t = safet.read(weights)
        t.update(_swap_same_shaped({k: v for k, v in t.items() if v.dtype == np.float32}))
        weights = os.path.join(tmp, "swapped.safetensors")
        safet.write(weights, t)
    return plan.refit(weights, **kw)


def skip_one(plan, weights, **kw):
    """Leaves one tensor out but says the refit is incremental: the plan keeps a stale value."""
    if isinstance(weights, dict):
        weights = dict(weights)
        weights.pop(sorted(weights)[0])
        kw["incremental"] = True
    return plan.refit(weights, **kw)


@pytest.fixture(scope="module")
def cache():
    with tempfile.TemporaryDirectory() as d:
        yield d


CASES = [
    ({"mode": "refit"}, {"k": "B"}, {"via": "py", "mode": "fast"}, swap_file),
    ({"mode": "refit"}, {"k": "B"}, {"via": "py", "mode": "slow"}, swap_file),
    ({"mode": "refit", "precision": "int8"}, {"k": "onnx-delta", "t": 3, "d": 0.25, "e": 7}, {"via": "py", "mode": "fast"}, swap_file),
    ({"mode": "refit"}, {"k": "dict-onnx", "mut": "none"}, {"via": "py"}, swap_dict),
    ({"mode": "refit"}, {"k": "dict-onnx", "mut": "none"}, {"via": "py"}, skip_one),
]


@pytest.mark.parametrize("build,source,path,broken", CASES)
def test_a_broken_refit_is_a_violation(cache, build, source, path, broken):
    case = {"model": MODEL, "build": build, "source": source, "path": path}
    assert Runner(cache).run_case(case).outcome == OK, "the real refit must pass"
    r = Runner(cache, refit_hook=broken).run_case(case)
    assert r.violation, r
    assert r.outcome in ("VIOLATION:weights-differ", "VIOLATION:outputs-differ"), r


def test_a_checkpoint_refit_replayed_on_swapped_tensors_is_a_violation(cache):
    # the CNN's exporter folded BatchNorm: its checkpoint does not bind; GPT-2's does
    case = {"model": "hf/gpt2", "build": {"mode": "refit", "ckpt": "A"}, "source": {"k": "ckpt", "w": "B"}, "path": {"via": "py"}}
    assert Runner(cache).run_case(case).outcome == OK
    r = Runner(cache, refit_hook=swap_file).run_case(case)
    assert r.outcome in ("VIOLATION:weights-differ", "VIOLATION:outputs-differ"), r


def test_a_refit_that_changes_the_plan_and_then_raises_is_a_violation(cache):
    import reforge

    def refit_then_fail(plan, weights, **kw):
        plan.refit(weights, **kw)
        raise reforge.RefitRefused("refused after the fact")

    case = {"model": MODEL, "build": {"mode": "refit"}, "source": {"k": "B"}, "path": {"via": "py", "mode": "fast"}}
    r = Runner(cache, refit_hook=refit_then_fail).run_case(case)
    assert r.outcome == "VIOLATION:changed-on-refusal", r


def test_accepting_nan_is_a_violation(cache):
    def allow(plan, weights, **kw):
        return plan.refit(weights, allow_nonfinite=True, **kw)

    case = {"model": MODEL, "build": {"mode": "refit"}, "source": {"k": "onnx-nan", "t": 0, "v": "nan", "e": 0}, "path": {"via": "py", "mode": "fast"}}
    assert Runner(cache).run_case(case).outcome == "refused-correctly"
    assert Runner(cache, refit_hook=allow).run_case(case).outcome == "VIOLATION:accepted-invalid-source"


def test_a_fresh_build_is_its_own_reference(cache):
    """The reference is independent of the refit: a plan built from B equals itself, and a plan
    built from A differs from B's (the comparison can tell them apart)."""
    r = Runner(cache)
    m = r.models[MODEL]
    wa = r.reference(m.a, m, {"mode": "refit"})[0]
    wb = r.reference(m.b, m, {"mode": "refit"})[0]
    assert wa.keys() == wb.keys() and wa != wb
    assert r.reference(m.b, m, {"mode": "refit"})[0] == wb


def test_sources_describe_what_they_hold(cache):
    ms = catalog.load()
    m = ms[MODEL]
    s = sources.materialize(m, {"k": "onnx-delta", "t": 2, "d": 0.5, "e": 3}, cache, ms)
    a = onnxproto.Model.load(m.b).arrays()
    b = onnxproto.Model.load(s.path).arrays()
    changed = [n for n in a if not np.array_equal(a[n], b[n])]
    assert len(changed) == 1 and s.described == s.path
    assert sources.materialize(m, {"k": "ckpt-dupkey", "t": 0}, cache, ms).described is None


def test_other_checkpoints_share_no_tensor(cache):
    """Another family's checkpoint counts as describing no weights of a model only when it holds
    none of the model's checkpoint tensors by name, dtype and shape (the tiny Llamas of models/llama
    and models/hf share lm_head.weight [128, 64]: a refit of only that tensor takes it, as it should)."""
    ms = catalog.load()
    m = ms["hf/llama_decode"]
    own = {(n, a.dtype.str, a.shape) for c in (m.ckpt_a, m.ckpt_b) for n, a in safet.read(c).items()}
    picked = set()
    for i in range(12):
        s = sources.materialize(m, {"k": "ckpt-other", "i": i}, cache, ms)
        assert s.described is None
        assert not own & {(n, a.dtype.str, a.shape) for n, a in safet.read(s.path).items()}, s.path
        picked.add(s.path)
    assert ms["hf/gpt2"].ckpt_b not in picked and len(picked) > 3


def test_a_time_limit_starts_no_case_after_it(cache):
    """Cases past the deadline have no result (the driver counts those run); none is half-run."""
    import time

    from refit_oracle import driver

    case = {"model": MODEL, "build": {"mode": "refit"}, "source": {"k": "B"}, "path": {"via": "py", "mode": "fast"}}
    assert driver.run_cases([case, case], 1, cache, "cpu", deadline=time.monotonic() - 1) == [None, None]
    done = driver.run_cases([case], 1, cache, "cpu", deadline=time.monotonic() + 600)
    assert [r["outcome"] for r in done] == [OK]


def test_a_device_or_package_that_cannot_run_a_case_stops_the_run_up_front(monkeypatch, tmp_path):
    """Otherwise every worker would die on its first case, each death counted as a crash."""
    from refit_oracle import driver, execute

    ms = catalog.load()
    cli = execute.CLI
    assert "unknown device" in driver.device_check("tpu", ms)
    monkeypatch.setattr(execute, "CLI", str(tmp_path / "reforge"))
    assert "no reforge CLI at %s" % (tmp_path / "reforge") in driver.device_check("cpu", ms)
    monkeypatch.setattr(driver.shutil, "which", lambda name: None)
    monkeypatch.setattr(execute, "CLI", cli)
    assert "needs an NVIDIA GPU" in driver.device_check("cuda", ms)


def _exports(c: np.ndarray, other: np.ndarray):
    """Initializers made from an (8, 4) tensor the ways exporters make them."""
    return {
        "slice": c[None, 2:5].copy(),  # a position table cut to the sequence length
        "expand": np.ascontiguousarray(np.broadcast_to(c[3], (2, 1, 4))),  # cls_token per batch row
        "cat": np.concatenate([c, other], axis=1),  # one block of a concatenation
        "t": np.ascontiguousarray(c.T),
        "gather": c[[1, 1, 6]][:, [3, 0]].copy(),  # a bucket table gathered by constant indices
        "unrelated": other.copy(),
    }


def test_relations_are_found_by_value_and_hold_for_both_pairs():
    from refit_oracle import relations

    rng = np.random.default_rng(7)
    c_a, c_b = (rng.standard_normal((8, 4)).astype(np.float32) for _ in range(2))
    o_a, o_b = (rng.standard_normal((8, 2)).astype(np.float32) for _ in range(2))
    a, b = _exports(c_a, o_a), _exports(c_b, o_b)
    rel = relations.find(c_a, a, c_b, b)
    idx = np.arange(32).reshape(8, 4)
    cat = np.full((8, 6), -1)
    cat[:, :4] = idx
    want = {"slice": idx[None, 2:5], "expand": np.broadcast_to(idx[3], (2, 1, 4)), "cat": cat, "t": idx.T, "gather": idx[[1, 1, 6]][:, [3, 0]]}
    assert rel is not None and sorted(rel) == sorted(want)
    for n, m in want.items():
        assert np.array_equal(rel[n], m), n
    # the described initializers are what the exporter would make from the changed tensor
    for e in (13, 31):  # (3, 1): in every use but the gather; (7, 3): only in the transpose and the block
        new = c_b.copy()
        new.reshape(-1)[e] += np.float32(0.5)
        changed = relations.apply(rel, new, b)
        made = _exports(new, o_b)
        assert sorted(changed) == sorted(n for n in want if not np.array_equal(made[n], b[n]))
        for n, v in changed.items():
            assert np.array_equal(v, made[n]), n

    # a relation that holds for A's pair only is no relation
    b2 = dict(b, slice=c_b[None, 3:6].copy())
    assert "slice" not in relations.find(c_a, a, c_b, b2)
    # a symmetric tensor: identity or transpose, which element drives which is unknown
    s_a, s_b = c_a[:4] + c_a[:4].T, c_b[:4] + c_b[:4].T
    assert relations.find(s_a, {"w": s_a.copy()}, s_b, {"w": s_b.copy()}) is None
    # equal values say nothing of where they came from
    z = np.zeros((8, 4), np.float32)
    assert relations.find(z, {"z": z[:2].copy()}, z, {"z": z[:2].copy()}) is None


def _changed_ckpt(cache, model, spec):
    ms = catalog.load()
    s = sources.materialize(ms[model], spec, cache, ms)
    return ms[model], s


def test_a_checkpoint_tensor_used_in_part_describes_the_elements_it_makes(cache):
    """BERT's position table is cut to the sequence length (16 of 64 rows); ViT's cls_token is
    expanded to the batch. A delta inside the used part changes exactly those elements of B's
    export; one outside it describes B unchanged."""
    m, s = _changed_ckpt(cache, "hf/bert", {"k": "ckpt-delta", "t": 2, "d": 0.5, "e": 5 * 64 + 7})
    assert s.note == "embeddings.position_embeddings.weight"
    b = onnxproto.Model.load(m.b).arrays()
    want = b["embedding_2"].copy()
    want[0, 5, 7] += np.float32(0.5)
    got = onnxproto.Model.load(s.described).arrays()
    assert np.array_equal(got["embedding_2"], want)
    assert all(np.array_equal(got[n], b[n]) for n in b if n != "embedding_2")
    _, s = _changed_ckpt(cache, "hf/bert", {"k": "ckpt-delta", "t": 2, "d": 0.5, "e": 40 * 64 + 7})
    assert s.described == m.b
    m, s = _changed_ckpt(cache, "hf/vit", {"k": "dict-ckpt-delta", "t": 0, "d": 1.0, "e": 3})
    assert s.note == "embeddings.cls_token"
    want = onnxproto.Model.load(m.b).arrays()["expand"].copy()
    want[:, 0, 3] += np.float32(1.0)
    assert np.array_equal(onnxproto.Model.load(s.described).arrays()["expand"], want)


def test_one_copy_of_a_tied_parameter_changed_describes_nothing(cache):
    """T5's checkpoint holds shared.weight and encoder.embed_tokens.weight, one parameter saved
    twice: a source where the two differ describes no valid weights, whichever copy is bound."""
    for k in ("ckpt-delta", "dict-ckpt-delta"):
        _, s = _changed_ckpt(cache, "hf/t5", {"k": k, "t": 19, "d": 1.0, "e": 0})
        assert s.note == "shared.weight" and s.described is None and not s.unverifiable
    # a lossless change keeps the copies equal: B
    m, s = _changed_ckpt(cache, "hf/t5", {"k": "ckpt-dtype", "t": 19, "dt": "float64"})
    assert s.described == m.b


def test_saved_partial_use_cases_are_judged_against_the_derived_model(cache):
    """The 50,000-case run's accepted-invalid-source cases on ViT's cls_token were the oracle's own
    misjudgement: the refit is judged against B with the expanded elements changed."""
    for k in ("ckpt-delta", "dict-ckpt-delta"):
        case = {"model": "hf/vit", "build": {"ckpt": "A", "mode": "refit"}, "source": {"k": k, "t": 0, "d": 1.0, "e": 0}, "path": {"via": "py"}}
        assert Runner(cache).run_case(case).outcome == OK
