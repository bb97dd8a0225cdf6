"""The timing stage: kernel time of every layout of one kernel / shape / repeat, as one process.
The method is kernelkit.kernel_time's; this stage owns the process around it: the settings, the
GPU lock, the inputs, the verification of the timed output, the clock sampler and the record.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

from kernelkit import KitError, spec as specs
from kernelkit import config as kit_config
from kernelkit.gpulock import LOCK_KEYS, LockSettings
from kernelkit.gpulock import add_arguments as add_lock_argument
from kernelkit.inputs import timing_inputs
from kernelkit.kernel_time import GraphReplayMethod, HostLead, L2Flush, kernel_time_samples, measured_around
from kernelkit.sampler import SAMPLER_KEYS, SamplerSettings
from kernelkit.plan import layout_order
from kernelkit.shape_bounds import check_fits

# The keys of the config each timed target depends on; `repeats`, `order_seed` and `cache` shape
# the plan (which targets exist, in which order), not how one target is timed.
TIMING_KEYS = ("warmup_launches", "launches_per_graph", "samples", "max_sample_ms", "stop", "placements", "host_lead_us",
               "context_switch")
# Placement i > 0 allocates i MiB more before its buffers, and every placement's buffers stay
# allocated until the end: the schema's maximum of timing.placements bounds that memory.
PLACEMENT_SHIFT_BYTES = 1 << 20


@dataclass(frozen=True)
class TimingSettings(kit_config.StageSettings):
    """Everything the config says about how one timed target is sampled."""

    SECTIONS: ClassVar[Mapping[str, Sequence[str]]] = {"timing": TIMING_KEYS, "sampler": SAMPLER_KEYS,
                                                       "gpu_lock": LOCK_KEYS}
    method: GraphReplayMethod
    placements: int
    sampler: SamplerSettings
    lock: LockSettings

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "TimingSettings":
        return cls(GraphReplayMethod.from_timing(config["timing"]), config["timing"]["placements"],
                   SamplerSettings.from_config(config["sampler"]), LockSettings.from_config(config["gpu_lock"]))


def time_layout(args: argparse.Namespace, layout_name: str, order: list[str], clock: Any, skipped: str | None) -> None:
    """Time one layout of the job's kernel/shape and write its record (`--output-dir`/<layout>/rep<N>.json);
    `skipped`: why its checks skipped it (its library is missing here), when they did."""
    from kernelkit import device, foreign, gpujob, sampler, verify
    from kernelkit.nvml import Nvml
    from kernelkit.records import write_record
    from kernelkit.stats import summarize

    settings = TimingSettings.from_json(args.settings)
    method = settings.method
    spec = specs.load(args.kernel)
    layout = spec.layout(layout_name)
    shape = spec.parse_shape(args.shape)
    output = os.path.join(args.output_dir, layout_name, f"rep{args.repeat}.json")
    identity = {
        "kernel": spec.name,
        "shape": args.shape,
        "dims": dict(zip(spec.dims, shape)),
        "layout": layout_name,
        "layout_parameters": dict(layout),
        "repeat": args.repeat,
        # `key` orders the records of a repeat as they ran: the job's key in the plan, then the place.
        "order": {"seed": args.order_seed, "key": args.order_key * 64 + order.index(layout_name),
                  "layouts": order, "position": order.index(layout_name)},
        # Only when above 1, so that runs with one placement compare equal to files written before the option.
        "method": {**method.describe(), **({"placements": settings.placements} if settings.placements > 1 else {})},
    }
    if skipped:
        write_record(output, {**identity, "skipped": skipped, "job": clock.describe()})
        print(f"{spec.name} {args.shape} {layout_name} rep{args.repeat}: skipped ({skipped})")
        return

    # Before the lock, the CPU's share: nothing here creates the CUDA context (device queries do not).
    with clock.phase("start_cuda_nvml"):
        cp = device.cupy()
        bus_id = cp.cuda.Device().pci_bus_id
        nvml = Nvml(bus_id)
        sm_clock_max = nvml.read(lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))
        # A shape that cannot fit stops here with one sentence, before any input is made.
        memory = nvml.read(lambda n, h: n.nvmlDeviceGetMemoryInfo(h).total)
        if isinstance(memory, int):
            check_fits(spec, shape, memory, copies=settings.placements)
    with clock.phase("host_inputs"):
        host_inputs = timing_inputs(spec, args.shape)
        small = verify.small_reference(spec, shape, host_inputs)
    pads: list[Any] = []

    def placed(index: int) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """The implementation on a fresh copy of the inputs, those buffers, and where they lie
        (placement i > 0 lands elsewhere: where buffers land can change a time by 20%)."""
        if index:
            pads.append(device.pad(index * PLACEMENT_SHIFT_BYTES))
        buffers = device.upload(host_inputs)
        out = cp.empty(spec.output_shape(shape), dtype=cp.float32)
        implementation = device.implementation(spec, layout_name, shape, buffers, out, kernel=kernel)
        cp.cuda.Device().synchronize()
        return implementation, buffers, {"index": index, "pad_bytes": sum(p.nbytes for p in pads),
                                         "addresses": device.addresses({**buffers, "out": out})}

    def wait(keep_busy: Any) -> dict[str, Any]:
        read_clock = lambda: nvml.read(lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))  # noqa: E731
        return sampler.wait_for_clock(read_clock, sm_clock_max, settings.sampler, keep_busy)

    # Each placement is made once and stays allocated, so that a later one cannot reuse its
    # addresses and a stretch taken again after foreign work samples the same buffers.
    made: list[tuple[Any, dict[str, Any]]] = []

    def sample_placements() -> dict[str, Any]:
        """Every placement's samples, for one exclusive stretch."""
        taken: dict[str, Any] = {"samples": [], "windows": [], "sample_placement": [], "placements": []}
        for index in range(settings.placements):
            if index == len(made):
                implementation, _, where = placed(index)
                made.append((implementation, where))
            implementation, where = made[index]
            with clock.phase("warmup_and_samples"):
                got, used_here, got_windows = kernel_time_samples(implementation.call, method, wait, flush, lead)
            taken["placements"].append({**where, "method_used": used_here, "samples": len(got)})
            taken["samples"] += got
            taken["windows"] += got_windows
            taken["sample_placement"] += [index] * len(got)
        return taken

    lock = settings.lock.with_dir(args.lock_dir)
    with gpujob.shared_gpu(nvml, bus_id, lock, clock):
        with clock.phase("load_modules"):
            kernel = device.compile_layout(spec, layout_name)
            device.prepare_measurement(method.context_switch)
            comparer = verify.DeviceComparer()
            lead = HostLead(method.host_lead_us)
        with clock.phase("upload"):
            implementation, buffers, placement = placed(0)
            made.append((implementation, placement))
        with clock.phase("verify_reference"):
            reference = verify.reference_for(spec, shape, host_inputs, buffers, small)
            cp.cuda.Device().synchronize()
        with clock.phase("verify_call_and_compare"):
            verified = verify.verify_timed_output(spec, layout_name, args.shape, implementation, reference, comparer)
            del reference, buffers
            cp.get_default_memory_pool().free_all_blocks()  # later allocations land as they would without this check
        flush = L2Flush() if args.cache == "cold" else None
        cp.cuda.Device().synchronize()  # nothing of this process runs on while it waits for the GPU to itself
        with gpujob.exclusive_gpu(nvml, bus_id, lock, clock) as gpu:
            while True:
                stretch = gpu.sample(nvml, settings.sampler, sample_placements)
                taken = stretch.result
                tags = sampler.tag_samples(taken["windows"], stretch.trace, settings.sampler, sm_clock_max,
                                           foreign.busy_after(stretch.look))
                if not gpu.again_after_foreign(tags, lambda: {
                        "samples_us": taken["samples"], "sample_placement": taken["sample_placement"],
                        "sample_tags": tags, "clock_trace": stretch.trace,
                        "foreign_work": foreign.foreign_work(stretch.trace, tags, gpu.busy_before_pct, stretch.look)}):
                    break
    implementation = made[-1][0]
    samples, placements = taken["samples"], taken["placements"]
    used = dict(placements[0]["method_used"])
    if flush is not None:
        used["flush"] = flush.describe()

    write_record(
        output,
        {
            **identity,
            **device.card(),
            "method_used": used,
            "unit": "microseconds per launch",
            "samples_us": samples,
            "placements": placements,
            "sample_placement": taken["sample_placement"],
            "sampler": settings.sampler.describe(),
            "sample_tags": tags,
            "disturbed_samples": sampler.disturbed(tags),
            "clock_trace": stretch.trace,
            "verified": verified,
            **implementation.record,
            **measured_around(spec, shape, stretch.before, stretch.after),
            "foreign_work": foreign.foreign_work(stretch.trace, tags, gpu.busy_before_pct, stretch.look),
            "idle_wait": gpu.idle_wait,
            # Only where it happened: stretches that foreign work touched, taken again after a wait.
            **({"retimed_after_foreign_work": gpu.retimed} if gpu.retimed else {}),
            "job": clock.describe(),
        },
    )
    print(f"{spec.name} {args.shape} {layout_name} rep{args.repeat} ({args.cache} cache): median "
          f"{summarize(samples).median:.3f} us over {len(samples)} samples ({used['name']}, "
          f"{used['launches_per_sample']} calls per sample); {len(stretch.trace)} clock readings, "
          f"{len(sampler.disturbed(tags))} samples disturbed"
          + (f"; taken again {len(gpu.retimed)}x after foreign work" if gpu.retimed else ""))


def correctness_file(files: Sequence[str], layout: str) -> str:
    """The correctness record of `layout` among those given (named <layout>.json)."""
    named = [name for name in files if os.path.basename(name) == f"{layout}.json"]
    if not named:
        raise KitError(f"no correctness record of layout '{layout}' was given; nothing will be timed")
    return named[0]


def cmd_time(args: argparse.Namespace) -> int:
    """Every named layout of one kernel/shape/repeat, in one process, in the seeded order."""
    from kernelkit import cases, device, gpujob, sanitizer

    clock = gpujob.JobClock()
    TimingSettings.from_json(args.settings)  # a setting out of range: its sentence before anything else
    spec = specs.load(args.kernel)
    # Every layout's checks are read before any is timed: a layout that did not pass stops the job here.
    skipped = {layout: cases.require_checked(spec, layout, correctness_file(args.correctness, layout), args.controls,
                                             None if spec.is_baseline(layout) else sanitizer.record_for(args.sanitizer, layout))
               for layout in args.layout}
    # The libraries' imports (Torch alone takes seconds) before the first layout takes the GPU lock.
    with clock.phase("import_library"):
        device.cupy()  # no CuPy or no GPU: the kit's one sentence, before any library is imported
        for layout in args.layout:
            if spec.is_baseline(layout) and not skipped[layout]:
                device.compile_layout(spec, layout)  # imports the baseline's package; nothing to compile
    order = layout_order(args.order_seed, args.kernel, args.shape, args.repeat, args.cache, args.layout)
    for layout in order:
        time_layout(args, layout, order, clock, skipped[layout])
        if "cupy" in sys.modules:  # the next layout starts from an empty memory pool, as its own process would
            sys.modules["cupy"].get_default_memory_pool().free_all_blocks()
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "time", help="kernel time of layouts of one kernel/shape, in one process, in a seeded order "
                     "(CUDA-graph replay, else back-to-back events)")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--shape", required=True, help="one shape of the kernel, e.g. 512x128")
    p.add_argument("--layout", action="append", required=True, help="a layout of the kernel, repeatable")
    p.add_argument("--correctness", nargs="+", required=True,
                   help="the layouts' correctness records from this run (<layout>.json)")
    p.add_argument("--controls", nargs="*", default=[], help="the kernel's negative-control records from this run")
    p.add_argument("--sanitizer", nargs="*", default=[],
                   help="the kernel's sanitizer record from this run, covering the layout (none: races were not checked)")
    p.add_argument("--output-dir", required=True, help="where to write each layout's record, <layout>/rep<N>.json")
    kit_config.add_settings_argument(p, TimingSettings.SECTIONS)
    add_lock_argument(p)
    p.add_argument("--repeat", type=int, required=True, help="which repeat of the run this process is (from 1)")
    p.add_argument("--order-seed", type=int, required=True, help="timing.order_seed: seeds the order of the layouts")
    p.add_argument("--order-key", type=int, required=True,
                   help="this job's key in the seeded order of its repeat (kernelkit.plan.order_key)")
    p.add_argument("--cache", choices=("warm", "cold"), required=True,
                   help="cold: evict L2 before every sample, which is then a single call")
    p.set_defaults(func=cmd_time)
