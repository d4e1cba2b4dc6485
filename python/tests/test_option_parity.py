"""Python's options at parity with the CLI's: every option of `reforge build`, `refit`, `run` and
`generate` is a keyword of the Python call that does the same (its name with '_' for '-'), or is
listed below with the Python keyword that does it elsewhere, or with why Python has no place for it.
A new CLI option fails this test until Python has it or the lists say why; an entry for an option
the CLI no longer has fails it too."""

import inspect
import re
import subprocess

import pytest

import reforge
from conftest import CLI


def cli_options(command):
    if not CLI.exists():
        pytest.skip("the reforge CLI is not built at %s" % CLI)
    out = subprocess.run([str(CLI), command, "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"^\s+(?:-\w,)?--([a-z][a-z0-9-]*)", out, re.M)) - {"help"}


def params(fn):
    return set(inspect.signature(fn).parameters) - {"self"}


# The Python call each command's options belong to.
PRIMARY = {
    "build": reforge.build,
    "refit": reforge.Plan.refit,
    "run": reforge.Plan.run,
    "generate": reforge.Plan.generate,
}

# Options that Python takes elsewhere: (the call, its keyword).
ELSEWHERE = {
    "build": {
        "refit-identical": (reforge.build, "refit"),  # refit="identical"
        "refit-individual": (reforge.build, "refit"),  # refit=["pattern", ...]
        "literal": (reforge.build, "literals"),
        "skip-pass": (reforge.build, "skip_passes"),
        "bind": (reforge.build, "bind"),
        "output": (reforge.Plan.save, "path"),
        "print-passes": (reforge.build, "progress"),  # called as each pass starts
    },
    "refit": {
        "weights": (reforge.Plan.refit, "weights"),
        "output": (reforge.Plan.save, "path"),
        "strip-weights": (reforge.Plan.save, "strip"),
        "full": (reforge.Plan.save, "strip"),  # strip=False
        "slow": (reforge.Plan.refit, "mode"),  # mode="slow"
        "verify": (reforge.Plan.refit, "mode"),  # mode="verify"
    },
    "run": {
        "weights": (reforge.Plan.refit, "weights"),
        "allow-nonfinite": (reforge.build, "allow_nonfinite"),
        "strip-prefix": (reforge.Plan.refit, "strip_prefix"),
        "add-prefix": (reforge.Plan.refit, "add_prefix"),
        "keep-baked": (reforge.Plan.refit, "keep_baked"),
        "lora": (reforge.Plan.refit, "lora"),
        "lora-scale": (reforge.Plan.refit, "lora_scale"),
        "input": (reforge.Plan.run, "inputs"),
        "threads": (reforge.build, "threads"),
        "precision": (reforge.build, "precision"),
        "block-size": (reforge.build, "block_size"),
        "activations": (reforge.build, "activations"),
        "no-verify": (reforge.load, "verify"),
        "device": (reforge.build, "device"),
        "allow-cpu-fallback": (reforge.build, "allow_cpu_fallback"),
        "timing-cache": (reforge.load_timing_cache, "path"),
    },
    "generate": {
        "input-ids": (reforge.Plan.generate, "prompts"),
        "prompt": (reforge.Plan.generate, "prompts"),  # str prompts
        "no-bos": (reforge.Plan.generate, "add_special_tokens"),
        "stop": (reforge.Plan.generate, "stop_tokens"),
        "threads": (reforge.build, "threads"),
        "device": (reforge.build, "device"),
        "allow-cpu-fallback": (reforge.build, "allow_cpu_fallback"),
    },
}

# Options of the command line with no place in Python, and why.
CLI_ONLY = {
    "build": {"json": "build() returns the Plan; plan.inspect() is the summary"},
    "refit": {
        "json": "refit() returns the report the CLI's --json prints",
    },
    "run": {
        "json": "run() returns the arrays",
        "synthesize-missing": "synthetic inputs: a Python caller makes its arrays",
        "seed": "synthetic inputs' seed",
        "shape": "synthetic inputs' shapes",
        "int-range": "synthetic inputs' integer range",
        "output-dir": "the outputs are returned; numpy.save writes them",
        "save-inputs": "the caller holds its inputs",
        "expect": "comparing with a reference: numpy.testing in Python",
        "tolerance": "comparing with a reference: numpy.testing in Python",
        "compare-onnxrt": "ONNX Runtime is at hand in Python (docs/onnxruntime-users.md)",
        "mark-outputs": "a comparison with ONNX Runtime, which Python callers run themselves",
        "onnxrt-model": "the comparison's ONNX Runtime model",
        "atol": "the comparison's tolerance",
        "rtol": "the comparison's tolerance",
        "python": "the comparison's interpreter",
    },
    "generate": {
        "json": "generate() returns the arrays",
        "bench": "a benchmark of the command line; Python callers time their own calls",
    },
}


@pytest.mark.parametrize("command", sorted(PRIMARY))
def test_every_cli_option_has_its_python_keyword(command):
    options = cli_options(command)
    missing = []
    for option in sorted(options):
        name = option.replace("-", "_")
        if name in params(PRIMARY[command]):
            continue
        if option in ELSEWHERE[command]:
            fn, keyword = ELSEWHERE[command][option]
            assert keyword in params(fn), "%s --%s: %s has no keyword %r" % (command, option, fn.__qualname__, keyword)
            continue
        if CLI_ONLY[command].get(option):
            continue
        missing.append(option)
    assert not missing, "reforge %s options without a Python keyword or a reason: %s" % (command, missing)
    # The lists name only options the CLI has.
    stale = (set(ELSEWHERE[command]) | set(CLI_ONLY[command])) - options
    assert not stale, "listed for reforge %s but not among its options: %s" % (command, sorted(stale))
