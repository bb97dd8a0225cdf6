"""The environment stage: what the machine was when the numbers were taken.

Every field is either a value or the string "unavailable: <reason>", so a reader can tell
"not recorded" from "recorded as zero". NVML is optional: without it the clock fields say
why they are missing and the run goes on; without a GPU the capture fails.
"""

from __future__ import annotations

import argparse
import getpass
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any, Callable

from kernelkit.records import canonical_hash, read_json, write_record

UNAVAILABLE = "unavailable: "

# Clock-event ("throttle") reason bits as NVML defines them; named here so that the files
# say "sw_power_cap" instead of a bit mask.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def is_unavailable(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(UNAVAILABLE)


def _read(getter: Callable[[], Any]) -> Any:
    try:
        value = getter()
    except Exception as error:  # NVMLError_NotSupported, NoPermission, AttributeError on old bindings...
        return f"{UNAVAILABLE}{type(error).__name__}: {error}".rstrip(": ")
    return value.decode() if isinstance(value, bytes) else value


class Nvml:
    """A handle on NVML for one device, or the reason there is none."""

    def __init__(self, pci_bus_id: str | None = None) -> None:
        # By PCI bus id, because NVML and CUDA number devices differently when
        # CUDA_VISIBLE_DEVICES is set.
        self.error: str | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            if pci_bus_id:
                self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())
            else:
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as error:
            self.error = f"{UNAVAILABLE}NVML could not be used ({type(error).__name__}: {error})"

    def read(self, getter: Callable[[Any, Any], Any]) -> Any:
        if self.error:
            return self.error
        return _read(lambda: getter(self.nvml, self.handle))

    def snapshot(self) -> dict[str, Any]:
        """The few fields that change while a kernel runs: taken before and after each timed target."""
        reasons = self.read(lambda n, h: n.nvmlDeviceGetCurrentClocksEventReasons(h))
        return {
            "time_utc": utc_now(),
            "sm_clock_mhz": self.read(lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            "memory_clock_mhz": self.read(lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            "graphics_clock_mhz": self.read(lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_GRAPHICS)),
            "temperature_c": self.read(lambda n, h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
            "power_draw_w": self.read(lambda n, h: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
            "performance_state": self.read(lambda n, h: f"P{n.nvmlDeviceGetPerformanceState(h)}"),
            "clock_event_reasons": reason_names(reasons) if isinstance(reasons, int) else reasons,
        }

    def static_fields(self) -> dict[str, Any]:
        n_ver = self.read(lambda n, h: n.nvmlSystemGetCudaDriverVersion_v2())
        reasons_supported = self.read(lambda n, h: n.nvmlDeviceGetSupportedClocksEventReasons(h))
        return {
            "driver_version": self.read(lambda n, h: n.nvmlSystemGetDriverVersion()),
            "cuda_driver_version_nvml": _cuda_version(n_ver) if isinstance(n_ver, int) else n_ver,
            "nvml_version": self.read(lambda n, h: n.nvmlSystemGetNVMLVersion()),
            "name": self.read(lambda n, h: n.nvmlDeviceGetName(h)),
            "uuid": self.read(lambda n, h: n.nvmlDeviceGetUUID(h)),
            "pci_bus_id": self.read(lambda n, h: _text(n.nvmlDeviceGetPciInfo(h).busId)),
            "memory_total_bytes": self.read(lambda n, h: n.nvmlDeviceGetMemoryInfo(h).total),
            "sm_clock_max_mhz": self.read(lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
            "memory_clock_max_mhz": self.read(lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM)),
            "sm_clock_application_mhz": self.read(lambda n, h: n.nvmlDeviceGetApplicationsClock(h, n.NVML_CLOCK_SM)),
            "memory_clock_application_mhz": self.read(lambda n, h: n.nvmlDeviceGetApplicationsClock(h, n.NVML_CLOCK_MEM)),
            "sm_clock_default_application_mhz": self.read(
                lambda n, h: n.nvmlDeviceGetDefaultApplicationsClock(h, n.NVML_CLOCK_SM)
            ),
            "auto_boost_enabled": self.read(lambda n, h: bool(n.nvmlDeviceGetAutoBoostedClocksEnabled(h)[0])),
            "power_limit_w": self.read(lambda n, h: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
            "persistence_mode": self.read(lambda n, h: bool(n.nvmlDeviceGetPersistenceMode(h))),
            "ecc_mode_current": self.read(lambda n, h: bool(n.nvmlDeviceGetEccMode(h)[0])),
            "mig_mode_current": self.read(lambda n, h: bool(n.nvmlDeviceGetMigMode(h)[0])),
            "compute_mode": self.read(lambda n, h: n.nvmlDeviceGetComputeMode(h)),
            "clock_event_reasons_supported": (
                reason_names(reasons_supported) if isinstance(reasons_supported, int) else reasons_supported
            ),
        }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(encoded: int) -> str:
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def reason_names(mask: int) -> list[str]:
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


def clocks_locked(snapshot: dict[str, Any]) -> Any:
    """Whether the SM clock was pinned, as far as NVML lets an unprivileged reader tell.

    NVML has no query for locked clocks; the applications-clocks clock-event reason is the
    readable trace of a pinned clock, so that is what this reports, and says so.
    """
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
    """The whole environment record; fails (KitError) when no GPU or driver is usable.

    The clock snapshot is taken holding the GPU lock (gpu_lock of the run's config), so that it
    shows the GPU idle rather than another job's load."""
    from kernelkit import device, gpujob, gpulock

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
        **card(),
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
    """The installed version of each baseline library, or that it is not installed: the report
    shows what was compared. Read without importing them: Torch's import alone took 5 of this
    job's 6.5 s on an H200 host, at the head of every `--cores 1` run. Whether a baseline can run
    on the GPU is what its correctness job finds (and records as a skip)."""
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
    from kernelkit import gpulock

    gpulock.add_arguments(p)
    p.set_defaults(func=cmd_environment)


def card() -> dict[str, Any]:
    """The card this process runs on, as every GPU record names it: NVML's UUID and index.

    Read here, in the process, from the CUDA device the process uses (by PCI bus id), so it is
    the card that did the work whatever CUDA_VISIBLE_DEVICES said; the index is NVML's, the
    number nvidia-smi shows and the workflow's `gpus` list uses. Where no GPU or NVML answers
    (a skipped tool run on a CPU machine) both are None rather than a guess.
    """
    from kernelkit import KitError, device

    try:
        bus_id = device.cupy().cuda.Device().pci_bus_id
    except KitError:
        return {"gpu_uuid": None, "gpu_index": None}
    nvml = Nvml(bus_id)
    uuid = nvml.read(lambda n, h: n.nvmlDeviceGetUUID(h))
    index = nvml.read(lambda n, h: n.nvmlDeviceGetIndex(h))
    return {
        "gpu_uuid": uuid if isinstance(uuid, str) and not uuid.startswith(UNAVAILABLE) else None,
        "gpu_index": index if isinstance(index, int) else None,
    }
