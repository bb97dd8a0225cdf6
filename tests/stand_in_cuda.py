"""A stand-in for the CUDA driver that kernelkit.driver_launch calls through ctypes: it answers
every call as a driver with one GPU would, fills what a call returns through its pointers, and
runs nothing. For CPU tests of what the sanitizer's child does around its launches; that it
launches the kernels is checked on a GPU (tests/test_gpu_race_checks.py).

`python stand_in_cuda.py --wait DIR` runs the kit's waiting child (driver_launch --wait) on it.
"""

from __future__ import annotations

import ctypes
import sys

UUID = bytes(range(16))
# driver_launch.lock_key's text of UUID: what the lock key of this stand-in's GPU is.
KEY = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


class StandInDriver:
    def __init__(self, library: str = "") -> None:
        self.calls: list[str] = []

    def __call__(self, name: str, *arguments: object) -> None:
        self.calls.append(name)
        target = getattr(arguments[0], "_obj", None) if arguments else None
        if name == "cuDeviceGetCount":
            target.value = 1
        elif name.startswith("cuDeviceGetUuid"):
            ctypes.memmove(target, UUID, len(UUID))
        elif name in ("cuDevicePrimaryCtxRetain", "cuModuleLoadData", "cuModuleGetFunction"):
            target.value = 1
        elif name == "cuMemAlloc_v2":
            target.value = 4096

    def error_name(self, code: int) -> str:
        return "stand-in"


if __name__ == "__main__":
    from kernelkit import driver_launch

    driver_launch.Driver = StandInDriver
    sys.exit(driver_launch.main(sys.argv[1:]))
