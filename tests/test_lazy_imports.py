"""Torch and Triton cost seconds to import: only a process whose layout is a torch or Triton
baseline may import them. A fresh interpreter records every attempt to import them (found or
not, so the test means the same with or without torch installed) while it does the CPU side
of checking and timing every hand-written layout of every kernel."""

from __future__ import annotations

import json
import subprocess
import sys

from importlib import metadata

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
from kernelkit import (ceilings, checks, cli, device, environment, foreign, gpujob, gpulock, inputs, library, sampler,
                       span, spec, stats, timing, tools)

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
    # The environment record names the baselines' versions from package metadata, imports aside.
    assert set(result["packages"]) == set(library.PACKAGES)
    for package, version in result["packages"].items():
        try:
            assert version == metadata.version(metadata.packages_distributions()[package][0])
        except KeyError:
            assert version == f"unavailable: {package} is not installed"


def test_the_recorder_sees_an_import_attempt_even_of_a_missing_package():
    """The check above can fail: an attempt to import torch is recorded whether or not torch is installed."""
    program = PROGRAM.replace("import numpy as np", "import numpy as np\ntry:\n    import torch\nexcept ImportError:\n    pass")
    env = kit_env(REPO, KERNELKIT_KERNELS=str(REPO / "kernels"))
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "torch" in json.loads(done.stdout)["attempted"]
