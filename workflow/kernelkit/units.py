"""Numbers scaled to a readable unit, as nvbench prints them (12.3 us, 4.10 ms, 3.21 TB/s, 512 MiB), and natural order.
Shared by the report, the diff and the history (which read records only): nothing heavier than `re` is imported."""

from __future__ import annotations

import re


def natural_key(text: str) -> tuple:
    """Numbers compare as numbers: 512x128 before 4096x128, t32 before t256."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def sort_key(key: tuple) -> tuple:  # a (kernel, shape, layout, ...) key in natural order, part by part
    return tuple(natural_key(str(part)) for part in key)


def _in_unit(us: float) -> tuple[float, str]:
    if us < 1:
        return us * 1e3, "ns"
    if us < 1e3:
        return us, "us"
    if us < 1e6:
        return us / 1e3, "ms"
    return us / 1e6, "s"


def duration(us: float | None) -> str:
    if us is None:
        return "n/a"
    value, unit = _in_unit(us)
    digits = 1 if unit == "ns" else 2 if unit == "us" and us >= 100 else 3
    return f"{value:.{digits}f} {unit}"


def bandwidth(bytes_: float, us: float) -> str:
    rate = bytes_ / (us * 1e-6)
    return f"{rate / 1e12:.2f} TB/s" if rate >= 1e12 else f"{rate / 1e9:.1f} GB/s"


def arithmetic(flops: float, us: float) -> str:
    rate = flops / (us * 1e-6)
    return f"{rate / 1e12:.2f} TFLOP/s" if rate >= 1e12 else f"{rate / 1e9:.1f} GFLOP/s"


def size(bytes_: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if bytes_ >= scale:
            return f"{bytes_ / scale:.2f} {unit}" if bytes_ / scale < 10 else f"{bytes_ / scale:.1f} {unit}"
    return f"{int(bytes_)} B"


def percent(fraction: float, signed: bool = False) -> str:
    return f"{100 * fraction:+.1f}%" if signed else f"{100 * fraction:.1f}%"


def _three(value: float) -> str:
    """Three significant digits, no exponent: 1.86, 14.9, 275."""
    size = abs(value)
    return f"{value:.2f}" if size < 10 else f"{value:.1f}" if size < 100 else f"{value:.0f}"


def short(us: float | None) -> str:
    """A time to three significant digits, as the answers print it: 1.86 us, 14.9 us, 16.9 ms."""
    if us is None:
        return "n/a"
    value, unit = _in_unit(us)
    return f"{_three(value)} {unit}"


def ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def spread(values: list[float], unit: str = "", digits: int | None = None) -> str:
    """The min-max of a list as 'low-high unit' ('1.85-1.87 us'; with a negative bound 'low to high')."""
    if not values:
        return "n/a"
    low, high = min(values), max(values)
    text = (lambda v: f"{v:.{digits}f}") if digits is not None else _three
    joint = " to " if low < 0 or high < 0 else "-"
    return f"{text(low)}{joint}{text(high)}{unit}"


def extent(counts: list[int]) -> str:
    """The smallest and largest of some counts: '3', or '2 to 5'."""
    return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)} to {max(counts)}"
