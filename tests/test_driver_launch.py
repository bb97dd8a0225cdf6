"""The sanitizer's child without CuPy (kernelkit.driver_launch), its plans (kernelkit.launch_plan) and
the kit's binary cache (kernelkit.binaries), on the CPU: plans written from the real specs, the
child started as compute-sanitizer starts it, and the cache's keys and files. That the child runs
the kernels and that racecheck sees the `barrier` control through it is checked on a GPU
(tests/test_gpu_race_checks.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kernelkit import binaries, device, driver_launch, spec as specs, standby, tools
from kernelkit.inputs import rng_for
from kernelkit.launch_plan import write_plan
from kernelkit.output_check import SENTINEL_BITS


@pytest.fixture
def text_binaries(tmp_path, monkeypatch):
    """No NVRTC here: a build's 'binary' is an ELF header and its source's hash, stored in the real cache code."""
    folder = tmp_path / "cache"

    def compile_binary(source: str, options: tuple[str, ...]) -> binaries.Binary:
        key = binaries.cache_key(source, options, "90", "13.0", "test")
        return binaries.cached(key, folder) or binaries.store(key, binaries.ELF_MAGIC + key.encode(), folder)

    monkeypatch.setattr(device, "compile_binary", compile_binary)
    return folder


@pytest.mark.parametrize("kernel", specs.available())
def test_a_plan_launches_each_case_of_each_layout_as_the_spec_says(tmp_path, text_binaries, kernel):
    spec = specs.load(kernel)
    layouts = list(spec.layouts)
    cases = tools.sanitizer_cases(spec)
    shas = write_plan(spec, layouts, cases, tmp_path / "plan", lock={"key": "GPU-x", "settings": {"enabled": True}})
    plan = driver_launch.read_plan(tmp_path / "plan")
    assert plan["lock"]["key"] == "GPU-x" and set(shas) == set(layouts) == set(plan["binaries"])
    launches = iter(plan["launches"])
    for shape, pattern in cases:
        inputs = spec.make_inputs(shape, pattern, rng_for(spec.name, specs.shape_name(shape), pattern))
        for layout in layouts:
            launch = next(launches)
            geometry = spec.launch(spec.layout(layout), shape)
            assert (launch["entry"], launch["grid"], launch["block"], launch["shared_mem"]) == (
                spec.entry_of(layout), list(geometry.grid), list(geometry.block), geometry.shared_mem)
            expected = spec.arguments(inputs, "out", shape)
            assert len(launch["arguments"]) == len(expected)
            for argument, value in zip(launch["arguments"], expected):
                if isinstance(value, str):
                    assert argument == {"output_bytes": 4 * int(np.prod(spec.output_shape(shape))), "fill": int(SENTINEL_BITS)}
                elif isinstance(value, np.ndarray):
                    data = (tmp_path / "plan" / plan["buffers"][argument["buffer"]]["file"]).read_bytes()
                    assert data == np.ascontiguousarray(value).tobytes()
                else:
                    assert argument == {"scalar": value.dtype.name, "value": value.item()}
    assert next(launches, None) is None


def test_a_mutated_build_is_another_binary(tmp_path, text_binaries):
    spec = specs.load("rmsnorm")
    plain = write_plan(spec, ["t32"], tools.sanitizer_cases(spec)[:1], tmp_path / "a")
    mutated = write_plan(spec, ["t32"], tools.sanitizer_cases(spec)[:1], tmp_path / "b", mutation="barrier")
    again = write_plan(spec, ["t32"], tools.sanitizer_cases(spec)[:1], tmp_path / "c")
    assert plain == again and plain["t32"] != mutated["t32"]


def test_a_plan_refuses_an_argument_the_child_cannot_pass(tmp_path, text_binaries):
    from dataclasses import replace

    from kernelkit import KitError

    spec = specs.load("rmsnorm")
    odd = replace(spec, arguments=lambda buffers, out, shape: (buffers["x"], out, np.float16(1)))
    with pytest.raises(KitError, match="float16, which a launch plan cannot pass; allowed: .*int32"):
        write_plan(odd, ["t32"], tools.sanitizer_cases(spec)[:1], tmp_path / "plan")


def test_the_child_refuses_a_plan_it_cannot_run_in_one_sentence(tmp_path, capsys):
    assert driver_launch.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"no readable launch plan in {tmp_path}")
    (tmp_path / driver_launch.PLAN_FILE).write_text(json.dumps({"version": 0}))
    assert driver_launch.main([str(tmp_path)]) == 2
    assert "is not a version 1 launch plan" in capsys.readouterr().err
    bad = {"version": 1, "launches": [{"label": "k t32", "arguments": [{"scalar": "float16", "value": 1}]}]}
    (tmp_path / driver_launch.PLAN_FILE).write_text(json.dumps(bad))
    assert driver_launch.main([str(tmp_path)]) == 2
    assert "launch 'k t32' has a scalar of type 'float16'; allowed: int32, int64" in capsys.readouterr().err


def test_the_child_without_a_driver_says_so_and_exits_before_any_launch(tmp_path, text_binaries):
    """Started as compute-sanitizer starts it (python -S -m kernelkit.driver_launch PLAN). On a machine
    with a GPU this test is not the check (the GPU tests are): the driver is there."""
    if any((directory / "libcuda.so.1").exists() for directory in map(__import__("pathlib").Path,
                                                                     ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"))):
        pytest.skip("a CUDA driver is installed here; the GPU tests run the child")
    spec = specs.load("rmsnorm")
    write_plan(spec, ["t32"], tools.sanitizer_cases(spec)[:1], tmp_path / "plan")
    done = subprocess.run([sys.executable, "-S", "-m", "kernelkit.driver_launch", str(tmp_path / "plan")],
                          capture_output=True, text=True, timeout=60, env=standby.child_environment())
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("no GPU/driver: libcuda.so.1 cannot be loaded") and "Traceback" not in done.stderr


def test_the_child_imports_the_standard_library_and_the_lock_only():
    done = subprocess.run([sys.executable, "-S", "-c", "import sys, kernelkit.driver_launch, kernelkit.gpulock; "
                           "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'yaml', 'cupy', 'kernelkit')))"],
                          capture_output=True, text=True, timeout=60, env=standby.child_environment())
    assert json.loads(done.stdout.replace("'", '"')) == ["kernelkit", "kernelkit.driver_launch", "kernelkit.gpulock",
                                                          "kernelkit.membership"]


def test_binaries_are_keyed_by_everything_their_bytes_depend_on(tmp_path):
    base = ("source", ("--std=c++17", "-ftz=true"), "90", "13.0", "14.2.0")
    keys = {binaries.cache_key(*base)}
    for position, other in enumerate(("source2", ("--std=c++17",), "100", "12.9", "14.1.0")):
        keys.add(binaries.cache_key(*base[:position], other, *base[position + 1:]))
    assert len(keys) == 6
    assert binaries.build_options(("--std=c++17",)) == ("--std=c++17", "-ftz=true")
    assert binaries.build_options(("-ftz=true", "-DBM=64")) == ("-ftz=true", "-DBM=64")

    assert binaries.cached("k", tmp_path) is None
    cubin = binaries.store("k", binaries.ELF_MAGIC + b"\0code", tmp_path)
    assert cubin.path.name == "k.cubin" and binaries.cached("k", tmp_path) == cubin
    ptx = binaries.store("p", ".version 8.0\n", tmp_path)
    assert ptx.path.name == "p.ptx" and ptx.path.read_bytes().endswith(b"\n\0")  # the driver reads PTX as a C string
    assert [path.name for path in sorted(tmp_path.iterdir())] == ["k.cubin", "p.ptx"]  # no temporary file left


def test_the_cache_lives_where_the_environment_says(tmp_path, monkeypatch):
    monkeypatch.setenv(binaries.CACHE_VARIABLE, str(tmp_path / "mine"))
    assert binaries.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(binaries.CACHE_VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert binaries.cache_dir() == tmp_path / "xdg" / "kernelkit" / "binaries"


def test_after_a_fault_closing_the_session_tries_every_call_and_raises_nothing():
    """After memcheck's illegal address every driver call fails; the launch's error is the one reported."""
    called = []

    def failing_driver(name, *arguments):
        called.append(name)
        raise driver_launch.CudaError(f"{name} returned CUDA error 700 (CUDA_ERROR_ILLEGAL_ADDRESS)")

    session = object.__new__(driver_launch.Session)
    session.driver, session.device = failing_driver, 0
    session.allocations, session.modules = [1, 2], {"a.cubin": 3}
    session.close()
    assert called == ["cuMemFree_v2", "cuMemFree_v2", "cuModuleUnload", "cuDevicePrimaryCtxRelease_v2"]
