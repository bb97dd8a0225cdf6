"""Several GPUs on one host: which cards the run uses, and which card runs what, at parse time.

Timings compared with each other (every layout, repeat and cache view of one kernel/shape) must
come from one card: H200s of one host differ by up to 2.7% on the same target (issue 14). So
each kernel/shape has a fixed card, balanced by the work it is expected to take."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from kernelkit import KitError

if TYPE_CHECKING:
    from kernelkit.plan import Plan

# This model only balances cards and never appears in a result: a timing job costs the card its
# uploads, graph builds and clock checks (H200: 0.04 s per job for the smallest kernels) plus its calls.
GPU_SECONDS_PER_PROCESS = 0.1
# Rough rates of a current data-centre GPU; only their ratio to the overhead matters.
COPY_BYTES_PER_S = 3.0e12
FP32_FLOPS_PER_S = 5.0e13


def discover(configured: Any, environ: Mapping[str, str] | None = None) -> list[int] | None:
    """The physical GPU indices the run uses: None where the scheduler picks (`gpus: allocated`, or SLURM
    without `gpus`), else config key `gpus`, CUDA_VISIBLE_DEVICES or NVML's count; [0] without a GPU."""
    environ = os.environ if environ is None else environ
    if configured == "allocated" or (configured is None and environ.get("SLURM_JOB_ID")):
        return None
    if configured is None:
        entries = [entry.strip() for entry in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
        if not all(entry.isdigit() for entry in entries):
            raise KitError(f"CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']} names devices other than by index; "
                           "set config key 'gpus' to a list of indices, e.g. gpus=[0,1], or gpus=allocated")
        configured = entries or range(_nvml_count() or 1)
    return sorted(set(int(index) for index in configured))


def from_command_line(value: Any) -> Any:
    """`--config gpus=[0,1]` gives ['0', '1']: indices written as digits become integers."""
    if isinstance(value, list):
        return [int(item) if isinstance(item, str) and item.strip().isdigit() else item for item in value]
    return value


def _nvml_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no pynvml, no driver, no GPU: one card, as documented above
        return 0


@dataclass(frozen=True)
class Work:
    """The expected seconds of GPU-job work of one kernel/shape."""

    kernel: str
    shape: str
    processes: int
    seconds: float


def expected_work(plan: Plan) -> list[Work]:
    """Each configured kernel/shape's expected seconds of GPU work: an overhead per process, plus its calls."""
    from kernelkit.kernel_time import GraphReplayMethod, launches_per_sample

    config = plan.config
    method = GraphReplayMethod.from_timing(config["timing"])
    span = config.get("span") or {}
    span_calls = span.get("warmup_calls", 0) + span.get("rounds", 0) * span.get("samples_per_round", 0)
    works = []
    for kernel in plan.kernels:
        spec = plan.specs[kernel]
        # Sweep points are layouts of their kernel/shape: they run on its card and count in its work.
        layouts = len(plan.layouts[kernel])
        for shape in plan.shapes(kernel):
            parsed = spec.parse_shape(shape)
            per_call_s = spec.bytes_moved(parsed) / COPY_BYTES_PER_S + spec.flops(parsed) / FP32_FLOPS_PER_S
            per_sample = launches_per_sample(per_call_s * 1e6, method)
            timing_calls = method.warmup_launches + (method.samples + method.untimed_replays) * per_sample
            timed = layouts * plan.repeats * len(plan.caches)
            spans = plan.span_repeats if kernel in plan.span_kernels else 0
            processes = timed + spans + (layouts if config.get("profile") else 0)  # profiles
            calls = timed * timing_calls + spans * layouts * span_calls
            works.append(Work(kernel, shape, processes, processes * GPU_SECONDS_PER_PROCESS + calls * per_call_s))
    return works


def assign(works: list[Work], gpus: list[int]) -> dict[tuple[str, str], int]:
    """Kernel/shape -> GPU: longest work first onto the least-loaded card, ties broken so it is deterministic."""
    if not gpus:
        raise KitError("no GPU to assign work to; config key 'gpus' needs at least one index")
    load = {gpu: 0.0 for gpu in gpus}
    placed = {}
    for work in sorted(works, key=lambda w: (-w.seconds, w.kernel, w.shape)):
        gpu = min(gpus, key=lambda g: (load[g], g))
        placed[(work.kernel, work.shape)] = gpu
        load[gpu] += work.seconds
    return placed


def kernels_by_work(works: list[Work]) -> dict[str, int]:
    """Kernel -> rank by its expected GPU-job work, 0 for the least (ties: by name). Every timing of
    a kernel waits for its checks, so the kernel with the most timing work behind them goes first."""
    total: dict[str, float] = {}
    for work in works:
        total[work.kernel] = total.get(work.kernel, 0.0) + work.seconds
    return {kernel: rank for rank, kernel in enumerate(sorted(total, key=lambda kernel: (total[kernel], kernel)))}


def check_cards(plan: Plan, gpus: list[int]) -> dict[str, int]:
    """Kernel -> the card that runs its checks, spread by their number of jobs: until they pass they
    are all the work there is (h200-w2x2d: on each kernel's first shape's card, one of two H200s idled)."""
    works = []
    for kernel in plan.kernels:
        jobs = len(plan.correctness_files(kernel) + plan.control_files(kernel) + plan.sanitizer_files(kernel))
        works.append(Work(kernel, "", jobs, float(jobs)))
    return {kernel: gpu for (kernel, _), gpu in assign(works, gpus).items()}


def pin(gpu: int | None) -> str:
    """The shell prefix that gives a job exactly one card, or nothing when the scheduler did.
    PCI_BUS_ID order makes index i the same card for CUDA, NVML and the per-GPU lock."""
    return "" if gpu is None else f"export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={gpu}; "
