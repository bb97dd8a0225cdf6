"""Every kernel folder, on the CPU: its mutations, its sm_90 build, its reference and tolerance.

The tolerance of each operation is exercised with the float32 NumPy emulation in its folder
(kernels/<name>/emulation.py): the emulation must pass every correctness case and each emulated
negative control must fail, which shows the tolerance is neither too tight for FP32 nor loose
enough to hide the bugs. These tests know no operation by name, except where stated; a folder
written by `kernelkit new` goes through the same ones (test_new_kernel.py). The index formulas
of particular hand-written layouts are checked in test_kernel_layouts.py.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import padded_output

from kernelkit import spec as specs
from kernelkit.output_check import check_case
from kernelkit.inputs import rng_for
from kernelkit.spec import shape_name

KERNELS = specs.available()
NVCC = shutil.which("nvcc")
# The folder `kernelkit new` writes, checked by the same tests as every committed folder.
NEW_KERNEL = "new_scaled_copy"


@pytest.fixture(scope="module")
def new_kernel_root(tmp_path_factory):
    from kernelkit.cli import main

    root = tmp_path_factory.mktemp("kernels")
    assert main(["new", NEW_KERNEL, "--kernels", str(root)]) == 0
    return root


@pytest.fixture(params=[*KERNELS, NEW_KERNEL])
def spec(request):
    """Each kernel folder's spec; the last one is a folder just written by `kernelkit new`."""
    if request.param == NEW_KERNEL:
        return specs.load(NEW_KERNEL, request.getfixturevalue("new_kernel_root"))
    return specs.load(request.param)


def test_the_seed_operations_are_present():
    assert {"rmsnorm", "matmul", "layernorm", "bias_gelu", "triangle", "neighbor"} <= set(KERNELS)


def test_each_mutation_applies_once_and_changes_the_source(spec):
    assert len(spec.mutations) >= 2
    for control in spec.mutations:
        assert spec.source_text(control) != spec.source_text()
        assert spec.source_sha256(control) != spec.source_sha256()


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on the PATH, so the sm_90 compile check cannot run")
def test_kernel_and_mutations_compile_for_sm90(tmp_path, spec):
    # The source with each layout's own options, as the kit builds it; every mutation with the spec's
    # options, without NVVM's optimiser (a mutation changes a line, so what can fail is the front end
    # and code generation; the optimiser took two thirds of a matmul build).
    builds = [(None, tuple(options)) for options in {tuple(spec.compile_options),
                                                     *(spec.compile_options_of(layout) for layout in spec.layouts)}]
    builds += [(control, (*spec.compile_options, "-Xcicc", "-O0")) for control in spec.mutations]

    def compile_one(number: int, control: str | None, options: tuple[str, ...]) -> subprocess.CompletedProcess:
        source = tmp_path / f"{number}.cu"
        source.write_text(spec.source_text(control))
        return subprocess.run(
            [NVCC, "-arch=sm_90", "-cubin", *options, "-o", str(tmp_path / f"{number}.cubin"), str(source)],
            capture_output=True, text=True, timeout=120,
        )

    unique = list(dict.fromkeys(builds))  # layouts often share their options
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        done = list(pool.map(compile_one, range(len(unique)), *zip(*unique)))
    for (control, options), compiled in zip(unique, done):
        assert compiled.returncode == 0, (control, options, compiled.stderr)


def case(spec, shape, pattern):
    inputs = spec.make_inputs(shape, pattern, rng_for(spec.name, shape_name(shape), pattern))
    scale = spec.error_scale(inputs) if spec.error_scale else None
    return inputs, spec.reference(inputs), scale


def test_an_all_zero_output_fails_the_normal_cases(spec):
    for shape in spec.correctness_shapes:
        inputs, ref, scale = case(spec, shape, "normal")
        verdict = check_case(padded_output(np.zeros_like(ref)), ref, spec.tolerance, scale=scale)
        assert not verdict["passed"], (shape, verdict)


def test_float32_emulation_passes_and_every_emulated_control_is_caught(spec):
    """Each folder's emulation.py: its kernel passes every case, each control fails at least one."""
    emulate = specs.load_emulation(spec)
    # A race cannot happen in the emulation, which runs in order: such controls say so, and the GPU
    # suite shows them caught (by determinism or racecheck); every other control is emulated.
    emulated = {name: mutation for name, mutation in spec.mutations.items() if not mutation.needs_gpu_to_show}
    caught = {control: 0 for control in emulated}
    for shape in spec.correctness_shapes:
        for pattern in spec.patterns:
            inputs, ref, scale = case(spec, shape, pattern)
            for layout in spec.layouts:
                verdict = check_case(padded_output(*emulate(inputs, layout)), ref, spec.tolerance, scale=scale)
                assert verdict["passed"], (shape, pattern, layout, verdict)
                for control in emulated:
                    mutated = padded_output(*emulate(inputs, layout, control))
                    caught[control] += not check_case(mutated, ref, spec.tolerance, scale=scale)["passed"]
    assert all(count > 0 for count in caught.values()), caught


def test_references_match_hand_computation():
    matmul = specs.load("matmul")
    a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    assert matmul.reference({"a": a, "b": a}).tolist() == [[7.0, 10.0], [15.0, 22.0]]

    layernorm = specs.load("layernorm")
    ones = np.ones(4, dtype=np.float32)
    # Row [1, 2, 3, 4]: mean 2.5, variance 1.25, so y = (x - 2.5) / sqrt(1.25 + 1e-5).
    y = layernorm.reference({"x": np.array([[1, 2, 3, 4]], dtype=np.float32), "weight": ones, "bias": 0 * ones})
    np.testing.assert_allclose(y[0], (np.arange(1, 5) - 2.5) / np.sqrt(1.25 + 1e-5), rtol=1e-15)

    triangle = specs.load("triangle")
    a = np.array([[[1.0], [2.0]], [[3.0], [4.0]]], dtype=np.float32)
    # out[i, j] = sum_k a[i, k] a[j, k]: [[1+4, 3+8], [3+8, 9+16]]
    assert triangle.reference({"a": a, "b": a})[:, :, 0].tolist() == [[5.0, 11.0], [11.0, 25.0]]

    neighbor = specs.load("neighbor")
    x = np.array([[1.0], [10.0], [100.0]], dtype=np.float32)
    inputs = {"x": x, "indptr": np.array([0, 2, 2, 3], dtype=np.int32), "indices": np.array([1, 2, 0], dtype=np.int32)}
    assert neighbor.reference(inputs)[:, 0].tolist() == [110.0, 0.0, 1.0]

    gelu = specs.load("bias_gelu")
    y = gelu.reference({"x": np.array([[0.0, 1.0]], dtype=np.float32), "bias": np.zeros(2, dtype=np.float32)})
    # GELU_tanh(1) = 0.5 (1 + tanh(0.7978845608 * 1.044715)) = 0.8411919906
    assert y[0, 0] == 0.0 and y[0, 1] == pytest.approx(0.8411919906082768, abs=1e-12)


def test_neighbor_graph_is_fixed_by_the_node_count_and_has_isolated_nodes():
    neighbor = specs.load("neighbor")
    first = neighbor.make_inputs((100, 4), "normal", rng_for("a"))
    second = neighbor.make_inputs((100, 4), "zeros", rng_for("b"))
    np.testing.assert_array_equal(first["indptr"], second["indptr"])
    np.testing.assert_array_equal(first["indices"], second["indices"])
    degrees = np.diff(first["indptr"])
    assert (degrees == 0).any() and degrees.max() <= 32
    edges = int(first["indptr"][-1])
    # Compulsory: x, the CSR arrays and out once; issued: one gathered row of x per edge.
    assert neighbor.bytes_moved((100, 4)) == 4 * (400 + edges + 101 + 400)
    assert neighbor.bytes_issued((100, 4)) == 4 * (edges * 5 + 101 + 400)


def test_bytes_and_flops_are_positive_and_grow_with_the_shape(spec):
    small, large = (8,) * len(spec.dims), (64,) * len(spec.dims)
    assert 0 < spec.bytes_moved(small) < spec.bytes_moved(large)
    assert 0 < spec.flops(small) < spec.flops(large)
