"""Parameter sweeps: point names, refused points, the plan and dry run, and the report's Sweeps section.

The kernel folders under tests/fixtures/sweep_kernels are the real specs with small grids, so these
tests hold whatever grid the real folders declare; validity comes from the real specs' checks.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from statistics import median

import pytest
from conftest import REPO, job_counts, snakemake

from kernelkit import KitError, stats
from kernelkit import config as kit_config
from kernelkit import spec as specs
from kernelkit import sweeps

FIXTURE_KERNELS = REPO / "tests" / "fixtures" / "sweep_kernels"
SWEEP_CONFIG = REPO / "config" / "sweep.yaml"
MATMUL_SHAPE = (4096, 4096, 4096)


@pytest.fixture
def fixture_kernels(monkeypatch):
    monkeypatch.setenv("KERNELKIT_KERNELS", str(FIXTURE_KERNELS))
    return FIXTURE_KERNELS


@pytest.fixture
def matmul(fixture_kernels):
    return specs.load("matmul")


def test_point_names_round_trip(matmul):
    grid = matmul.sweeps["tiled"]
    for combination in itertools.product(*grid.values()):
        values = dict(zip(grid, combination))
        name = specs.point_name("tiled", values)
        assert name == "tiled[" + ",".join(f"{p}={v}" for p, v in values.items()) + "]"
        on_disk = specs.file_name(name)
        assert "[" not in on_disk and "]" not in on_disk and on_disk.startswith("tiled@")
        assert specs.display_name(on_disk) == name and specs.file_name(on_disk) == on_disk
        assert specs.parse_point(on_disk) == specs.parse_point(name) == ("tiled", {p: str(v) for p, v in values.items()})
        parameters = matmul.layout(name)
        assert parameters == matmul.layout(on_disk) == {**matmul.layouts["tiled"], **values}
    assert specs.parse_point("tiled") is None and specs.display_name("cupy") == "cupy"


@pytest.mark.parametrize("name, words", [
    ("tiled[bn=64,bm=64,bk=8]", "every parameter of the 'tiled' grid, in its order"),
    ("tiled[bm=64,bn=64]", "every parameter of the 'tiled' grid, in its order"),
    ("tiled[bm=32,bn=64,bk=8]", "sets bm=32, which the 'tiled' grid does not hold; allowed: 64, 128, 256"),
    ("reg4x4[block_tile=64]", "names the sweep 'reg4x4', which kernel 'matmul' does not define; allowed: tiled"),
    ("tiled[]", "is not a sweep point name"),
])
def test_point_names_outside_the_grid_are_refused_in_one_sentence(matmul, name, words):
    with pytest.raises(KitError, match=re.escape(words)):
        matmul.layout(name)


def test_points_the_spec_refuses_are_left_out(matmul):
    grid = matmul.sweeps["tiled"]
    sweep = matmul.sweep("tiled", [MATMUL_SHAPE])
    assert len(sweep.valid) + len(sweep.invalid) == len(list(itertools.product(*grid.values())))
    assert sweep.valid and sweep.invalid
    for name, reason in sweep.invalid:
        with pytest.raises(KitError, match="not a valid point"):
            matmul.launch(matmul.layout(name), MATMUL_SHAPE)
        assert "not a valid point" in reason
    for name, parameters in sweep.valid:
        assert matmul.launch(parameters, MATMUL_SHAPE).block[0] <= 1024
    entry = {"layouts": ["tiled", "cupy"], "shapes": ["4096x4096x4096"], "sweeps": ["tiled"]}
    expanded = sweeps.layouts(matmul, entry)
    assert expanded == ["tiled", "cupy", *[specs.file_name(n) for n in sweep.names]]
    assert not {specs.file_name(n) for n, _ in sweep.invalid} & set(expanded)
    # Controls: every hand-written layout and the first valid point, not the whole grid.
    assert sweeps.control_layouts(matmul, entry) == [*matmul.layouts, specs.file_name(sweep.names[0])]


def test_a_sweep_the_spec_lacks_is_one_sentence(fixture_kernels):
    config = kit_config.read_yaml(SWEEP_CONFIG)
    config["kernels"]["matmul"]["sweeps"] = ["reg4x4"]
    with pytest.raises(KitError, match=r"^config key 'kernels.matmul.sweeps.0' names 'reg4x4', which matmul defines "
                                       r"no sweep for; allowed: tiled$"):
        kit_config.validate(config, kernels_root=fixture_kernels)


def test_plan_times_every_point_on_every_shape_and_repeat(fixture_kernels):
    config = kit_config.validate(kit_config.read_yaml(SWEEP_CONFIG), kernels_root=fixture_kernels)
    from kernelkit.plan import Plan, layout_order

    built = Plan(config, {kernel: specs.load(kernel) for kernel in config["kernels"]})
    plan = [(job.kernel, job.shape, name, job.repeat) for job in built.timing_jobs() if job.cache == "warm"
            for name in layout_order(built.seed, job.kernel, job.shape, job.repeat, job.cache, built.layouts[job.kernel])]
    expected = set()
    for kernel, entry in config["kernels"].items():
        spec = specs.load(kernel)
        shapes = [spec.parse_shape(s) for s in entry["shapes"]]
        points = [specs.file_name(n) for base in entry["sweeps"] for n in spec.sweep(base, shapes).names]
        assert points
        expected |= {(kernel, shape, layout, repeat) for shape in entry["shapes"]
                     for layout in [*entry["layouts"], *points] for repeat in (1, 2)}
    assert set(plan) == expected and len(plan) == len(expected)
    # Points are shuffled among the configured layouts, not appended after them.
    first = [layout for _, _, layout, repeat in plan if repeat == 1]
    configured = [i for i, layout in enumerate(first) if "@" not in layout]
    points = [i for i, layout in enumerate(first) if "@" in layout]
    assert min(points) < max(configured) and min(configured) < max(points)


def test_dry_run_makes_a_target_per_point(fixture_kernels):
    config = kit_config.validate(kit_config.read_yaml(SWEEP_CONFIG), kernels_root=fixture_kernels)
    layouts = {k: kit_config.kernel_layouts(config, k) for k in config["kernels"]}
    done = snakemake("-n", "-p", "--configfile", str(SWEEP_CONFIG), "--replace-workflow-config",
                     "--config", "run=pytest-sweep")
    assert done.returncode == 0, done.stderr
    counts = job_counts(done.stdout)
    # One correctness job per kernel writing every point's record; one timing job per kernel/shape/repeat.
    assert all(counts[f"correctness_{kernel}"] == 1 for kernel in layouts)
    assert all(counts[f"timing_{k}"] == len(config["kernels"][k]["shapes"]) * 2 for k in layouts)
    for kernel, names in layouts.items():
        for name in names:
            assert f"results/pytest-sweep/correctness/{kernel}/{name}.json" in done.stdout
            assert re.search(rf"--layout {re.escape(name)} ", done.stdout)
    first_point = sweeps.control_layouts(specs.load("matmul"), config["kernels"]["matmul"])[-1]
    controls = re.findall(r"kernelkit control --kernel matmul .*", done.stdout)
    assert controls and all(c.count("@") == 1 and f"--layout {first_point} " in c for c in controls)


def _synthetic_sweep_run(tmp_path: Path, source: Path, factors: dict[str, float]) -> Path:
    """A copy of the synthetic seed run (matmul at 1024^3 and 4096^3, tile16, reg4x4 and the three
    libraries) with matmul points added: each point's samples are reg4x4's, scaled by its factor."""
    from synthetic import copy_run, edit

    run = copy_run(source, tmp_path)
    edit(run / "config.json", lambda config: config["kernels"]["matmul"].update(sweeps=["tiled"]))
    for path in sorted((run / "timing" / "matmul").glob("*/reg4x4/rep*.json")):
        record = json.loads(path.read_text())
        for point, factor in factors.items():
            record_point = {**record, "layout": point, "samples_us": [s * factor for s in record["samples_us"]]}
            target = path.parent.parent / point / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(record_point))
    return run


def test_sweeps_section_is_computed_from_the_samples(tmp_path, seed_run, fixture_kernels):
    from kernelkit.report.run import Run
    from kernelkit.report.sweeps import section_sweeps, sweep_results

    matmul = specs.load("matmul")
    names = [specs.file_name(n) for n in matmul.sweep("tiled", [(1024, 1024, 1024), MATMUL_SHAPE]).names[:3]]
    run_dir = _synthetic_sweep_run(tmp_path, seed_run, dict(zip(names, (1.3, 0.7, 1.0))))
    run = Run(run_dir)
    results = {r.shape: r for r in sweep_results(run)}
    assert set(results) == {"1024x1024x1024", "4096x4096x4096"}
    rates = stats.rates({r["kind"]: r for r in map(lambda p: json.loads(p.read_text()),
                                                         (run_dir / "ceilings").glob("*.json"))})
    for shape, result in results.items():
        pooled = {n: median([s for p in sorted((run_dir / "timing" / "matmul" / shape / n).glob("rep*.json"))
                             for s in json.loads(p.read_text())["samples_us"]]) for n in names}
        best = min(pooled, key=pooled.get)
        worst = max(pooled, key=pooled.get)
        assert result.best == (best, pooled[best]) and result.worst == (worst, pooled[worst])
        flops = 2 * 1024**3 if shape.startswith("1024") else 2 * 4096**3
        assert result.fraction == pytest.approx(flops / (pooled[best] * 1e-6) / 1e9 / rates["gemm_gflop_s"])
        sweep = matmul.sweep("tiled", [(1024, 1024, 1024), MATMUL_SHAPE])
        assert (result.grid_size, result.invalid) == (len(sweep.valid) + len(sweep.invalid), len(sweep.invalid))
        assert set(result.libraries) == {"cupy", "torch", "triton"}
    section = section_sweeps(run)
    assert section is not None and section.title == "Sweeps"
    table = next(b for b in section.blocks if hasattr(b, "rows"))
    row = next(r for r in table.rows if r[1] == "4096x4096x4096")
    assert row[2] == specs.display_name(results["4096x4096x4096"].best[0])
    assert row[4].startswith(f"{results['4096x4096x4096'].fraction:.2f} of GEMM")
    assert f"{len(names)} timed of {results['4096x4096x4096'].grid_size}" in row[9]
    figure = next(b for b in section.blocks if hasattr(b, "svg"))
    assert figure.svg.startswith("<svg") and all(specs.display_name(n)[len("tiled["):-1] in figure.svg for n in names)
