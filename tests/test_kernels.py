"""Kernel specs and the correctness check, on the CPU.

The reference is checked against values worked out by hand; the check is exercised with
the float32 NumPy emulation in kernels/rmsnorm/emulation.py, including the two negative-control bugs, so it is
shown to pass the right answer and to fail the wrong ones for the reasons it reports.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import padded_output

from kernelkit import spec as specs
from kernelkit.cases import prepare_case, prepare_cases
from kernelkit.output_check import GUARD_ELEMENTS, check_case
from kernelkit.inputs import PATTERNS, pattern_array, rng_for

RMSNORM = specs.load("rmsnorm")


def test_rmsnorm_reference_matches_hand_computation():
    # Row [3, 4]: mean square 12.5, so y = x * w / sqrt(12.5 + 1e-5).
    # Row [0, 0]: 0 / sqrt(1e-5) = 0 exactly (the epsilon keeps it finite).
    x = np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    w = np.array([2.0, 0.5], dtype=np.float32)
    y = RMSNORM.reference({"x": x, "weight": w})
    rms = np.sqrt(12.5 + 1e-5)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y[0], [6.0 / rms, 2.0 / rms], rtol=1e-15)
    assert y[0, 0] == pytest.approx(1.6970556, abs=1e-7)
    assert y[1].tolist() == [0.0, 0.0]


def test_correctness_suite_is_48_cases_with_the_seed_widths():
    widths = sorted({shape[1] for shape in RMSNORM.correctness_shapes})
    assert widths == [1, 31, 33, 127, 4096, 8193]
    assert list(RMSNORM.layouts)[:2] == ["t32", "t256"]  # the seed's two layouts: 48 cases
    assert len(RMSNORM.correctness_shapes) * len(RMSNORM.patterns) * 2 == 48
    assert RMSNORM.patterns == PATTERNS


def test_a_suite_makes_each_cases_reference_once_and_gives_every_layout_the_same_one():
    matmul = specs.load("matmul")
    made = []
    spec = replace(matmul, reference=lambda inputs: made.append(1) or matmul.reference(inputs))
    cases = [((33, 65, 17), "normal"), ((64, 64, 64), "alternating")]
    layouts = ["tile16", "reg4x4", "tiled"]
    prepared = prepare_cases(spec, layouts, cases)
    assert len(made) == len(cases)
    assert [(case.layout, case.shape, case.pattern) for case in prepared] == [
        (layout, shape, pattern) for layout in layouts for shape, pattern in cases]
    for case in prepared:
        alone = prepare_case(spec, case.layout, case.shape, case.pattern)
        np.testing.assert_array_equal(case.reference, alone.reference)
        np.testing.assert_array_equal(case.scale, alone.scale)
        for name, array in alone.host_inputs.items():
            np.testing.assert_array_equal(case.host_inputs[name], array)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_input_patterns_are_fp32_deterministic_and_distinct(pattern):
    a = pattern_array(pattern, (3, 7), rng_for("t", pattern))
    b = pattern_array(pattern, (3, 7), rng_for("t", pattern))
    assert a.dtype == np.float32 and a.flags.c_contiguous
    np.testing.assert_array_equal(a, b)
    if pattern == "zeros":
        assert not a.any()
    if pattern == "small":
        assert 0 < np.abs(a).max() < 0.01
    if pattern == "alternating":
        assert (np.sign(a[:, :-1]) == -np.sign(a[:, 1:])).all()


def test_large_inputs_are_drawn_in_fixed_chunks_whatever_the_cores(monkeypatch):
    """Above CHUNK_ELEMENTS an array is drawn chunk by chunk on all cores: the same values on one
    core as on many, a normal distribution in every chunk, and `small` a thousandth of `normal`.
    Up to CHUNK_ELEMENTS the values are those of one float64 draw, as before the chunks."""
    from kernelkit import inputs

    shape = (3, inputs.CHUNK_ELEMENTS // 2 + 1)  # a whole chunk and a half one
    many = pattern_array("normal", shape, rng_for("t", "large"))
    monkeypatch.setattr(inputs.os, "cpu_count", lambda: 1)
    one = pattern_array("normal", shape, rng_for("t", "large"))
    assert many.dtype == np.float32 and many.shape == shape and many.flags.c_contiguous
    np.testing.assert_array_equal(many, one)
    flat = many.reshape(-1)
    chunks = [flat[: inputs.CHUNK_ELEMENTS], flat[inputs.CHUNK_ELEMENTS :]]
    assert all(abs(chunk.mean()) < 0.01 and abs(chunk.std() - 1) < 0.01 for chunk in chunks)
    assert not np.array_equal(chunks[0][:1000], chunks[1][:1000])
    small = pattern_array("small", shape, rng_for("t", "large"))
    np.testing.assert_allclose(small, many * np.float32(1e-3), rtol=1e-6)
    modest = (7, 11)
    np.testing.assert_array_equal(pattern_array("normal", modest, rng_for("t", "modest")),
                                  rng_for("t", "modest").standard_normal(modest).astype(np.float32))


# kernels/rmsnorm/emulation.py: the kernel's arithmetic in float32, and its controls'.
EMULATE = specs.load_emulation(RMSNORM)


def case(shape, pattern):
    inputs = RMSNORM.make_inputs(shape, pattern, rng_for("rmsnorm", shape, pattern))
    return inputs, RMSNORM.reference(inputs)


@pytest.mark.parametrize("shape", RMSNORM.correctness_shapes)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_float32_emulation_passes_every_case(shape, pattern):
    inputs, ref = case(shape, pattern)
    verdict = check_case(padded_output(EMULATE(inputs, "t32")[0]), ref, RMSNORM.tolerance)
    assert verdict["passed"], verdict
    assert verdict["max_abs_error"] < 1e-5


def test_epsilon_mutation_is_caught_as_nan_on_zeros():
    inputs, ref = case((8, 33), "zeros")
    verdict = check_case(padded_output(EMULATE(inputs, "t32", "epsilon")[0]), ref, RMSNORM.tolerance)
    assert not verdict["passed"]
    assert verdict["symptom"] == "NaN in 264 and Inf in 0 output elements"
    assert verdict["nonfinite"] == 264


def test_tail_mutation_is_caught_as_sentinel_left():
    inputs, ref = case((8, 31), "normal")
    verdict = check_case(padded_output(*EMULATE(inputs, "t32", "tail")), ref, RMSNORM.tolerance)
    assert not verdict["passed"]
    assert verdict["symptom"] == "sentinel left in 8 output elements"
    assert verdict["worst_flat_index"] == 30  # row 0, last column


def test_a_zero_output_fails_even_where_values_are_tiny():
    inputs, ref = case((8, 127), "small")
    verdict = check_case(padded_output(np.zeros_like(ref)), ref, RMSNORM.tolerance)
    assert not verdict["passed"] and "error above tolerance" in verdict["symptom"]


def test_guard_overwrite_and_small_errors_are_caught():
    inputs, ref = case((8, 33), "normal")
    bits = padded_output(EMULATE(inputs, "t32")[0])
    bits[GUARD_ELEMENTS + ref.size] = np.float32(0).view(np.uint32)  # one write past the end
    assert check_case(bits, ref, RMSNORM.tolerance)["symptom"] == "1 guard elements overwritten"

    off = EMULATE(inputs, "t32")[0].copy()
    off[3, 5] += 1e-3
    verdict = check_case(padded_output(off), ref, RMSNORM.tolerance)
    assert verdict["symptom"] == "error above tolerance in 1 output elements"
    assert verdict["worst_flat_index"] == 3 * 33 + 5


NVCC = shutil.which("nvcc")


def test_planted_slowdown_fixture_keeps_the_answer_and_the_controls(tmp_path):
    import importlib.util

    module_spec = importlib.util.spec_from_file_location("planted", Path(__file__).parent / "fixtures" / "planted_slowdown.py")
    planted = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(planted)
    folder = planted.write_planted(tmp_path)
    spec = specs.load("rmsnorm", tmp_path)
    assert spec.source_sha256() != RMSNORM.source_sha256()
    assert spec.source_text().count("sum_squares += v * v;") == 2
    for control in spec.mutations:  # the negative controls still apply to the planted source
        assert spec.source_text(control) != spec.source_text()
    if NVCC:
        done = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "p.cubin"), str(folder / "rmsnorm.cu")],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
