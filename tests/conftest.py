from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "workflow"))
os.environ["KERNELKIT_KERNELS"] = str(REPO / "kernels")


@pytest.fixture(scope="session")
def synthetic_run(tmp_path_factory) -> Path:
    """The default synthetic run (tests/synthetic.py: RMSNorm t32, t256 and torch on three shapes,
    two repeats), written once per session with the kit's writers. Read it; copy it to change it
    (synthetic.copy_run)."""
    from synthetic import write_run

    return write_run(tmp_path_factory.mktemp("synthetic"), "synthetic")


@pytest.fixture(scope="session")
def synthetic_pair(tmp_path_factory) -> tuple[Path, Path]:
    """Two synthetic runs of identical code, A and B, whose samples differ by their seeded noise only."""
    from synthetic import write_run

    root = tmp_path_factory.mktemp("pair")
    return write_run(root, "a"), write_run(root, "b", seed=1)


@pytest.fixture(scope="session")
def seed_run(tmp_path_factory) -> Path:
    """A synthetic run of seed 000's operations (matmul, layernorm, neighbor; hand-written layouts
    beside library baselines) with the span view, written once per session."""
    from synthetic import SEED_HYPOTHESES, SEED_KERNELS, write_run

    return write_run(tmp_path_factory.mktemp("seed"), "seed", kernels=SEED_KERNELS, hypotheses=SEED_HYPOTHESES,
                     spans=list(SEED_KERNELS), controls={})


def gpu_unavailable_reason() -> str | None:
    """Why GPU tests cannot run here, or None when a CUDA device is usable."""
    try:
        import cupy
    except ImportError as error:
        return f"CuPy is not installed ({error})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device is visible"
    except Exception as error:
        return f"no usable CUDA driver or device ({error})"
    return None


def pytest_collection_modifyitems(config, items):
    """GPU tests skip, with the reason, where no GPU is usable. The longest waits (a SLURM cluster's
    jobs, interrupted workflows, the compilers) start first, so that with several workers
    (`pytest -n 4`) they overlap the many short tests instead of ending the run alone."""
    slow = ("test_slurm.py", "test_interrupts.py", "test_operations.py")
    items.sort(key=lambda item: 0 if item.nodeid.split("::")[0].endswith(slow) else 1)
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test skipped: {reason}"))


def snakemake(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    exe = shutil.which("snakemake") or str(Path(sys.executable).with_name("snakemake"))
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def kit_env(root: Path = REPO, **extra: str) -> dict[str, str]:
    """The environment for a `python -m kernelkit` child: the kit's package first on the path, the
    caller's path after it (where the machine keeps packages outside site-packages, as the GPU
    machines do for jsonschema)."""
    path = os.pathsep.join(p for p in (str(root / "workflow"), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def padded_output(y, unwritten=None):
    """The raw bits a correctness launch leaves: [guard | output | guard], with `unwritten`
    output elements still holding the sentinel, as a kernel that skipped them would."""
    import numpy as np

    from kernelkit.output_check import GUARD_ELEMENTS, SENTINEL_BITS

    bits = np.full(2 * GUARD_ELEMENTS + y.size, SENTINEL_BITS, dtype=np.uint32)
    body = np.ascontiguousarray(y, dtype=np.float32).reshape(-1).view(np.uint32).copy()
    if unwritten is not None:
        body[np.asarray(unwritten).reshape(-1)] = SENTINEL_BITS
    bits[GUARD_ELEMENTS : GUARD_ELEMENTS + y.size] = body
    return bits


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a Snakemake dry run, as {rule: count}."""
    table = output.split("Job stats:")[1].split("\n\n")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE)}


def default_config() -> dict:
    """config/config.yaml validated, every schema default filled in."""
    from kernelkit import config

    return config.load(REPO / "config" / "config.yaml")


def sampler_settings(**changes):
    """The default config's sampler settings, with `changes`."""
    import dataclasses

    from kernelkit.sampler import SamplerSettings

    return dataclasses.replace(SamplerSettings.from_config(default_config()["sampler"]), **changes)


def graph_method(**changes):
    """The default config's timing method, with `changes`."""
    import dataclasses

    from kernelkit.kernel_time import GraphReplayMethod

    return dataclasses.replace(GraphReplayMethod.from_timing(default_config()["timing"]), **changes)
