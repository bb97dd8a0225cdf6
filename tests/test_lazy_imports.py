"""Torch and Triton cost seconds to import: only a process whose layout is a torch or Triton
baseline may import them. A fresh interpreter records every attempt to import them (found or
not, so the test means the same with or without torch installed) while it does the CPU side
of checking and timing every hand-written layout of every kernel."""

from __future__ import annotations

import json
import subprocess
import sys

import importlib.util

from conftest import REPO, kit_env

from kernelkit import library

PROGRAM = r"""
import json, sys

attempted = []

class Recorder:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            attempted.append(name)
        return None

sys.meta_path.insert(0, Recorder())

import numpy as np
from kernelkit import (ceilings, checks, cli, controls, device, environment, foreign, gpujob, gpulock, inputs, library, plan,
                       sampler, span, spec, stats, timing, tools)

for name in spec.available():
    kernel = spec.load(name)
    shape = kernel.correctness_shapes[0]
    for layout in kernel.all_layouts:
        kernel.layout(layout)
        if not kernel.is_baseline(layout):
            kernel.launch(kernel.layout(layout), shape)
    host = kernel.make_inputs(shape, kernel.timing_pattern, inputs.rng_for(name, spec.shape_name(shape), "normal"))
    kernel.reference(host)
packages = environment._baseline_packages()
print(json.dumps({"attempted": sorted(set(attempted)), "kernels": spec.available(), "packages": packages}))
"""


def test_checking_and_timing_hand_written_layouts_never_imports_torch_or_triton():
    env = kit_env(REPO, KERNELKIT_KERNELS=str(REPO / "kernels"))
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert len(result["kernels"]) >= 6
    assert result["attempted"] == []
    # The environment record names the baselines' versions (or that one is missing), imports aside.
    assert set(result["packages"]) == set(library.PACKAGES)
    for package, version in result["packages"].items():
        if importlib.util.find_spec(package) is None:  # in this process, not the recorded one
            assert version == f"unavailable: {package} is not installed"
        else:
            assert version and not version.startswith("unavailable")


def test_a_package_version_is_read_without_importing_the_package(tmp_path, monkeypatch):
    """Torch-like: a version module whose version carries a local build tag the metadata leaves
    out; CuPy-like: no version module, a distribution named otherwise than the import. Both
    packages raise on import, so reading a version by importing them would fail the test."""
    from kernelkit.library import installed_version

    (tmp_path / "tagged").mkdir()
    (tmp_path / "tagged" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (tmp_path / "tagged" / "version.py").write_text("from typing import Optional\n__version__: str = '2.11.0+cu130'\n")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    dist = tmp_path / "plain_cuda12x-14.2.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plain-cuda12x\nVersion: 14.2.0\n")
    (dist / "top_level.txt").write_text("plain\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_version("tagged") == "2.11.0+cu130"
    assert installed_version("plain") == "14.2.0"
    assert installed_version("kernelkit_no_such_package") is None
    assert "tagged" not in sys.modules and "plain" not in sys.modules


def test_the_recorder_sees_an_import_attempt_even_of_a_missing_package():
    """The check above can fail: an attempt to import torch is recorded whether or not torch is installed."""
    program = PROGRAM.replace("import numpy as np", "import numpy as np\ntry:\n    import torch\nexcept ImportError:\n    pass")
    env = kit_env(REPO, KERNELKIT_KERNELS=str(REPO / "kernels"))
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "torch" in json.loads(done.stdout)["attempted"]
