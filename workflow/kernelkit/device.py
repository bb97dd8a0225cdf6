"""The only module that touches the GPU through CuPy, imported lazily so that the CPU side of
the kit works on a machine without CUDA."""

from __future__ import annotations

import contextlib
import ctypes
import functools
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from kernelkit import KitError, binaries
from kernelkit.nvml import UNAVAILABLE, Nvml, _text
from kernelkit.spec import KernelSpec, Shape


class NoDriver(Exception):
    """No CUDA driver here; the message is one sentence."""


class CudaError(RuntimeError):
    pass


class Driver:
    """The CUDA driver API through ctypes, for the few queries that must not make a CUDA context
    (the GPU check before any job, the compute capability): each call named as in cuda.h."""

    def __init__(self, library: str = "libcuda.so.1") -> None:
        try:
            self._library = ctypes.CDLL(library)
        except OSError as error:
            raise NoDriver(f"no GPU/driver: {library} cannot be loaded ({error})") from None

    def __call__(self, name: str, *arguments: Any) -> None:
        result = getattr(self._library, name)(*arguments)
        if result != 0:
            text = ctypes.c_char_p()
            known = self._library.cuGetErrorName(result, ctypes.byref(text)) == 0 and text.value
            raise CudaError(f"{name} returned CUDA error {result} ({text.value.decode(errors='replace') if known else 'unknown'})")


def cupy() -> Any:
    """Import CuPy and check that a GPU is visible, or fail with one sentence that says which is missing."""
    try:
        import cupy as cp
    except ImportError as error:
        raise KitError(f"CuPy is not installed ({error}); install envs/requirements-cuda13.txt or -cuda12.txt") from None
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as error:  # CUDARuntimeError without a driver, or a driver too old for CuPy's runtime
        raise KitError(f"no usable NVIDIA GPU or driver: the CUDA runtime says {error}") from None
    if count < 1:
        raise KitError("no NVIDIA GPU is visible to the CUDA runtime")
    return cp


# CuPy's wheels and the CUDA major version each needs the driver to support.
CUPY_WHEEL_CUDA = {"cupy-cuda12x": 12, "cupy-cuda13x": 13}
NO_CUPY = "CuPy is not installed (No module named 'cupy'); install envs/requirements-cuda13.txt or -cuda12.txt"


def gpu_problem() -> str | None:
    """Why this Python cannot run the kit's GPU stages, in the sentences of `cupy()`, or None.
    Asked through the driver, without importing CuPy or making a context: the workflow asks before
    it plans a GPU job, and CuPy's start took 0.8 s there, this check 0.18 s (H200)."""
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        return NO_CUPY
    count, version = ctypes.c_int(), ctypes.c_int()
    try:
        driver = Driver()
        driver("cuInit", 0)
        driver("cuDeviceGetCount", ctypes.byref(count))
        driver("cuDriverGetVersion", ctypes.byref(version))
    except (NoDriver, CudaError) as error:
        return f"no usable NVIDIA GPU or driver: {str(error).removeprefix('no GPU/driver: ')}"
    if count.value < 1:
        return "no NVIDIA GPU is visible to the CUDA driver"
    return driver_too_old(version.value, installed_cupy_wheel())


def installed_cupy_wheel() -> str | None:
    """The installed CuPy wheel that fixes its CUDA major version, or None (CuPy built from source)."""
    from importlib import metadata

    for name in CUPY_WHEEL_CUDA:
        with contextlib.suppress(metadata.PackageNotFoundError):
            metadata.version(name)
            return name
    return None


def driver_too_old(driver_cuda_version: int, wheel: str | None) -> str | None:
    """The sentence when the driver's CUDA version (cuDriverGetVersion: 1000 x major + 10 x minor)
    is older than the CUDA that CuPy's wheel was built for, which then cannot start; else None."""
    needed = CUPY_WHEEL_CUDA.get(wheel or "")
    if needed is None or driver_cuda_version >= needed * 1000:
        return None
    major, minor = divmod(driver_cuda_version, 1000)
    other = ", ".join(f"envs/requirements-cuda{cuda}.txt" for cuda in CUPY_WHEEL_CUDA.values()
                      if cuda * 1000 <= driver_cuda_version)
    return (f"no usable NVIDIA GPU or driver: the driver supports CUDA {major}.{minor // 10} and CuPy ({wheel}) needs "
            f"CUDA {needed}" + (f"; install {other}" if other else "; update the driver"))


_measurement_streams: dict[int, Any] = {}


def measurement_stream() -> Any:
    """The one non-blocking stream every measurement of this process runs on, made once and kept:
    a process times small kernels ~10% slower on any stream made after destroying one (H200,
    rmsnorm 512x128 vec: 1.685 us on the first stream, 1.86 us on each later new one)."""
    cp = cupy()
    device_id = cp.cuda.Device().id
    if device_id not in _measurement_streams:
        _measurement_streams[device_id] = cp.cuda.Stream(non_blocking=True)
    return _measurement_streams[device_id]


class OtherContext:
    """A second CUDA context of this process on one device, which clears one tiny buffer when asked.

    Why: after 8 or more modules are loaded the GPU times a small kernel ~10% slower (H200, rmsnorm
    512x128 vec: 1.68 vs 1.86 us) until it has run another context's work. A `--cores 1` worker
    never sees another context's work, a parallel run's workers do; so each measurement starts
    after this context's work instead of after whatever ran last. One per process and device."""

    def __init__(self) -> None:
        self._driver = Driver()
        device_index = ctypes.c_int()
        self._driver("cuCtxGetDevice", ctypes.byref(device_index))
        self._context = ctypes.c_void_p()
        self._driver("cuCtxCreate_v2", ctypes.byref(self._context), 0, device_index)
        try:  # cuCtxCreate made it current: allocate in it, then give the thread back its context
            self._buffer = ctypes.c_uint64()
            self._driver("cuMemAlloc_v2", ctypes.byref(self._buffer), ctypes.c_size_t(4096))
        finally:
            self._pop()

    def _pop(self) -> None:
        popped = ctypes.c_void_p()
        self._driver("cuCtxPopCurrent_v2", ctypes.byref(popped))

    def run(self) -> None:
        """Clear the buffer in the other context and wait for it; the thread's context is current again after."""
        self._driver("cuCtxPushCurrent_v2", self._context)
        try:
            self._driver("cuMemsetD32_v2", self._buffer, ctypes.c_uint(0), ctypes.c_size_t(1024))
            self._driver("cuCtxSynchronize")
        finally:
            self._pop()


_other_contexts: dict[int, OtherContext | str] = {}


def _other_context(device_id: int) -> OtherContext | str:
    """This process's other context on the device, made on first use, or why there is none."""
    if device_id not in _other_contexts:
        try:
            _other_contexts[device_id] = OtherContext()
        except (NoDriver, CudaError, AttributeError) as error:
            _other_contexts[device_id] = f"unavailable: {error}"[:200]
    return _other_contexts[device_id]


def prepare_measurement(context_switch: bool = True) -> None:
    """Make the stream and, when the method switches contexts, the other context, holding the GPU
    shared: made inside a worker's first exclusive hold, they tripled its exclusive time."""
    cp = cupy()
    measurement_stream()
    if context_switch:
        _other_context(cp.cuda.Device().id)


def switch_contexts() -> str:
    """Run OtherContext's tiny work before a measurement; returns what the record says:
    'other context' or why not."""
    cp = cupy()
    device_id = cp.cuda.Device().id
    cp.cuda.Device().synchronize()
    other = _other_context(device_id)
    if isinstance(other, str):
        return other
    try:
        other.run()
    except RuntimeError as error:
        return f"failed: {error}"[:200]
    return "other context"


@dataclass
class CompiledKernel:
    function: Any
    source_sha256: str
    compile_options: tuple[str, ...]
    attributes: dict[str, int]
    binary_sha256: str = ""  # of the bytes that ran (kernelkit.binaries)


@functools.lru_cache(maxsize=None)
def compute_capability(device_id: int) -> str:
    """The compute capability of CUDA device `device_id` as CuPy spells it ("90"), asked of the
    driver: CuPy's query makes a context, in a process that may need none, and waits behind other
    processes' contexts (0.85 s on an H200 beside seven; the driver's: 0.000 s)."""
    try:
        driver = Driver()
        driver("cuInit", 0)
        device = ctypes.c_int()
        driver("cuDeviceGet", ctypes.byref(device), device_id)
        major, minor = ctypes.c_int(), ctypes.c_int()
        # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR and _MINOR (cuda.h)
        driver("cuDeviceGetAttribute", ctypes.byref(major), 75, device)
        driver("cuDeviceGetAttribute", ctypes.byref(minor), 76, device)
    except (NoDriver, CudaError):
        return str(cupy().cuda.Device(device_id).compute_capability)
    return f"{major.value}{minor.value}"


def compile_binary(source: str, options: tuple[str, ...]) -> binaries.Binary:
    """The build's binary from the kit's cache, compiled with NVRTC (through CuPy, as its RawKernel
    does) when missing. CPU work: NVRTC needs no context."""
    cp = cupy()
    from cupy.cuda import compiler

    # CuPy picks the target from these two: the device's architecture, capped by what NVRTC targets.
    arch = compute_capability(cp.cuda.Device().id)
    nvrtc_version = ".".join(str(part) for part in cp.cuda.nvrtc.getVersion())
    key = binaries.cache_key(source, options, str(arch), nvrtc_version, cp.__version__)
    found = binaries.cached(key)
    if found is not None:
        return found
    compiled = compiler.compile_using_nvrtc(source, options)
    return binaries.store(key, compiled[0] if isinstance(compiled, tuple) else compiled)


def compile_kernel(spec: KernelSpec, mutation: str | None = None, entry: str | None = None,
                   options: tuple[str, ...] | None = None) -> CompiledKernel:
    """One function (default: the spec's entry) of the spec's source, a negative-control mutation
    applied if named, compiled (kernelkit.binaries) and loaded; `options` default to the spec's."""
    cp = cupy()
    options = tuple(spec.compile_options) if options is None else tuple(options)
    binary = compile_binary(spec.source_text(mutation), binaries.build_options(options))
    # CuPy keeps one module per path and device, as it kept one per source for RawKernel.
    function = cp.RawModule(path=str(binary.path)).get_function(entry or spec.entry)
    # Reading the attributes loads the kernel now, outside any timed interval.
    attributes = {
        name: int(value)
        for name, value in function.attributes.items()
        if isinstance(value, (int, np.integer))
    }
    return CompiledKernel(function, spec.source_sha256(mutation), options, attributes, binary.sha256)


def upload(inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Device copies of host arrays. A C-contiguous array is copied straight from pageable memory:
    CuPy's asarray would pin a staging buffer first, which slows another process's GPU work."""
    cp = cupy()
    uploaded = {}
    for name, array in inputs.items():
        if isinstance(array, np.ndarray) and array.flags.c_contiguous and array.nbytes:
            device_array = cp.empty(array.shape, dtype=array.dtype)
            device_array.data.copy_from_host(array.ctypes.data, array.nbytes)
            uploaded[name] = device_array
        else:
            uploaded[name] = cp.asarray(array)
    return uploaded


def pad(nbytes: int) -> Any:
    """Device memory held only so that the next allocations land at other addresses."""
    return cupy().empty(nbytes, dtype=np.uint8)


def addresses(arrays: Mapping[str, Any]) -> dict[str, int]:
    """Device addresses of the arrays, recorded so that a placement-dependent time can be traced."""
    return {name: int(array.data.ptr) for name, array in arrays.items() if hasattr(array, "data")}


def download(array: Any) -> np.ndarray:
    return cupy().asnumpy(array)


def launcher(spec: KernelSpec, kernel: CompiledKernel, layout: Mapping[str, Any], shape: Shape, buffers: Mapping[str, Any], out: Any):
    """A zero-argument callable that enqueues one launch on the current stream."""
    geometry = spec.launch(layout, shape)
    args = spec.arguments(buffers, out, shape)
    function = kernel.function

    def launch_once() -> None:
        function(geometry.grid, geometry.block, args, shared_mem=geometry.shared_mem)

    return launch_once, geometry


@dataclass
class Implementation:
    """One layout ready to run on given buffers: the call, and what to record about it."""

    call: Any
    record: dict[str, Any]
    # The buffer a hand-written layout writes; None for a baseline, whose call returns its output.
    out: Any = None


def compile_layout(spec: KernelSpec, layout: str) -> CompiledKernel | None:
    """The layout's kernel compiled and loaded, or None for a library baseline (whose package is
    imported here instead): for a baseline, call it before taking the GPU lock (seconds of CPU
    work); for a hand-written layout, holding it (loading a module is GPU work)."""
    if spec.is_baseline(layout):
        from kernelkit import library

        library.preload(spec.baselines[layout].package)
        return None
    return compile_kernel(spec, entry=spec.entry_of(layout), options=spec.compile_options_of(layout))


def implementation(spec: KernelSpec, layout: str, shape: Shape, buffers: Mapping[str, Any], out: Any,
                   kernel: CompiledKernel | None = None) -> Implementation:
    """A hand-written layout compiled (unless `kernel` is given) and bound to `out`, or a library
    baseline bound to the inputs (it returns its own output); everything slow, before any timing."""
    if spec.is_baseline(layout):
        from kernelkit import library

        baseline = spec.baselines[layout]
        return Implementation(
            baseline.make_call(buffers, shape),
            {
                "library": {"package": baseline.package, "version": library.version(baseline.package), "call": baseline.call},
                "kernel_attributes": {},
                "source_sha256": spec.source_sha256(),
                "compile_options": [],
            },
        )
    kernel = kernel or compile_layout(spec, layout)
    launch_once, geometry = launcher(spec, kernel, spec.layout(layout), shape, buffers, out)
    return Implementation(
        launch_once,
        {
            "launch": {"grid": list(geometry.grid), "block": list(geometry.block), "shared_mem_bytes": geometry.shared_mem},
            "kernel_attributes": kernel.attributes,
            "source_sha256": kernel.source_sha256,
            "compile_options": list(kernel.compile_options),
            "binary_sha256": kernel.binary_sha256,
        },
        out,
    )


def device_name() -> str:
    cp = cupy()
    return _text(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"])


def card() -> dict[str, Any]:
    """The card this process runs on, as every GPU record names it: NVML's UUID and index (as
    nvidia-smi and the workflow's `gpus` list number it), by the PCI bus id of the CUDA device the
    process uses, whatever CUDA_VISIBLE_DEVICES said; both None where no GPU or NVML answers."""
    try:
        bus_id = cupy().cuda.Device().pci_bus_id
    except KitError:
        return {"gpu_uuid": None, "gpu_index": None}
    nvml = Nvml(bus_id)
    uuid = nvml.read(lambda n, h: n.nvmlDeviceGetUUID(h))
    index = nvml.read(lambda n, h: n.nvmlDeviceGetIndex(h))
    return {
        "gpu_uuid": uuid if isinstance(uuid, str) and not uuid.startswith(UNAVAILABLE) else None,
        "gpu_index": index if isinstance(index, int) else None,
    }
