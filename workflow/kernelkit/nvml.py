"""NVML, read by every GPU stage: the card's identity, clocks and clock-event reasons. Every
field read is a value or "unavailable: <reason>", so a record can tell "not recorded" from
"recorded as zero"; pynvml is imported only when a card is opened.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

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


def unavailable(error: Exception) -> str:
    return f"{UNAVAILABLE}{type(error).__name__}: {error}".rstrip(": ")


def is_unavailable(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(UNAVAILABLE)


def _read(getter: Callable[[], Any]) -> Any:
    try:
        value = getter()
    except Exception as error:  # NVMLError_NotSupported, NoPermission, AttributeError on old bindings...
        return unavailable(error)
    return value.decode() if isinstance(value, bytes) else value


class Nvml:
    """A handle on NVML for one device, or the reason there is none."""

    def __init__(self, pci_bus_id: str | None = None) -> None:
        # By PCI bus id: NVML and CUDA number devices differently under CUDA_VISIBLE_DEVICES.
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
