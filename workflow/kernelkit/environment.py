"""The environment stage: what the machine was when the numbers were taken. Every field is a
value or "unavailable: <reason>" (NVML is optional); without a GPU the capture fails.
"""

from __future__ import annotations

import argparse
import getpass
import os
import platform
import subprocess
import sys
from typing import Any

from kernelkit import gpulock
from kernelkit.nvml import UNAVAILABLE, Nvml, _cuda_version, _read, _text, utc_now
from kernelkit.records import canonical_hash, read_json, write_record


def clocks_locked(snapshot: dict[str, Any]) -> Any:
    """Whether the SM clock was pinned, as far as an unprivileged reader can tell: NVML has no
    query for locked clocks, so the applications-clocks clock-event reason stands for it."""
    reasons = snapshot.get("clock_event_reasons")
    if not isinstance(reasons, list):
        return f"{UNAVAILABLE}clock-event reasons could not be read"
    return "applications_clocks_setting" in reasons


def _cuda_fields(cp: Any) -> dict[str, Any]:
    runtime = cp.cuda.runtime
    device_id = cp.cuda.Device().id
    props = runtime.getDeviceProperties(device_id)

    def prop(key: str) -> Any:
        return _read(lambda: props[key])

    return {
        "cuda_driver_version": _read(lambda: _cuda_version(runtime.driverGetVersion())),
        "cuda_runtime_version": _read(lambda: _cuda_version(runtime.runtimeGetVersion())),
        "nvrtc_version": _read(lambda: ".".join(str(v) for v in cp.cuda.nvrtc.getVersion())),
        "cupy_version": cp.__version__,
        "device_index": device_id,
        "device_name": _read(lambda: _text(props["name"])),
        "compute_capability": _read(lambda: f"{props['major']}.{props['minor']}"),
        "sm_count": prop("multiProcessorCount"),
        "l2_cache_bytes": prop("l2CacheSize"),
        "global_memory_bytes": prop("totalGlobalMem"),
        "shared_memory_per_block_optin_bytes": prop("sharedMemPerBlockOptin"),
        "registers_per_sm": prop("regsPerMultiprocessor"),
        # With NVML's maximum memory clock, the rated DRAM bandwidth the report checks its copy ceiling against.
        "memory_bus_width_bits": prop("memoryBusWidth"),
    }


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _host_fields() -> dict[str, Any]:
    import numpy

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "os": platform.platform(),
        "kernel_release": platform.release(),
        "cpu": cpu or f"{UNAVAILABLE}no CPU model in /proc/cpuinfo or platform",
        "cpu_count": os.cpu_count(),
        "python_version": sys.version.split()[0],
        "numpy_version": numpy.__version__,
        "user": _read(getpass.getuser),
        "kit_commit": commit or f"{UNAVAILABLE}not a git checkout or git missing",
        "kit_tree_dirty": (bool(status) if status is not None else f"{UNAVAILABLE}git status failed"),
    }


def capture(config: dict[str, Any], lock_dir: str | None = None) -> dict[str, Any]:
    """The whole environment record (KitError without a usable GPU), its clock snapshot taken
    holding the GPU lock so that it shows the GPU idle rather than another job's load."""
    from kernelkit import device, gpujob

    clock = gpujob.JobClock()
    cp = device.cupy()
    bus_id = cp.cuda.Device().pci_bus_id
    nvml = Nvml(bus_id)
    static = nvml.static_fields()
    lock = gpulock.LockSettings.from_config(
        {key: value for key, value in config.get("gpu_lock", {}).items() if key in gpulock.LOCK_KEYS}, lock_dir)
    with gpujob.exclusive_gpu(nvml, bus_id, lock, clock) as gpu:
        snapshot = nvml.snapshot()
        cuda = _cuda_fields(cp)  # may create the CUDA context: holding the lock (kernelkit.gpulock)
    return {
        **device.card(),
        "captured_utc": utc_now(),
        "config_sha256": canonical_hash(config),
        "host": _host_fields(),
        "cuda": cuda,
        "nvml_available": nvml.error is None,
        "nvml_error": nvml.error,
        "gpu": static,
        "clocks_locked": clocks_locked(snapshot),
        "snapshot": snapshot,
        "baseline_packages": _baseline_packages(),
        "busy_before_pct": gpu.busy_before_pct,
        "idle_wait": gpu.idle_wait,
        "job": clock.describe(),
    }


def _baseline_packages() -> dict[str, str]:
    """The installed version of each baseline library, or that it is not installed, read without
    importing them: Torch's import alone took 5 of this job's 6.5 s (H200 host)."""
    from kernelkit import library

    return {package: library.installed_version(package) or f"{UNAVAILABLE}{package} is not installed"
            for package in library.PACKAGES}


def cmd_environment(args: argparse.Namespace) -> int:
    run_config = read_json(args.config) if args.config else {}
    record = capture(run_config, args.lock_dir)
    write_record(args.output, record)
    print(f"environment: {record['cuda']['device_name']}, driver {record['gpu']['driver_version']}, "
          f"CuPy {record['cuda']['cupy_version']}")
    if not record["nvml_available"]:
        print(f"warning: {record['nvml_error']}; clock fields are unavailable", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("environment", help="record driver, device, clocks and host")
    p.add_argument("--config", help="the run's config.json, hashed into the record")
    p.add_argument("--output", required=True, help="where to write the environment record (JSON)")
    gpulock.add_arguments(p)
    p.set_defaults(func=cmd_environment)
