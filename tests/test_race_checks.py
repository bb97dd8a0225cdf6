"""On the CPU: the determinism comparison, the sanitizer's gating decisions, the timed-shape
verification's comparison, the sanitizer's choice of cases and the barrier control's text.

Every launch here is a real float32 computation (the kernels' emulations, or reductions in
another order, as a race would reorder them); the sanitizer decisions read a clean record of the
tool's output as an earlier kit kept it (`_clean_sanitizer`), and output shaped like it with findings.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, default_config, padded_output

from kernelkit import KitError, determinism, sanitizer, spec as specs, tools, verify
from kernelkit.cases import CheckSettings, sanitizer_cases
from kernelkit.controls import catching_check
from kernelkit.output_check import check_case
from kernelkit.inputs import rng_for
from kernelkit.records import write_record

RMSNORM = specs.load("rmsnorm")
EMULATE = specs.load_emulation(RMSNORM)


def _inputs(shape, pattern="normal"):
    return RMSNORM.make_inputs(shape, pattern, rng_for("rmsnorm", specs.shape_name(shape), pattern))


def _reordered_rmsnorm(inputs, order_seed):
    """rmsnorm in float32 with each row's sum of squares added up in a shuffled order: what a
    reduction whose partial sums race yields (right within tolerance, different bits)."""
    x = inputs["x"].astype(np.float32)
    order = np.random.default_rng(order_seed).permutation(x.shape[1])
    total = np.zeros((x.shape[0], 1), dtype=np.float32)
    for column in order:
        total += x[:, column : column + 1] * x[:, column : column + 1]
    inv_rms = np.float32(1) / np.sqrt(total / np.float32(x.shape[1]) + np.float32(1e-5))
    return x * inputs["weight"].astype(np.float32) * inv_rms


def test_identical_launches_compare_equal_and_reordered_sums_do_not():
    inputs = _inputs((8, 4096))
    same = [padded_output(EMULATE(inputs, "t256")[0]) for _ in range(3)]
    assert determinism.compare_launches(same) == {"deterministic": True, "launches": 3, "differing_elements": 0}

    raced = [padded_output(_reordered_rmsnorm(inputs, seed)) for seed in range(3)]
    comparison = determinism.compare_launches(raced)
    assert not comparison["deterministic"] and 0 < comparison["differing_elements"] <= 8 * 4096
    # The raced launches are each right within tolerance: only the determinism check sees them.
    reference = RMSNORM.reference(inputs)
    assert all(check_case(bits, reference, RMSNORM.tolerance)["passed"] for bits in raced)


def test_judge_fails_a_passing_case_that_did_not_repeat_unless_declared():
    inputs = _inputs((8, 127))
    reference = RMSNORM.reference(inputs)
    raced = [padded_output(_reordered_rmsnorm(inputs, seed)) for seed in range(4)]
    verdict = check_case(raced[0], reference, RMSNORM.tolerance)
    comparison = determinism.compare_launches(raced)
    assert verdict["passed"] and not comparison["deterministic"]

    judged = determinism.judge(verdict, comparison, None)
    assert not judged["passed"] and judged["symptom"] == determinism.DIFFER_SYMPTOM
    assert catching_check(judged) == "determinism"
    exempt = determinism.judge(verdict, comparison, "atomics add in arrival order")
    assert exempt["passed"] and exempt["deterministic"] is False
    assert exempt["nondeterministic_reason"] == "atomics add in arrival order"

    # A case that already failed keeps the symptom that explains it first.
    tail = padded_output(*EMULATE(inputs, "t32", "tail"))
    failed = check_case(tail, reference, RMSNORM.tolerance)
    judged = determinism.judge(failed, comparison, None)
    assert judged["symptom"].startswith("sentinel left") and catching_check(judged) == "correctness"


def test_determinism_runs_come_from_the_schema_and_are_bounded():
    assert CheckSettings.from_config(default_config()).determinism_runs == 3
    assert CheckSettings.from_json('{"checks": {}}').determinism_runs == 3
    assert CheckSettings.from_json('{"checks": {"determinism_runs": 1}}').determinism_runs == 1
    with pytest.raises(KitError, match=r"'checks.determinism_runs' must be an integer from 1 to 100"):
        CheckSettings.from_json('{"checks": {"determinism_runs": 0}}')


def _clean_sanitizer(layout):
    """A clean sanitizer record of one layout as kits before the per-kernel record wrote it: each
    tool's last lines of output, its summary line last. That kit's parser read memcheck's summary
    line only, so racecheck's `errors` is null and its status says it did not run to its summary."""
    passed = (f"ok {layout:>8}   8x4096 normal       max|err| 6.332e-07  worst [1, 1728]  \n"
              f"rmsnorm {layout}: all 24 cases passed, largest |error| 6.3322e-07\n")
    return {"kernel": "rmsnorm", "layout": layout, "source_sha256": "7" * 64, "tools": {
        "memcheck": {"errors": 0, "exit_code": 0, "status": "ran", "tail": passed + "========= ERROR SUMMARY: 0 errors"},
        "racecheck": {"errors": None, "exit_code": 0, "status": "did not run to its summary",
                      "tail": passed + "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"}}}


def test_clean_sanitizer_output_has_no_findings():
    for layout in ("t32", "t256"):
        record = _clean_sanitizer(layout)
        # The file's own `errors` for racecheck is null (an older parser); the rule re-reads the tail.
        for result in record["tools"].values():
            result["errors"] = sanitizer.sanitizer_errors(result["tail"])
        assert sanitizer.findings(record) == []


def _with_racecheck(record, summary, exit_code=0):
    changed = json.loads(json.dumps(record))
    tail = changed["tools"]["racecheck"]["tail"].rsplit("\n", 1)[0] + "\n" + summary
    errors = sanitizer.sanitizer_errors(tail)
    changed["tools"]["racecheck"].update(tail=tail, errors=errors, exit_code=exit_code,
                                         status="ran" if errors is not None else "did not run to its summary")
    return changed


def test_hazards_a_non_zero_exit_or_a_missing_summary_each_forbid_timing():
    clean = _clean_sanitizer("t256")
    for result in clean["tools"].values():
        result["errors"] = sanitizer.sanitizer_errors(result["tail"])
    hazards = _with_racecheck(clean, "========= RACECHECK SUMMARY: 24 hazards displayed (24 errors, 0 warnings)")
    assert sanitizer.findings(hazards) == ["racecheck reports 24 hazards"]
    warnings = _with_racecheck(clean, "========= RACECHECK SUMMARY: 3 hazards displayed (0 errors, 3 warnings)")
    assert sanitizer.findings(warnings) == ["racecheck reports 3 hazards"]
    crashed = _with_racecheck(clean, "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)", 2)
    assert sanitizer.findings(crashed) == ["racecheck exited with code 2 (ran)"]
    cut = _with_racecheck(clean, "========= Error: process didn't terminate successfully")
    assert sanitizer.findings(cut) == ["racecheck did not run to its summary"]
    assert sanitizer.findings({"skipped": "compute-sanitizer is not on the PATH"}) == []


def _kernel_record(clean, layouts=("t32", "t256", "vec")):
    """A record of the kernel's layouts checked together, as `kernelkit sanitize` writes it, made
    from a committed clean record of one layout."""
    return {"kernel": "rmsnorm", "layouts": list(layouts), "source_sha256": RMSNORM.source_sha256(),
            "cases": [f"{specs.shape_name(shape)} {pattern}" for shape, pattern in sanitizer_cases(RMSNORM)],
            "tools": clean["tools"]}


def test_require_clean_gates_on_findings_and_on_the_source(tmp_path):
    clean = _clean_sanitizer("t256")
    for result in clean["tools"].values():
        result["errors"] = sanitizer.sanitizer_errors(result["tail"])
    path = tmp_path / "rmsnorm.json"
    write_record(path, _kernel_record(clean))
    for layout in ("t32", "t256", "vec"):
        sanitizer.require_clean(RMSNORM, layout, str(path))
    write_record(path, _kernel_record(clean, ["t32", "t256"]))
    with pytest.raises(KitError, match="not a sanitizer record of layout 'vec' on this source"):
        sanitizer.require_clean(RMSNORM, "vec", str(path))
    write_record(path, {"kernel": "rmsnorm", "layouts": ["t256"], "source_sha256": RMSNORM.source_sha256(),
                        "skipped": "compute-sanitizer is not on the PATH"})
    sanitizer.require_clean(RMSNORM, "t256", str(path))  # absent tool: timing goes on, the report says so
    hazards = _with_racecheck(clean, "========= RACECHECK SUMMARY: 24 hazards displayed (24 errors, 0 warnings)")
    write_record(path, _kernel_record(hazards))
    with pytest.raises(KitError, match=r"racecheck reports 24 hazards; nothing will be timed"):
        sanitizer.require_clean(RMSNORM, "vec", str(path))
    # Where the joint run found something, each layout's own run decides.
    write_record(path, {**_kernel_record(hazards), "by_layout": {"t32": {"tools": hazards["tools"]},
                                                                 "t256": {"tools": clean["tools"]},
                                                                 "vec": {"tools": clean["tools"]}}})
    sanitizer.require_clean(RMSNORM, "t256", str(path))
    with pytest.raises(KitError, match=r"racecheck reports 24 hazards; nothing will be timed"):
        sanitizer.require_clean(RMSNORM, "t32", str(path))
    write_record(path, {**_kernel_record(clean), "source_sha256": RMSNORM.source_sha256("barrier")})
    with pytest.raises(KitError, match="not a sanitizer record of layout 't256' on this source"):
        sanitizer.require_clean(RMSNORM, "t256", str(path))
    # A record of one layout, as earlier kits wrote them, still reads.
    write_record(path, {**clean, "source_sha256": RMSNORM.source_sha256()})
    sanitizer.require_clean(RMSNORM, "t256", str(path))
    with pytest.raises(KitError, match="not a sanitizer record of layout 't32'"):
        sanitizer.require_clean(RMSNORM, "t32", str(path))


def test_per_layout_entries_read_like_the_records_of_earlier_kits():
    clean = _clean_sanitizer("t256")
    record = _kernel_record(clean, ["t32", "vec"])
    entries = sanitizer.per_layout(record)
    assert [(entry["kernel"], entry["layout"]) for entry in entries] == [("rmsnorm", "t32"), ("rmsnorm", "vec")]
    assert all(entry["tools"] == clean["tools"] and entry["cases"] == record["cases"] for entry in entries)
    assert all(entry["checked_together"] == ["t32", "vec"] for entry in entries)
    # A layout's own run, made because the joint run found something, is not the joint run's.
    rerun = sanitizer.per_layout({**record, "by_layout": {"vec": {"tools": clean["tools"]}}})
    assert "checked_together" in rerun[0] and "checked_together" not in rerun[1]
    assert sanitizer.per_layout(clean) == [clean]
    skipped = sanitizer.per_layout({"kernel": "rmsnorm", "layouts": ["t32"], "skipped": "no tool"})
    assert skipped == [{"kernel": "rmsnorm", "layout": "t32", "skipped": "no tool"}]


def test_sanitizer_cases_drop_only_the_largest_shape_and_use_one_pattern():
    for name in specs.available():
        spec = specs.load(name)
        cases = sanitizer_cases(spec)
        shapes = [shape for shape, _ in cases]
        assert {pattern for _, pattern in cases} == {"normal"}
        assert len(shapes) == max(1, len(spec.correctness_shapes) - 1) and set(shapes) <= set(spec.correctness_shapes)
        largest = max(int(np.prod(spec.output_shape(s))) for s in spec.correctness_shapes)
        assert len(spec.correctness_shapes) < 2 or all(int(np.prod(spec.output_shape(s))) <= largest for s in shapes)
    # rmsnorm keeps widths 1 and 31 (below one warp), 33 and 127 (tails), 4096 (many trips of both block sizes).
    assert [shape for shape, _ in sanitizer_cases(RMSNORM)] == [(8, 1), (8, 31), (8, 33), (8, 127), (8, 4096)]


def test_barrier_control_removes_only_the_reduction_loops_barrier():
    source = RMSNORM.source_text()
    mutated = RMSNORM.source_text("barrier")
    assert mutated.count("__syncthreads();") == source.count("__syncthreads();") - 1
    loops = [text[text.index("for (int stride"):text.index("const float inv_rms")] for text in (source, mutated)]
    assert "__syncthreads" in loops[0] and "__syncthreads" not in loops[1]
    assert "partial[threadIdx.x] += partial[threadIdx.x + stride];" in loops[1]
    # Everything after the scalar kernel's reduction (the vec kernel's barriers included) is untouched.
    assert source[source.index("const float inv_rms"):] == mutated[mutated.index("const float inv_rms"):]
    assert RMSNORM.mutation("barrier").needs_gpu_to_show  # the CPU emulation cannot race


def test_verification_compares_the_timed_shape_with_float64():
    shape = (16, 8194)  # wider than any correctness shape
    inputs = _inputs(shape)
    reference = RMSNORM.reference(inputs)
    good = verify.compare(EMULATE(inputs, "t256")[0], reference, RMSNORM.tolerance)
    assert good["passed"] and good["mismatched"] == 0 and 0 < good["max_abs_error"] < 1e-5
    assert good["elements"] == 16 * 8194

    # The planted fixture's arithmetic: 0.1% too large beyond 8193 columns.
    wrong = EMULATE(inputs, "t256")[0] * np.float32(1.001)
    verdict = verify.compare(wrong, reference, RMSNORM.tolerance)
    assert not verdict["passed"] and verdict["mismatched"] > 0.9 * verdict["elements"]
    sentence = verify.failure_sentence("rmsnorm", "16x8194", "t256", verdict)
    assert sentence.startswith("rmsnorm 16x8194 t256: output at the timed shape differs from the float64 reference in ")
    assert sentence.endswith("; nothing timed") and f"max |err| {verdict['max_abs_error']:.3e}" in sentence

    unwritten = EMULATE(inputs, "t256")[0].copy()
    unwritten[3, -1] = np.nan  # the NaN the verification fills in before its call
    verdict = verify.compare(unwritten, reference, RMSNORM.tolerance)
    assert verdict["mismatched"] == verdict["nonfinite"] == 1 and "1 of them NaN or Inf" in verify.failure_sentence(
        "rmsnorm", "16x8194", "t256", verdict)


def test_verification_uses_the_error_scale_of_reductions():
    matmul = specs.load("matmul")
    emulate = specs.load_emulation(matmul)
    shape = (256, 1500, 64)  # K beyond the largest correctness shape
    inputs = matmul.make_inputs(shape, "normal", rng_for("matmul", specs.shape_name(shape), "normal"))
    out = emulate(inputs, "reg4x4")[0]
    reference, scale = matmul.reference(inputs), matmul.error_scale(inputs)
    assert verify.compare(out, reference, matmul.tolerance, scale)["passed"]
    assert verify.compare(out, reference, matmul.tolerance, scale)["tolerance"]["scale"] == "error_scale"


def test_small_timed_shapes_take_their_reference_from_the_cpu_and_large_ones_do_not():
    small = (512, 128)
    inputs = RMSNORM.make_inputs(small, "normal", rng_for("rmsnorm", "512x128", "normal"))
    reference, scale, where = verify.small_reference(RMSNORM, small, inputs)
    assert where == verify.CPU_SMALL and scale is None
    np.testing.assert_array_equal(reference, RMSNORM.reference(inputs))
    assert verify.compare(EMULATE(inputs, "t32")[0], reference, RMSNORM.tolerance)["passed"]
    # Above either limit the GPU computes it (the inputs are not even read).
    assert verify.small_reference(RMSNORM, (8192, 256), inputs) is None  # 2^21 output elements
    matmul = specs.load("matmul")
    assert verify.small_reference(matmul, (1024, 1024, 1024), {}) is None  # 2^20 elements, 2^31 FLOPs
    shape = (64, 64, 64)
    inputs = matmul.make_inputs(shape, "normal", rng_for("matmul", "64x64x64", "normal"))
    reference, scale, _ = verify.small_reference(matmul, shape, inputs)
    np.testing.assert_array_equal(scale, matmul.error_scale(inputs))


def _fixtures():
    module_spec = importlib.util.spec_from_file_location("broken", Path(__file__).parent / "fixtures" / "broken_kernels.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_broken_fixtures_change_only_what_they_say_and_build(tmp_path):
    fixtures = _fixtures()
    barrier = specs.load("rmsnorm", Path(fixtures.write_barrier_removed(tmp_path / "barrier")).parent)
    assert barrier.source_text() == RMSNORM.source_text("barrier")
    assert set(barrier.mutations) == set(RMSNORM.mutations) - {"barrier"}
    wrong = specs.load("rmsnorm", Path(fixtures.write_wrong_beyond_checks(tmp_path / "wrong")).parent)
    assert "cols > 8193 ? 1.001f : 1.0f" in wrong.source_text()
    assert max(cols for _, cols in wrong.correctness_shapes) == fixtures.WIDEST_CHECKED_COLUMNS
    nvcc = shutil.which("nvcc")
    if nvcc:
        for spec in (barrier, wrong):
            done = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(spec.source_path)],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr


def test_neighbor_reference_written_for_any_array_module_matches_a_scatter_add():
    neighbor = specs.load("neighbor")
    shape = (2000, 16)
    inputs = neighbor.make_inputs(shape, "normal", rng_for("neighbor", specs.shape_name(shape), "normal"))
    indptr, x = inputs["indptr"], inputs["x"].astype(np.float64)
    scattered = np.zeros((shape[0], shape[1]))
    np.add.at(scattered, np.repeat(np.arange(shape[0]), np.diff(indptr)), x[inputs["indices"]])
    assert np.abs(neighbor.reference(inputs) - scattered).max() < 1e-12
    assert (np.diff(indptr) == 0).any()  # nodes without edges get exact zeros too
    assert (neighbor.reference(inputs)[np.diff(indptr) == 0] == 0).all()


def test_report_names_the_check_that_caught_each_control(tmp_path):
    from types import SimpleNamespace

    from synthetic import write_run

    from kernelkit import document as doc
    from kernelkit.report.checks import section_controls

    # A control record as kits before the determinism check and racecheck joined the controls wrote it.
    committed = json.loads((write_run(tmp_path, "older", legacy=True) / "controls" / "rmsnorm" / "tail.json").read_text())
    assert "caught_in_layouts" not in committed
    raced = {**committed, "control": "barrier", "mutation": {**committed["mutation"], "why": "barrier removed"},
             "cases": [{**case, "passed": True, "symptom": "none"} for case in committed["cases"]],
             "caught_by": {"layout": "t32", "check": "racecheck", "symptom": "racecheck reports 24 shared-memory hazards"},
             "caught_in_layouts": {"t32": "racecheck", "t256": "determinism"}}
    # Since 2026-12-01 one racecheck run covers several layouts: it says the race was seen, not in which.
    joint = {"layouts": ["t32", "t256", "vec"], "hazards": 10, "errors": 10, "exit_code": 2, "status": "ran"}
    together = {**raced, "caught_in_layouts": {"t32": None, "t256": None, "vec": None}, "racecheck": joint,
                "caught_by": {"layouts": joint["layouts"], "check": "racecheck", "symptom": sanitizer.racecheck_symptom(joint)}}
    beside = {**together, "caught_in_layouts": {"t32": None, "t256": "determinism", "vec": None},
              "cases": committed["cases"], "caught_by": committed["caught_by"]}
    missed = {**together, "racecheck": {**joint, "hazards": 0}}
    section = section_controls(SimpleNamespace(controls=[committed, raced, together, beside, missed]))
    table = next(block for block in section.blocks if isinstance(block, doc.Table))
    old, new, one_run, both, _ = table.rows
    assert old[-1].startswith("t32 8x") and "caught by" not in old[-1]  # records before the new checks read as before
    assert new[3] == f"0/{len(committed['cases'])}" and new[4] == "none"
    assert new[-1] == "t32: racecheck reports 24 shared-memory hazards (caught by t32: racecheck, t256: determinism)"
    assert one_run[-1] == "racecheck reports 10 shared-memory hazards over t32, t256 and vec in one run"
    assert both[-1].endswith("(caught by t256: determinism; racecheck: 10 hazards over t32, t256, vec in one run)")
    assert section.summary == "Negative controls: 4 of 5 mutated builds were caught by the checks"


def test_a_nondeterministic_declaration_must_name_a_layout_and_a_reason(tmp_path):
    target = tmp_path / "rmsnorm"
    shutil.copytree(REPO / "kernels" / "rmsnorm", target)
    spec_file = target / "spec.py"
    original = spec_file.read_text()
    for declared, accepted in (('{"t32": "atomics add in arrival order"}', True), ('{"t64": "atomics"}', False),
                               ('{"t32": " "}', False)):
        head, closing, tail = original.rpartition(",\n)")  # the end of SPEC = KernelSpec(...)
        spec_file.write_text(f"{head},\n    nondeterministic={declared}{closing}{tail}")
        if accepted:
            assert specs.load("rmsnorm", tmp_path).nondeterministic == {"t32": "atomics add in arrival order"}
        else:
            with pytest.raises(KitError, match="declares layout .* nondeterministic; name a layout of the spec"):
                specs.load("rmsnorm", tmp_path)


@pytest.mark.parametrize("arguments, message", [
    (["--layout", "t32", "--control", "barrier", "--output", "x.json"],
     "--control builds hand-written layouts with a mutation and writes nothing"),
    (["--layout", "t32", "--control", "nosuch"], "negative control 'nosuch' is not defined for kernel 'rmsnorm'"),
    (["--settings", '{"checks": {"determinism_runs": 0}}'], "'checks.determinism_runs' must be an integer from 1 to 100"),
])
def test_correctness_command_refuses_bad_arguments_before_any_gpu_work(tmp_path, capsys, arguments, message):
    from kernelkit.cli import main

    arguments = [str(tmp_path / a) if a == "x.json" else a for a in arguments]
    assert main(["correctness", "--kernel", "rmsnorm", *arguments]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelkit correctness: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.json").exists()


def test_report_sentences_count_determinism_and_verification_from_the_records(tmp_path):
    from synthetic import write_run

    from kernelkit.report.checks import determinism_sentence, verified_sentence

    # Records as kits before the determinism check and the timed-shape verification wrote them.
    older = write_run(tmp_path, "older", legacy=True)
    committed = json.loads((older / "correctness" / "rmsnorm" / "t32.json").read_text())
    assert determinism_sentence(committed["cases"]) is None  # made before the check: nothing is claimed

    inputs = _inputs((8, 127))
    reference = RMSNORM.reference(inputs)
    steady = [padded_output(EMULATE(inputs, "t32")[0]) for _ in range(3)]
    raced = [padded_output(_reordered_rmsnorm(inputs, seed)) for seed in range(3)]
    cases = []
    for layout, launches, exempt in (("t32", steady, None), ("t256", raced, None), ("t256", raced, "atomics")):
        judged = determinism.judge(check_case(launches[0], reference, RMSNORM.tolerance),
                                   determinism.compare_launches(launches), exempt)
        cases.append({**judged, "kernel": "rmsnorm", "layout": layout, "shape": "8x127", "pattern": "normal"})
    assert determinism_sentence(cases) == (
        "Determinism: each of 3 cases was launched 3 times on a freshly filled output; 2 did not repeat their bits "
        "(rmsnorm t256 8x127 normal; rmsnorm t256 8x127 normal). Declared nondeterministic: rmsnorm t256: atomics.")

    timing = json.loads((older / "timing" / "rmsnorm" / "512x128" / "t32" / "rep1.json").read_text())
    assert "verified" not in timing
    wide = _inputs((16, 8194))
    verdict = {**verify.compare(EMULATE(wide, "t32")[0], RMSNORM.reference(wide), RMSNORM.tolerance),
               "reference": "float64 on GPU"}
    records = [{**timing, "verified": verdict}, {**timing, "verified": {"passed": None, "reference": "not verified: why"}},
               timing]
    assert verified_sentence([timing]) is None
    assert verified_sentence(records) == (
        "Timed shapes: 1 of 3 timing records verified their own output once at the timed shape against a float64 "
        f"reference (float64 on GPU), largest |error| {verdict['max_abs_error']:.4e} (rmsnorm 512x128 t32). "
        "Not verified: rmsnorm 512x128 t32: not verified: why. 1 records predate the verification.")


def test_tool_children_run_this_kit_whatever_else_is_installed(monkeypatch):
    """A child the kit starts under a tool runs this checkout's kit, whatever PYTHONPATH said, and
    under the parent's GPU hold."""
    import os
    import sys

    from kernelkit import gpulock

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = gpulock.child_environment()
    first, rest = env["PYTHONPATH"].split(os.pathsep, 1)
    assert Path(first) == Path(tools.__file__).resolve().parent.parent and rest == "/elsewhere"
    assert env[gpulock.HELD_BY_VARIABLE] == str(os.getpid())
    done = subprocess.run([sys.executable, "-c", "import kernelkit, sys; print(kernelkit.__file__)"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert Path(done.stdout.strip()).resolve().parent == Path(tools.__file__).resolve().parent


def test_sanitizer_children_run_the_kits_own_check_and_keep_their_own_results(tmp_path, monkeypatch):
    """A stand-in compute-sanitizer on the PATH logs the kit command each child runs and answers
    with a summary whose count depends on the layouts it ran: each tool's answer stays its own, a
    finding is narrowed to its layout, and a control's racecheck runs the mutated build."""
    import os
    import stat
    import sys

    from kernelkit import binaries, device

    calls = tmp_path / "calls"
    stand_in = tmp_path / "compute-sanitizer"
    stand_in.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "arguments = sys.argv[1:]\n"
        "tool = arguments[arguments.index('--tool') + 1]\n"
        "layouts = [arguments[i + 1] for i, a in enumerate(arguments) if a == '--layout']\n"
        "control = arguments[arguments.index('--control') + 1] if '--control' in arguments else '-'\n"
        "assert arguments[3:7] == ['-m', 'kernelkit', 'correctness', '--kernel'] and '--sanitizer-cases' in arguments\n"
        f"open({str(calls)!r}, 'a').write(f'{{tool}} {{\"+\".join(layouts)}} {{control}}\\n')\n"
        "hazards = 3 if 't32' in layouts else 0\n"
        "print(f'========= RACECHECK SUMMARY: {hazards} hazards displayed ({hazards} errors, 0 warnings)'\n"
        "      if tool == 'racecheck' else '========= ERROR SUMMARY: 0 errors')\n"
    )
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    # No NVRTC here: each build's "binary" is its options' text.
    monkeypatch.setattr(device, "compile_binary", lambda source, options: binaries.store(
        "fake-" + "-".join(options).replace("=", "_"), binaries.ELF_MAGIC + " ".join(options).encode(), tmp_path))

    def logged() -> list[str]:
        rows = calls.read_text().splitlines()
        calls.unlink()
        return rows

    result = sanitizer.racecheck_control("rmsnorm", ["t32", "t256", "vec"], "barrier")
    assert result["layouts"] == ["t32", "t256", "vec"] and result["hazards"] == 3
    assert logged() == ["racecheck t32+t256+vec barrier"]

    record = tools.sanitize("rmsnorm", ["t256", "vec"])
    assert {tool: result["errors"] for tool, result in record["tools"].items()} == {"memcheck": 0, "racecheck": 0}
    assert "by_layout" not in record and sorted(logged()) == ["memcheck t256+vec -", "racecheck t256+vec -"]
    assert set(record["binaries"]) == {"t256", "vec"}
    record = tools.sanitize("rmsnorm", ["t32", "t256"])
    assert record["tools"]["racecheck"]["errors"] == 3
    assert {layout: own["tools"]["racecheck"]["errors"] for layout, own in record["by_layout"].items()} == {"t32": 3, "t256": 0}
    assert sorted(logged()) == ["memcheck t256 -", "memcheck t32 -", "memcheck t32+t256 -", "racecheck t256 -",
                                "racecheck t32 -", "racecheck t32+t256 -"]


def test_a_timed_stage_takes_the_sanitizer_record_that_covers_its_layout():
    assert sanitizer.record_for([], "t32") is None  # `sanitize` off
    assert sanitizer.record_for(["results/r/sanitizer/rmsnorm.json"], "t32") == "results/r/sanitizer/rmsnorm.json"
    legacy = ["results/r/sanitizer/rmsnorm/t32.json", "results/r/sanitizer/rmsnorm/vec.json"]
    assert sanitizer.record_for(legacy, "vec") == legacy[1]
    with pytest.raises(KitError, match="no sanitizer record of layout 't256' among .*t32.json, .*vec.json; nothing will be timed"):
        sanitizer.record_for(legacy, "t256")
