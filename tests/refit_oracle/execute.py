"""Runs one oracle case and judges it against the invariant:

    exit 0 (or no exception) => the engine's weights and outputs equal a fresh build from the
    weights the source describes, bit for bit; otherwise a clear error (a reforge.Error subclass,
    or CLI exit 1 with "error: ..."), and the plan or engine unchanged.

A case is a dict (see gen.py): model, build options, source spec, refit path. The fresh build
("reference") uses the plan's options without --strip-weights and without a checkpoint, on the
ONNX model the source describes (sources.py), and is cached per (described bytes, options) for
the run. Engine weights are read from the plan files' bytes (planfile.py), not from the library's
own report.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import catalog, onnxproto, planfile, safet, sources

ROOT = catalog.ROOT
# scripts/oracle.sh sets REFORGE_BUILD_DIR for a build elsewhere (the GPU machine's)
CLI = os.path.join(os.environ.get("REFORGE_BUILD_DIR") or os.path.join(ROOT, "build"), "reforge")
CLI_TIMEOUT = 120

OK = "ok-equal"
REFUSED_INVALID = "refused-correctly"  # the source describes no valid weights
REFUSED_VALID = "refused-valid-source"  # allowed by the invariant; counted apart
BUILD_REFUSED = "build-refused"
ACCEPTED_UNVERIFIED = "accepted-unverified"  # a quantized model's checkpoint change: not derivable here


@dataclass
class Result:
    outcome: str  # OK, REFUSED_*, BUILD_REFUSED or "VIOLATION:<kind>"
    detail: str = ""

    @property
    def violation(self) -> bool:
        return self.outcome.startswith("VIOLATION")


def violation(kind: str, detail: str) -> Result:
    return Result("VIOLATION:" + kind, detail)


class BuildFailed(Exception):
    pass


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return _digest(f.read())


@dataclass
class Snapshot:
    missing: Tuple[str, ...]
    weights: Optional[planfile.Digest]
    outputs: Any  # output digest, or the error text of a run that fails


class Runner:
    def __init__(self, cache: str, device: str = "cpu", refit_hook: Optional[Callable] = None):
        import reforge

        self.reforge = reforge
        self.models = catalog.load()
        self.cache = cache
        self.device = device
        # refit_hook(plan, weights, **kw) replaces plan.refit: the self-test breaks refits with it
        self.refit_hook = refit_hook
        self._plans: Dict[str, Any] = {}
        self._refs: Dict[str, Any] = {}
        self._inputs: Dict[str, Dict[str, np.ndarray]] = {}
        self._build_params = set(inspect.signature(reforge.build).parameters)
        self._refit_params = set(inspect.signature(reforge.Plan.refit).parameters)
        os.makedirs(cache, exist_ok=True)

    # ---- helpers ----

    def inputs(self, m: catalog.Model) -> Dict[str, np.ndarray]:
        if m.id not in self._inputs:
            self._inputs[m.id] = {k: np.load(p) for k, p in m.inputs.items()}
        return self._inputs[m.id]

    def _tmp(self) -> str:
        return tempfile.mkdtemp(prefix="case-", dir=self.cache)

    def checkpoint_file(self, m: catalog.Model, b: dict) -> Optional[str]:
        """The checkpoint a build binds to: A's, A's without one tensor, B's (the wrong one), or
        another family's."""
        c = b.get("ckpt")
        if not c:
            return None
        if c == "A":
            return m.ckpt_a
        if c == "B":
            return m.ckpt_b
        if c == "other":
            others = sorted({o.ckpt_b for o in self.models.values() if o.family != m.family and o.ckpt_b})
            return others[b.get("ckpt_t", 0) % len(others)]  # type: ignore[return-value]
        if c == "A-partial":
            t = safet.read(m.ckpt_a)  # type: ignore[arg-type]
            names = sorted(t)
            del t[names[b.get("ckpt_t", 0) % len(names)]]
            return sources._store(self.cache, "ckptA-partial", safet.encode(list(t.items())), "safetensors")
        raise ValueError("unknown checkpoint option " + c)

    def build_kwargs(self, m: catalog.Model, b: dict, reference: bool) -> Dict[str, Any]:
        mode = b.get("mode", "refit")
        kw: Dict[str, Any] = {"threads": 1, "device": self.device}
        if self.device != "cpu":
            # nodes without a device kernel (the quantized models' com.microsoft ops) run on the
            # host: a refusal to build would test nothing, and the weights on the GPU are still
            # refitted and compared
            kw["allow_cpu_fallback"] = True
        if mode == "refit" or (reference and mode == "individual"):
            # a reference needs no patterns: engine weights do not depend on which are refittable,
            # and a name pattern of A need not match the same sources in another export
            kw["refit"] = True
        elif mode == "identical":
            kw["refit"] = "identical"
        elif mode == "individual":
            kw["refit"] = list(b["patterns"])
        if b.get("strip") and not reference:
            kw["strip_weights"] = True
        if b.get("precision", "fp32") != "fp32":
            kw["precision"] = b["precision"]
        if b.get("literals"):
            kw["literals"] = list(b["literals"])
        if not reference:
            ck = self.checkpoint_file(m, b)
            if ck:
                kw["checkpoint"] = ck
                if b.get("bind"):
                    kw["bind"] = dict(b["bind"])
        return kw

    def _cli_build(self, onnx: str, kw: Dict[str, Any], block: int, out: str) -> None:
        cmd = [CLI, "--quiet", "build", onnx, "-o", out, "--threads", "1", "--block-size", str(block)]
        if kw.get("refit") is True:
            cmd.append("--refit")
        elif kw.get("refit") == "identical":
            cmd.append("--refit-identical")
        elif isinstance(kw.get("refit"), list):
            cmd += ["--refit-individual"] + kw["refit"]
        if kw.get("strip_weights"):
            cmd.append("--strip-weights")
        if kw.get("precision"):
            cmd += ["--precision", kw["precision"]]
        for n in kw.get("literals", []):
            cmd += ["--literal", n]
        if kw.get("checkpoint"):
            cmd += ["--checkpoint", kw["checkpoint"]]
            for k, v in (kw.get("bind") or {}).items():
                cmd += ["--bind", "%s=%s" % (k, v)]
        if self.device != "cpu":
            cmd += ["--device", self.device]
        if kw.get("allow_cpu_fallback"):
            cmd.append("--allow-cpu-fallback")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT)
        if r.returncode != 0:
            raise BuildFailed("exit %d: %s" % (r.returncode, r.stderr.strip()[-400:]))

    def build_file(self, onnx: str, m: catalog.Model, b: dict, reference: bool) -> str:
        """A plan file built from `onnx` with the case's options (cached); raises BuildFailed."""
        kw = self.build_kwargs(m, b, reference)
        block = b.get("block") if b.get("precision") == "int4" else None
        key = json.dumps([_file_digest(onnx), kw, block, reference], sort_keys=True, default=str)
        if key in self._plans:
            v = self._plans[key]
            if isinstance(v, BuildFailed):
                raise v
            return v
        path = os.path.join(self.cache, "plan-%s.plan" % _digest(key.encode()))
        try:
            if block and block != 32 and "block_size" not in self._build_params:
                self._cli_build(onnx, kw, block, path)
            else:
                if block:
                    kw["block_size"] = block
                p = self.reforge.build(onnx, **kw)
                p.save(path)
        except self.reforge.Error as e:
            self._plans[key] = BuildFailed("%s: %s" % (type(e).__name__, e))
            raise self._plans[key]
        self._plans[key] = path
        return path

    def load(self, path: str):
        return self.reforge.load(path, threads=1)

    def run_outputs(self, plan, m: catalog.Model) -> Dict[str, np.ndarray]:
        return {k: np.array(v, copy=True) for k, v in plan.run(self.inputs(m)).items()}

    def reference(self, described: str, m: catalog.Model, b: dict):
        """(weights digest, outputs digest, outputs) of a fresh build, or the build's error text."""
        key = json.dumps([_file_digest(described), m.id, self.build_kwargs(m, b, True), b.get("block")], default=str)
        if key not in self._refs:
            try:
                path = self.build_file(described, m, b, True)
                plan = self.load(path)
                outs = self.run_outputs(plan, m)
                self._refs[key] = (planfile.weights(path), planfile.outputs_digest(outs), outs)
            except BuildFailed as e:
                self._refs[key] = str(e)
            except self.reforge.Error as e:
                self._refs[key] = "%s: %s" % (type(e).__name__, e)
        return self._refs[key]

    def snapshot(self, plan, m: catalog.Model, where: str) -> Snapshot:
        missing = tuple(plan.missing)
        weights = None
        if not missing:
            path = os.path.join(where, "snap-%d.plan" % len(os.listdir(where)))
            plan.save(path, strip=False)
            weights = planfile.weights(path)
            os.unlink(path)
        try:
            outs: Any = planfile.outputs_digest(self.run_outputs(plan, m))
        except self.reforge.Error as e:
            outs = "error: %s" % e
        return Snapshot(missing, weights, outs)

    # ---- the case ----

    def run_case(self, case: dict) -> Result:
        m = self.models[case["model"]]
        b = case["build"]
        self._case_model, self._case_build = m, b
        src = case["source"]
        path = case["path"]
        expect_build_refused = b.get("mode") == "individual" and b.get("pat") == "none"
        ck = b.get("ckpt")
        if ck in ("other",) or (ck == "B" and m.ckpt_a and _file_digest(m.ckpt_a) != _file_digest(m.ckpt_b)):
            expect_build_refused = True  # B's checkpoint where A's belongs, or another model's
        try:
            plan_path = self.build_file(m.a, m, b, False)
        except BuildFailed as e:
            return Result(BUILD_REFUSED, str(e)[:300])
        if expect_build_refused:
            return violation("build-accepted", "the build should have been refused (%s)" % json.dumps(b))
        s = sources.materialize(m, src, self.cache, self.models)
        work = self._tmp()
        try:
            if path["via"] == "cli" and s.kind != "dict":
                accepted = self._refit_cli(plan_path, s, path, work)
            else:
                accepted = self._refit_py(plan_path, s, path, m, work)
            if isinstance(accepted, Result):
                return accepted
            if accepted[0] == "refused":
                return self._refused(s, m, b, accepted[1])
            weights, outs = accepted
            return self._judge(weights, outs, s, m, b)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _refused(self, s: sources.Source, m: catalog.Model, b: dict, msg: str) -> Result:
        if s.described is None:
            return Result(REFUSED_INVALID, msg[:300])
        ref = self.reference(s.described, m, b)
        if isinstance(ref, str):
            return Result(REFUSED_INVALID, msg[:300])
        return Result(REFUSED_VALID, msg[:300])

    def _judge(self, weights: planfile.Digest, outs: Dict[str, np.ndarray], s, m, b) -> Result:
        if s.described is None and s.unverifiable:
            return Result(ACCEPTED_UNVERIFIED, s.note)
        if s.described is None:
            return violation("accepted-invalid-source", "the source describes no valid weights (%s), yet the refit succeeded" % s.note)
        ref = self.reference(s.described, m, b)
        if isinstance(ref, str):
            return violation("accepted-unbuildable", "a fresh build of the described weights fails (%s), yet the refit succeeded" % ref[:200])
        rw, ro, routs = ref
        if b.get("mode") == "individual":
            # the reference is a --refit build (see build_kwargs), whose literal table is laid out
            # by another mode: its engine weights compare by name, its literals do not
            rw = {k: v for k, v in rw.items() if not k.startswith("literal#")}
            weights = {k: v for k, v in weights.items() if not k.startswith("literal#")}
        diff = []
        for name in sorted(set(rw) | set(weights)):
            if name not in weights:
                diff.append("%s: missing after the refit" % name)
            elif name not in rw:
                diff.append("%s: not in a fresh build" % name)
            elif rw[name] != weights[name]:
                diff.append("%s: differs" % name)
        od = planfile.outputs_digest(outs)
        odiff = []
        for name, d in ro.items():
            if od.get(name) != d:
                a, r = outs.get(name), routs[name]
                if a is None or a.shape != r.shape:
                    odiff.append("%s: missing or of another shape" % name)
                else:
                    odiff.append("%s: max |diff| %.3g" % (name, float(np.nanmax(np.abs(a.astype(np.float64) - r.astype(np.float64))))))
        if diff:
            return violation("weights-differ", "%d engine weights differ from a fresh build (%s); outputs: %s" % (len(diff), "; ".join(diff[:4]), "; ".join(odiff) or "equal"))
        if odiff:
            return violation("outputs-differ", "; ".join(odiff))
        return Result(OK)

    def _do_refit(self, plan, s: sources.Source, path: dict):
        kw: Dict[str, Any] = {}
        if s.kind == "dict":
            kw["names"] = s.names
            if s.incremental:
                kw["incremental"] = True
            weights: Any = s.tensors
            if s.names == "onnx":
                weights = self._by_key(plan, weights, complete=not s.incremental)
        else:
            weights = s.path
            if s.kind == "onnx":
                kw["mode"] = path.get("mode", "fast")
        if path.get("keep_baked") and "keep_baked" in self._refit_params:
            kw["keep_baked"] = True
        if self.refit_hook:
            return self.refit_hook(plan, weights, **kw)
        return plan.refit(weights, **kw)

    @staticmethod
    def _by_key(plan, tensors: Dict[str, np.ndarray], complete: bool) -> Dict[str, np.ndarray]:
        """An initializer name that several sources share (a merged or tied tensor) is refused by
        name; each of its uses gets the same value by source key instead, which describes the
        same weights. An optional bias the exporter left out is zero in the ONNX model, and the
        canonical form makes it a source (`X.zero_bias`): a complete dict gives it zeros. The keys
        and shapes come from the plan's own list; the values do not."""
        uses: Dict[str, List[str]] = {}
        srcs = plan.inspect().get("sources") or []
        for src in srcs:
            for n in src.get("names") or []:
                uses.setdefault(n, []).append(src["key"])
        if complete:
            tensors = dict(tensors)
            for src in srcs:
                for n in src.get("names") or []:
                    if n.endswith(".zero_bias") and n not in tensors and src.get("refittable"):
                        tensors[n] = np.zeros(src["shape"], dtype=np.float32)
        out: Dict[str, np.ndarray] = {}
        for n, v in tensors.items():
            if len(uses.get(n, [])) > 1:
                out.update({k: v for k in uses[n]})
            else:
                out[n] = v
        return out

    def _refit_py(self, plan_path: str, s, path: dict, m, work: str):
        local = os.path.join(work, "p.plan")
        shutil.copyfile(plan_path, local)
        plan = self.load(local)
        before = self.snapshot(plan, m, work)
        try:
            self._do_refit(plan, s, path)
        except self.reforge.Error as e:
            after = self.snapshot(plan, m, work)
            if after != before:
                return violation("changed-on-refusal", "the refit raised %s: %s, and the plan changed" % (type(e).__name__, str(e)[:200]))
            return self._refused(s, m, self._case_build, "%s: %s" % (type(e).__name__, e))
        except Exception as e:  # noqa: BLE001 - anything else is a finding
            return violation("other-exception", "%s: %s" % (type(e).__name__, str(e)[:300]))
        try:
            out_path = os.path.join(work, "refit.plan")
            plan.save(out_path, strip=False)
            weights = planfile.weights(out_path)
            outs = self.run_outputs(plan, m)
        except Exception as e:  # noqa: BLE001
            return violation("unusable-after-refit", "the refit succeeded but %s: %s" % (type(e).__name__, str(e)[:300]))
        return weights, outs

    def _refit_cli(self, plan_path: str, s, path: dict, work: str):
        local = os.path.join(work, "p.plan")
        shutil.copyfile(plan_path, local)
        before = _file_digest(local)
        listing = sorted(os.listdir(work))
        cmd = [CLI, "--quiet", "refit", local, "--weights", s.path]
        out = os.path.join(work, "out.plan") if path.get("out", True) else local
        if path.get("out", True):
            cmd += ["-o", out]
        if s.kind == "onnx" and path.get("mode", "fast") != "fast":
            cmd.append("--" + path["mode"])
        if path.get("keep_baked"):
            cmd.append("--keep-baked")
        if planfile.stripped(local):
            # A stripped plan's refit plan is stripped too unless --full (docs/refit.md): the
            # oracle compares the weights the file holds, so it asks for them.
            cmd.append("--full")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT)
        except subprocess.TimeoutExpired:
            return violation("hang", "reforge refit ran past %d s" % CLI_TIMEOUT)
        if r.returncode < 0:
            return violation("crash", "reforge refit died of signal %d" % -r.returncode)
        if r.returncode != 0:
            if r.returncode != 1:
                return violation("exit-code", "reforge refit exited %d: %s" % (r.returncode, r.stderr[-300:]))
            if "error:" not in r.stderr:
                return violation("unclear-error", "exit 1 without 'error:': %s" % r.stderr[-300:])
            if _file_digest(local) != before:
                return violation("changed-on-refusal", "the refused refit changed the plan file")
            if sorted(os.listdir(work)) != listing:
                return violation("stray-file", "the refused refit left %s" % sorted(set(os.listdir(work)) - set(listing)))
            msg = r.stderr.strip().splitlines()
            return ("refused", msg[-1] if msg else "")
        try:
            weights = planfile.weights(out)
            plan = self.load(out)
            outs = self.run_outputs(plan, self._case_model)
        except Exception as e:  # noqa: BLE001
            return violation("unusable-after-refit", "refit exited 0 but %s: %s" % (type(e).__name__, str(e)[:300]))
        return weights, outs
