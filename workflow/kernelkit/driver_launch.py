"""Kernel launches through the CUDA driver alone, from a plan on disk: the process compute-sanitizer
watches (`python -m kernelkit.driver_launch PLAN_DIR`).

Why a process with nothing but the standard library: under compute-sanitizer a child pays the
tool's start, Python's, its imports and a CUDA context before the first launch. On an H200
(2026-12-01) a child importing CuPy took 2.22-2.63 s there, one calling the driver through ctypes
1.05-1.26 s, and these children are on the critical path of every timed target. The parent
(kernelkit.launch_plan) compiles the builds (kernelkit.binaries: the bytes that are timed), makes
the inputs of the sanitizer's cases and writes the plan; this process uploads them, launches each
case once and waits for it. It judges no output: the correctness stage does, on the same binaries.

Exit codes: 0 all launches finished; 1 a CUDA call failed (the sentence names it); 2 no GPU or
driver, or an unreadable plan.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

PLAN_VERSION = 1
PLAN_FILE = "plan.json"
# Each finished launch prints a line starting so; the parent counts them (kernelkit.tools).
LAUNCHED = "launched "
# ctypes types of the scalar arguments a plan may name (NumPy's dtype names).
SCALAR_TYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint32": ctypes.c_uint32,
                "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double}


class PlanError(Exception):
    """A plan this module cannot run; the message is one sentence."""


class NoDriver(Exception):
    """No CUDA driver or no GPU here; the message is one sentence."""


class CudaError(RuntimeError):
    pass


class Driver:
    """The CUDA driver API through ctypes: each call named as in cuda.h, raising on a non-zero result."""

    def __init__(self, library: str = "libcuda.so.1") -> None:
        try:
            self._library = ctypes.CDLL(library)
        except OSError as error:
            raise NoDriver(f"no GPU/driver: {library} cannot be loaded ({error})") from None

    def __call__(self, name: str, *arguments: Any) -> None:
        result = getattr(self._library, name)(*arguments)
        if result != 0:
            raise CudaError(f"{name} returned CUDA error {result} ({self.error_name(result)})")

    def error_name(self, code: int) -> str:
        text = ctypes.c_char_p()
        if self._library.cuGetErrorName(code, ctypes.byref(text)) != 0 or not text.value:
            return "unknown"
        return text.value.decode(errors="replace")


def read_plan(directory: Path) -> dict[str, Any]:
    """The plan in `directory`, checked for what running it needs."""
    try:
        plan = json.loads((directory / PLAN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PlanError(f"no readable launch plan in {directory} ({error})") from None
    if not isinstance(plan, dict) or plan.get("version") != PLAN_VERSION:
        raise PlanError(f"{directory / PLAN_FILE} is not a version {PLAN_VERSION} launch plan")
    for launch in plan.get("launches", []):
        for argument in launch["arguments"]:
            if "scalar" in argument and argument["scalar"] not in SCALAR_TYPES:
                raise PlanError(f"launch '{launch['label']}' has a scalar of type '{argument['scalar']}'; "
                                f"allowed: {', '.join(SCALAR_TYPES)}")
    return plan


def scalar(kind: str, value: float | int) -> ctypes._SimpleCData:
    return SCALAR_TYPES[kind](value)


def first_device(driver: Driver) -> ctypes.c_int:
    """Device 0 (the one CUDA_VISIBLE_DEVICES leaves first), the driver started; no context yet."""
    count = ctypes.c_int()
    try:
        driver("cuInit", 0)
        driver("cuDeviceGetCount", ctypes.byref(count))
    except CudaError as error:
        raise NoDriver(f"no GPU/driver: {error}") from None
    if count.value < 1:
        raise NoDriver("no GPU/driver: the CUDA driver sees no GPU")
    device = ctypes.c_int()
    driver("cuDeviceGet", ctypes.byref(device), 0)
    return device


def lock_key(driver: Driver, device: ctypes.c_int) -> str | None:
    """The device's GPU-lock key as the kit's jobs name it (kernelkit.gpujob.gpu_key: NVML's UUID,
    `GPU-` and 16 bytes in 8-4-4-4-12 hex), read from the driver, which needs no context; None
    where the driver's two UUIDs differ (a MIG instance, whose lock is its GPU's)."""
    uuids = []
    for name in ("cuDeviceGetUuid", "cuDeviceGetUuid_v2"):
        uuid = (ctypes.c_ubyte * 16)()
        try:
            driver(name, ctypes.byref(uuid), device)
        except (CudaError, AttributeError):
            continue
        uuids.append(bytes(uuid).hex())
    if not uuids or len(set(uuids)) != 1:
        return None
    text = uuids[0]
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


class Session:
    """One context on device 0 (the one CUDA_VISIBLE_DEVICES leaves first), the plan's modules and
    buffers; everything is freed by `close`, which destroys the context."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.device = first_device(driver)
        self.context = ctypes.c_void_p()
        driver("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), self.device)
        driver("cuCtxSetCurrent", self.context)
        self.modules: dict[str, ctypes.c_void_p] = {}
        self.allocations: list[ctypes.c_uint64] = []

    def module(self, path: str) -> ctypes.c_void_p:
        if path not in self.modules:
            image = Path(path).read_bytes()
            module = ctypes.c_void_p()
            self.driver("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(image))
            self.modules[path] = module
        return self.modules[path]

    def function(self, path: str, entry: str) -> ctypes.c_void_p:
        function = ctypes.c_void_p()
        self.driver("cuModuleGetFunction", ctypes.byref(function), self.module(path), entry.encode())
        return function

    def allocate(self, nbytes: int) -> ctypes.c_uint64:
        pointer = ctypes.c_uint64()
        self.driver("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(max(1, nbytes)))
        self.allocations.append(pointer)
        return pointer

    def upload(self, data: bytes) -> ctypes.c_uint64:
        pointer = self.allocate(len(data))
        if data:
            self.driver("cuMemcpyHtoD_v2", pointer, ctypes.c_char_p(data), ctypes.c_size_t(len(data)))
        return pointer

    def filled(self, nbytes: int, word: int) -> ctypes.c_uint64:
        """An output buffer of exactly `nbytes` (so memcheck sees a write past it), every 32-bit word `word`."""
        pointer = self.allocate(nbytes)
        self.driver("cuMemsetD32_v2", pointer, ctypes.c_uint32(word), ctypes.c_size_t(nbytes // 4))
        return pointer

    def launch(self, function: ctypes.c_void_p, grid: list[int], block: list[int], shared_mem: int,
               values: list[ctypes._SimpleCData]) -> None:
        grid3 = [*grid, 1, 1][:3]
        block3 = [*block, 1, 1][:3]
        parameters = (ctypes.c_void_p * len(values))(*(ctypes.addressof(value) for value in values))
        self.driver("cuLaunchKernel", function, *(ctypes.c_uint(v) for v in grid3), *(ctypes.c_uint(v) for v in block3),
                    ctypes.c_uint(shared_mem), None, parameters, None)
        self.driver("cuCtxSynchronize")

    def close(self) -> None:
        """Free everything and destroy the context, as far as the driver still lets: after a fault
        (memcheck's illegal address) every call fails, and the fault is what the run reports."""
        calls = [("cuMemFree_v2", pointer) for pointer in self.allocations]
        calls += [("cuModuleUnload", module) for module in self.modules.values()]
        for name, argument in [*calls, ("cuDevicePrimaryCtxRelease_v2", self.device)]:
            with contextlib.suppress(CudaError):
                self.driver(name, argument)


def run_launches(session: Session, plan: dict[str, Any], directory: Path) -> None:
    """Every launch of the plan, one after the other, each waited for; prints one line per launch
    with the milliseconds it took under the tool (module load included for a module's first)."""
    buffers = {name: session.upload((directory / buffer["file"]).read_bytes())
               for name, buffer in plan.get("buffers", {}).items()}
    for launch in plan["launches"]:
        began = time.monotonic()
        values: list[ctypes._SimpleCData] = []
        for argument in launch["arguments"]:
            if "buffer" in argument:
                values.append(buffers[argument["buffer"]])
            elif "output_bytes" in argument:
                values.append(session.filled(argument["output_bytes"], argument.get("fill", 0)))
            else:
                values.append(scalar(argument["scalar"], argument["value"]))
        function = session.function(plan["binaries"][launch["binary"]], launch["entry"])
        session.launch(function, launch["grid"], launch["block"], launch.get("shared_mem", 0), values)
        print(f"{LAUNCHED}{launch['label']} in {1000 * (time.monotonic() - began):.1f} ms", flush=True)


def _plan_hold(plan: dict[str, Any]) -> Any:
    """The shared hold on the GPU that the plan names (the parent job's lock), or none."""
    from kernelkit import gpulock

    lock = plan.get("lock")
    return (gpulock.gpu_work(lock["key"], gpulock.LockSettings(**lock["settings"]), mode=gpulock.SHARED)
            if lock else contextlib.nullcontext())


def _leave(session: Session) -> None:
    """Destroy the context, logged first as leaving the GPU's kit members: NVML may list this pid
    while the context goes. Called inside a shared hold."""
    from kernelkit import membership

    membership.note_leaving()
    session.close()


def run(directory: Path, driver_library: str = "libcuda.so.1") -> int:
    """Run the plan in `directory` holding the GPU shared (kernelkit.gpulock), as the parent's other
    untimed GPU work does: the context, the module loads and the launches never overlap a timing."""
    plan = read_plan(directory)
    driver = Driver(driver_library)
    with _plan_hold(plan):
        began = time.monotonic()
        session = Session(driver)
        print(f"context ready in {1000 * (time.monotonic() - began):.1f} ms", flush=True)
        try:
            run_launches(session, plan, directory)
        finally:
            _leave(session)
    return 0


def wait_and_run(directory: Path, driver_library: str = "libcuda.so.1") -> int:
    """A child started before its plan (kernelkit.standby): make the context holding the GPU
    shared, say so in `ready`, wait for a claimant's plan and run it as `run` does; leave, the
    context destroyed inside a shared hold, when nobody hands it one."""
    from kernelkit import gpulock, standby

    spec = standby.read_json(directory / standby.SPEC) or {}
    driver = Driver(driver_library)
    key = lock_key(driver, first_device(driver))
    if key is None:
        return 0
    settings = gpulock.shared_hold_settings()
    began = time.monotonic()
    with gpulock.gpu_work(key, settings, mode=gpulock.SHARED):
        session = Session(driver)
    context_s = time.monotonic() - began
    print(f"context ready in {1000 * context_s:.1f} ms", flush=True)
    standby.write_json(directory / standby.READY, {
        "key": key, "lock_path": str(settings.lock_path(key)), "pid": os.getpid(),
        "ready_unix_s": time.time(), "context_s": round(context_s, 3)})
    go = standby.wait_for_go(directory, float(spec.get("idle_s", 30.0)))
    if not go or not go.get("plan"):
        with contextlib.suppress(OSError):
            (directory / standby.GO).unlink()  # the shell then removes the directory
        with gpulock.gpu_work(key, settings, mode=gpulock.SHARED):
            _leave(session)
        return 0
    plan_directory = Path(go["plan"])
    plan = read_plan(plan_directory)
    print(f"plan handed over after {time.monotonic() - began - context_s:.3f} s of waiting", flush=True)
    with _plan_hold(plan):
        try:
            run_launches(session, plan, plan_directory)
        finally:
            _leave(session)
    return 0


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    waiting = arguments[:1] == ["--wait"]
    if len(arguments) != 1 + waiting:
        print("usage: python -m kernelkit.driver_launch [--wait] PLAN_DIR", file=sys.stderr)
        return 2
    try:
        return wait_and_run(Path(arguments[1])) if waiting else run(Path(arguments[0]))
    except (PlanError, NoDriver) as error:
        print(error, file=sys.stderr)
        return 2
    except CudaError as error:
        print(f"kernel launch failed: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
