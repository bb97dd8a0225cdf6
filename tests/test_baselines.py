"""Every library baseline, on the CPU, through the same checks as the hand-written kernels.

The CuPy baselines are written against the array module of their inputs, so here they run on
NumPy (scipy.sparse for the neighbor adjacency); the torch baselines run on CPU tensors and
the Triton kernels in Triton's interpreter. Whatever is not installed is skipped with the
reason; the GPU suite runs all of them on the device.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import padded_output

from kernelkit import spec as specs
from kernelkit.output_check import check_case
from kernelkit.inputs import rng_for
from kernelkit.spec import shape_name

KERNELS = [name for name in specs.available() if specs.load(name).baselines]
BASELINES = [(kernel, layout) for kernel in KERNELS for layout in specs.load(kernel).baselines]
# The interpreter runs Triton programs one by one in Python: keep its shapes small.
INTERPRETER_MAX_ELEMENTS = 40_000


def test_the_five_seed_operations_have_all_three_baselines():
    for kernel in ("matmul", "layernorm", "bias_gelu", "triangle", "neighbor"):
        assert {"cupy", "torch", "triton"} <= set(specs.load(kernel).baselines), kernel


def unavailable(kernel: str, layout: str) -> str | None:
    package = specs.load(kernel).baselines[layout].package
    needed = {"cupy": ["numpy"] + (["scipy"] if kernel == "neighbor" else []), "torch": ["torch"],
              "triton": ["torch", "triton"]}[package]
    absent = [name for name in needed if importlib.util.find_spec(name) is None]
    return f"{', '.join(absent)} not installed here (the GPU suite runs this baseline)" if absent else None


def as_numpy(result) -> np.ndarray:
    return result.numpy() if hasattr(result, "numpy") else np.asarray(result)


def check_baseline(kernel: str, layout: str) -> int:
    """Every correctness case of one baseline on the CPU; returns how many were checked."""
    spec = specs.load(kernel)
    checked = 0
    for shape in spec.correctness_shapes:
        if layout == "triton" and np.prod(spec.output_shape(shape)) * shape[-1] > INTERPRETER_MAX_ELEMENTS:
            continue
        for pattern in spec.patterns:
            inputs = spec.make_inputs(shape, pattern, rng_for(spec.name, shape_name(shape), pattern))
            reference = spec.reference(inputs)
            scale = spec.error_scale(inputs) if spec.error_scale else None
            result = as_numpy(spec.baselines[layout].make_call(inputs, shape)())
            assert result.dtype == np.float32 and result.shape == spec.output_shape(shape), (shape, result.dtype)
            verdict = check_case(padded_output(result), reference, spec.tolerance, scale=scale)
            assert verdict["passed"], (shape, pattern, verdict)
            checked += 1
    return checked


@pytest.mark.parametrize("kernel,layout", BASELINES)
def test_baseline_passes_every_correctness_case(kernel, layout):
    reason = unavailable(kernel, layout)
    if reason:
        pytest.skip(reason)
    spec = specs.load(kernel)
    if layout == "triton":
        # The interpreter is chosen when Triton is imported, so it runs in its own process and
        # leaves this one (and the GPU suite, when both run) with compiled Triton.
        code = ("import json, sys; sys.path[:0] = sys.argv[1:3]; import test_baselines as t; "
                "print(json.dumps(t.check_baseline(sys.argv[3], 'triton')))")
        tests = os.path.dirname(__file__)
        done = subprocess.run([sys.executable, "-c", code, tests, os.path.join(tests, "..", "workflow"), kernel],
                              capture_output=True, text=True, timeout=600, env={**os.environ, "TRITON_INTERPRET": "1"})
        assert done.returncode == 0, done.stderr[-3000:]
        checked = json.loads(done.stdout.strip().splitlines()[-1])
    else:
        checked = check_baseline(kernel, layout)
    assert checked >= 2 * len(spec.patterns)


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_baseline_that_drops_its_last_output_fails_the_same_checks(kernel):
    """The checks that pass the baselines would catch one that returned a short answer."""
    spec = specs.load(kernel)
    shape = spec.correctness_shapes[-1]
    inputs = spec.make_inputs(shape, "normal", rng_for(spec.name, shape_name(shape), "normal"))
    reference = spec.reference(inputs).astype(np.float32)
    verdict = check_case(padded_output(reference, unwritten=[reference.size - 1]), spec.reference(inputs), spec.tolerance)
    assert not verdict["passed"] and "sentinel" in verdict["symptom"]
