"""Numbers scaled to a readable unit, as nvbench prints them: 12.3 us, 4.10 ms, 3.21 TB/s, 512 MiB."""

from __future__ import annotations


def duration(us: float | None) -> str:
    if us is None:
        return "n/a"
    if us < 1:
        return f"{us * 1e3:.1f} ns"
    if us < 1e3:
        return f"{us:.3f} us" if us < 100 else f"{us:.2f} us"
    if us < 1e6:
        return f"{us / 1e3:.3f} ms"
    return f"{us / 1e6:.3f} s"


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
