"""A small synthetic run, written with the kit's own writers: the fixture of the tests that read runs.

`write_run(root, name, ...)` writes results/<name>/ under `root` as the workflow's stages would:
the validated config, the environment, the correctness and negative-control records, the timing
records (and optionally cold timings, spans, ceilings, sanitizer and Nsight Compute records, a
second card), every one at its path in kernelkit.layout and through kernelkit.records.write_record.
Nothing in it was measured on a GPU:

- correctness and control cases are the kit's own checks (kernelkit.cases.judge_case) of each
  kernel's CPU emulation (kernels/<name>/emulation.py), baselines of the float64 reference rounded
  to float32;
- timings come from a plain model (bytes over a rate, FLOPs over a rate, a launch cost, a factor
  per layout) with seeded noise, so every number a test checks is computed from the records;
- sample tags, the disturbed samples and the foreign-work summary are what kernelkit.sampler and
  kernelkit.foreign make of a synthetic NVML trace (`disturb` plants throttles, low clocks or
  another process's work into it).

Tests read the numbers back from the records, never from this module's constants; a change the
options do not make, a test edits into a copy's records (`copy_run`, `edit`), as a planted change would.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
from conftest import padded_output

from kernelkit import config as kit_config
from kernelkit import foreign, layout as paths, sampler
from kernelkit import spec as specs
from kernelkit.cases import correctness_cases, judge_case, prepare_cases, suite_record
from kernelkit.kernel_time import GraphReplayMethod, launches_per_sample
from kernelkit.records import canonical_hash, read_json, write_json_atomic, write_record
from kernelkit.sampler import SamplerSettings

UUID = "GPU-5a5a5a5a-0000-4000-8000-000000000001"
OTHER_UUID = "GPU-5a5a5a5a-0000-4000-8000-000000000002"
L2_BYTES = 60 * 2**20
MEMORY_BYTES = 150_754_820_096
SM_CLOCK_MHZ = 1980
T0 = 1_800_000_000.0  # the synthetic run's first job starts here (unix seconds)

# The default experiment: the RMSNorm comparison of seed 003 (t32 against t256, torch beside them)
# on an L2-resident shape, a mid-size one and a DRAM-sized one, two repeats.
DEFAULT_KERNELS = {"rmsnorm": {"layouts": ["t32", "t256", "torch"], "shapes": ["512x128", "4096x4096", "16384x8193"]}}
DEFAULT_CONTROLS = {"rmsnorm": ("epsilon", "tail")}

# Sustained rates of the model, below the synthetic ceilings (CEILING_RATES) so nothing exceeds them.
DRAM_GB_S, L2_GB_S, GFLOP_S, LAUNCH_US = 3800.0, 9000.0, 45_000.0, 1.5
CEILING_RATES = {"copy": 4300.0, "l2": 10_000.0, "gemm": 51_000.0, "floor_us": 0.56}
# Per layout: how much slower than the model's rate; `SMALL_FACTORS` where the call is short.
FACTORS = {"t32": 1.25, "t256": 1.0, "vec": 0.95, "torch": 1.05, "triton": 1.02, "cupy": 1.1,
           "tile16": 2.0, "reg4x4": 1.0, "block": 1.3, "warp": 1.0, "gather": 1.2, "direct": 1.3}
SMALL_FACTORS = {"t32": 1.0, "t256": 1.6}
SMALL_US = 6.0

Key = tuple[str, str, str, int]


@dataclass
class Disturbance:
    """What the synthetic NVML trace of one timed target shows besides a quiet GPU: throttle
    `reasons` and an SM clock (`sm_clock_mhz`) from trace point `from_point` on, another
    process's work (`foreign_pids`) in those points, and outsiders a look after the stretch found
    computing (`right_after`)."""

    reasons: list[str] = field(default_factory=list)
    sm_clock_mhz: float = SM_CLOCK_MHZ
    foreign_pids: list[int] = field(default_factory=list)
    right_after: list[int] = field(default_factory=list)
    from_point: int = 0


def load_spec(kernel: str) -> specs.KernelSpec:
    """kernelkit.spec.load, once per kernel folder (loading compiles the spec module)."""
    return _load_spec(kernel, str(specs.kernels_dir().resolve()))


@lru_cache(maxsize=None)
def _load_spec(kernel: str, root: str) -> specs.KernelSpec:
    return specs.load(kernel, Path(root))


@lru_cache(maxsize=None)
def _prepared(kernel: str) -> tuple[Any, ...]:
    """The kernel's correctness cases' inputs and float64 references, made once per test session."""
    spec = load_spec(kernel)
    return tuple(prepare_cases(spec, [spec.all_layouts[0]], correctness_cases(spec)))


@lru_cache(maxsize=None)
def checked_cases(kernel: str, layout: str, control: str | None = None, runs: int = 3) -> tuple[dict, ...]:
    """Every correctness case of one layout (with `control`, of its mutated build), judged by the
    kit's checks on the CPU emulation's output, each launch repeated `runs` times. Deterministic,
    so made once per test session."""
    spec = load_spec(kernel)
    emulate = specs.load_emulation(spec)
    results = []
    for prepared in _prepared(kernel):
        case = replace(prepared, layout=layout)
        if spec.is_baseline(layout):
            bits = padded_output(case.reference.astype(np.float32))
        else:
            with np.errstate(all="ignore"):
                y, unwritten = emulate(case.host_inputs, layout, control)
            bits = padded_output(y, unwritten)
        results.append(judge_case(spec, case, [bits] * runs))
    return tuple(suite_record(spec, results, control)["cases"])


def _rng(*parts: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32("/".join(map(str, parts)).encode()))


def model_us(kernel: str, shape: str, layout: str, l2_bytes: int = L2_BYTES) -> float:
    """The model's median kernel time of one configuration, in microseconds."""
    spec = load_spec(kernel)
    dims = spec.parse_shape(shape)
    moved, flops = spec.bytes_moved(dims), spec.flops(dims)
    rate = L2_GB_S if moved <= l2_bytes else DRAM_GB_S
    base = max(moved / (rate * 1e3), flops / (GFLOP_S * 1e3)) + LAUNCH_US
    factors = SMALL_FACTORS if base < SMALL_US else {}
    return base * factors.get(layout, FACTORS.get(layout.split("@")[0], 1.1))


def _snapshot(time_unix_s: float, sm_clock_mhz: float = SM_CLOCK_MHZ, reasons: Iterable[str] = ()) -> dict[str, Any]:
    from datetime import datetime, timezone

    return {"time_utc": datetime.fromtimestamp(time_unix_s, timezone.utc).isoformat(), "sm_clock_mhz": sm_clock_mhz,
            "memory_clock_mhz": 3201, "graphics_clock_mhz": sm_clock_mhz, "temperature_c": 40, "power_draw_w": 250.0,
            "performance_state": "P0", "clock_event_reasons": list(reasons)}


def _job(started: float, wall: float, process: dict[str, Any] | None, waited: float = 0.0) -> dict[str, Any]:
    """A job clock as kernelkit.gpujob.JobClock.describe writes it."""
    return {"started_unix_s": started, "ended_unix_s": started + wall, "wall_s": wall, "lock_waited_s": waited,
            "lock_held_s": wall / 2, "gpu_keys": [UUID], "gpu_work": [], "phases_s": {}, "process": process}


def environment_record(config: Mapping[str, Any], uuid: str = UUID, index: int = 0, *, nvml: bool = True,
                       bus_width: int | None = 6016, l2_bytes: int = L2_BYTES) -> dict[str, Any]:
    """An environment record with the fields kernelkit.environment.capture writes, of an H200-like card."""
    snapshot = _snapshot(T0)
    record = {
        "gpu_uuid": uuid, "gpu_index": index, "captured_utc": snapshot["time_utc"], "config_sha256": canonical_hash(config),
        "host": {"os": "Linux-synthetic", "kernel_release": "6.0", "cpu": "Synthetic CPU", "cpu_count": 16,
                 "python_version": "3.12.3", "numpy_version": np.__version__, "user": "tester",
                 "kit_commit": "0123456789abcdef0123456789abcdef01234567", "kit_tree_dirty": False},
        "cuda": {"compute_capability": "9.0", "cuda_driver_version": "13.0", "cuda_runtime_version": "13.2",
                 "cupy_version": "14.2.0", "device_index": 0, "device_name": "NVIDIA H200",
                 "global_memory_bytes": MEMORY_BYTES - 2**29, "l2_cache_bytes": l2_bytes, "nvrtc_version": "13.0",
                 "registers_per_sm": 65536, "shared_memory_per_block_optin_bytes": 232448, "sm_count": 132,
                 **({"memory_bus_width_bits": bus_width} if bus_width else {})},
        "nvml_available": nvml, "nvml_error": None,
        "gpu": {"driver_version": "580.1.1", "cuda_driver_version_nvml": "13.0", "nvml_version": "13.580.1.1",
                "name": "NVIDIA H200", "uuid": uuid, "pci_bus_id": f"00000000:00:0{6 + index}.0",
                "memory_total_bytes": MEMORY_BYTES, "sm_clock_max_mhz": SM_CLOCK_MHZ, "memory_clock_max_mhz": 3201,
                "sm_clock_application_mhz": SM_CLOCK_MHZ, "memory_clock_application_mhz": 3201,
                "sm_clock_default_application_mhz": SM_CLOCK_MHZ, "auto_boost_enabled": False, "power_limit_w": 700.0,
                "persistence_mode": True, "ecc_mode_current": True, "mig_mode_current": False, "compute_mode": 0,
                "clock_event_reasons_supported": ["gpu_idle", "sw_power_cap", "hw_slowdown"]},
        "clocks_locked": False, "snapshot": snapshot,
        "baseline_packages": {"cupy": "14.2.0", "torch": "2.11.0", "triton": "3.6.0"},
        "busy_before_pct": 0, "idle_wait": None, "job": _job(T0, 2.0, {"pid": 100 + index, "started_unix_s": T0}),
    }
    return record


def ceiling_record(kind: str, method: Mapping[str, Any], uuid: str = UUID, index: int = 0, *, factor: float = 1.0,
                   sizes: bool = True) -> dict[str, Any]:
    """A ceiling record as kernelkit.ceilings.measure and its stage write it: `factor` scales the
    card's rates (a card 2% slower: 0.98)."""
    method = dict(method)
    used = {"cache": "warm", "context_switch": "other context", "launches_per_sample": 16, "name": "cuda_graph_replay",
            "stopped_by": "fixed_count"}
    rng = _rng("ceiling", kind, uuid)

    def samples(median_us: float) -> list[float]:
        return [float(median_us * (1 + 0.0005 * v)) for v in rng.standard_normal(15)]

    if kind in ("copy", "l2"):
        moved = 2 * 2**31 if kind == "copy" else 2 * L2_BYTES // 4
        rate = CEILING_RATES[kind] * factor
        variants = {"memcpy": samples(moved / (0.65 * rate * 1e3)), "grid_stride_1056x256": samples(moved / (0.97 * rate * 1e3)),
                    "one_quad_per_thread": samples(moved / (rate * 1e3))}
        best = min(variants, key=lambda name: float(np.median(variants[name])))
        work = {"bytes": moved, "what": f"device-to-device copy of {moved // 2} bytes; the fastest of {', '.join(variants)}"}
    elif kind == "gemm":
        flops = 2 * 4096**3
        variants = {"cupy": samples(flops / (0.98 * CEILING_RATES["gemm"] * factor * 1e3)),
                    "torch": samples(flops / (CEILING_RATES["gemm"] * factor * 1e3))}
        best = min(variants, key=lambda name: float(np.median(variants[name])))
        work = {"flops": flops, "what": "FP32 4096x4096x4096 matrix product (cuBLAS SGEMM); the fastest of cupy, torch"}
    elif kind == "floor":
        return {"kind": "floor", "what": "an empty kernel, one thread, through the same timing method as every target",
                "samples_us": samples(CEILING_RATES["floor_us"] / factor), "method": method, "method_used": used,
                "gpu_uuid": uuid, "gpu_index": index, "device_name": "NVIDIA H200", "unit": "microseconds per call",
                **({"sizes": {"copy_bytes": 2**31, "gemm_n": 4096}} if sizes else {})}
    else:
        raise ValueError(kind)
    return {"kind": kind, **work, "variants": {name: {"samples_us": v, "method_used": used} for name, v in variants.items()},
            "best": best, "samples_us": variants[best], "method": method, "method_used": used, "gpu_uuid": uuid,
            "gpu_index": index, "device_name": "NVIDIA H200", "unit": "microseconds per call",
            **({"sizes": {"copy_bytes": 2**31, "gemm_n": 4096}} if sizes else {})}


def edit(path: Path, change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """Change one record in place (a planted change): `change` edits the parsed record; the kit's
    atomic writer puts it back, every other key as it was."""
    record = read_json(path)
    change(record)
    write_json_atomic(path, record)
    return record


def _order(seed: int, kernel: str, shape: str, repeat: int, cache: str, layouts: list[str]) -> list[str]:
    order = list(layouts)
    random.Random(f"{seed}/{repeat}/{kernel}/{shape}/{cache}").shuffle(order)
    return order


def write_run(
    root: Path,
    name: str = "synthetic",
    *,
    kernels: Mapping[str, Mapping[str, list[str]]] | None = None,
    repeats: int = 2,
    samples: int = 15,
    seed: int = 0,
    noise: float = 0.002,
    scale: Callable[[Key], float] | Mapping[Any, float] | None = None,
    hypotheses: list[dict[str, str]] | None = None,
    controls: Mapping[str, Iterable[str]] | None = None,
    spans: Iterable[str] = (),
    ceilings: Iterable[str] = ("copy", "gemm", "floor"),
    ceiling_sizes: bool = True,
    cold: bool = False,
    placements: int = 1,
    placement_factors: Callable[[Key], list[float]] | None = None,
    sanitizer: bool = False,
    profile: bool = False,
    process: Callable[[Key], Any] | None = None,
    disturb: Callable[[Key], Disturbance | None] | None = None,
    uuid: str = UUID,
    cards: Mapping[tuple[str, str], int] | None = None,
    card_uuids: tuple[str, ...] = (UUID, OTHER_UUID),
    legacy: bool = False,
    bus_width: int | None = 6016,
) -> Path:
    """Write the synthetic run results/<name>/ under `root`; return its directory.

    `kernels`: {kernel: {"layouts": [...], "shapes": [...]}} (DEFAULT_KERNELS); `scale(key)` or
    {key: factor} (keys (kernel, shape, layout, repeat) or (kernel, shape, layout)) multiplies a
    target's model time; `process(key)` names the process that timed it (default: one per
    kernel/shape/repeat, as the timing stage runs them); `cards` {(kernel, shape): i} times a
    kernel/shape on card i of `card_uuids` (each further card gets gpus/<i>/ with its own
    environment and ceilings); `legacy`: records as a kit before format versions, job clocks,
    cards, sampler and placements wrote them (what the readers' upgrade paths serve).
    """
    kernels = {k: {"layouts": list(v["layouts"]), "shapes": list(v["shapes"])} for k, v in (kernels or DEFAULT_KERNELS).items()}
    if hypotheses is None:
        hypotheses = ([{"kernel": "rmsnorm", "statement": "256 threads are faster on every shape", "faster": "t256",
                        "slower": "t32"}] if {"t32", "t256"} <= set(kernels.get("rmsnorm", {}).get("layouts", [])) else [])
    spans = [k for k in spans if k in kernels]
    given: dict[str, Any] = {
        "run": name, "kernels": kernels,
        "timing": {"warmup_launches": 20, "launches_per_graph": 64, "samples": samples, "repeats": repeats,
                   "order_seed": 2026, "placements": placements, "cache": "both" if cold else "warm"},
        "hypotheses": hypotheses, "sanitize": sanitizer, "profile": profile,
        "ceilings": {"l2": "l2" in ceilings},
    }
    if spans:
        given["span"] = {"warmup_calls": 10, "rounds": 3, "samples_per_round": 10, "repeats": 1, "kernels": spans}
    if cards:
        given["gpus"] = list(range(1 + max(cards.values())))
    config = kit_config.validate(given)
    run = root / "results" / name
    at = lambda template, **parts: root / paths.path(template, run=name, **parts)  # noqa: E731

    def write(path: Path, record: dict[str, Any]) -> None:
        if legacy:
            write_json_atomic(path, record)
        else:
            write_record(path, record)

    write_json_atomic(at(paths.CONFIG), config)
    timing = config["timing"]
    method = GraphReplayMethod.from_timing(timing)
    settings = SamplerSettings.from_config(config["sampler"])
    card_index = lambda kernel, shape: (cards or {}).get((kernel, shape), 0)  # noqa: E731
    used_cards = sorted({0, *((cards or {}).values())})
    for index in used_cards:
        environment = environment_record(config, card_uuids[index] if cards else uuid, index, bus_width=bus_width)
        if legacy:
            for key in ("gpu_uuid", "gpu_index", "job", "busy_before_pct", "idle_wait", "baseline_packages"):
                environment.pop(key)
        write(at(paths.ENVIRONMENT) if index == 0 else at(paths.CARD_ENVIRONMENT, gpu=index), environment)
        for kind in ceilings:
            record = ceiling_record(kind, method.describe(), card_uuids[index] if cards else uuid, index,
                                    sizes=ceiling_sizes, factor=1.0 - 0.01 * index)
            record["job"] = _job(T0 + 2.0, 1.0, {"pid": 400 + 10 * index + list(ceilings).index(kind),
                                                    "started_unix_s": T0 + 2.0})
            if legacy:
                record = {key: record[key] for key in ("kind", "what", "samples_us", "bytes", "flops", "method")
                          if key in record}
            write(at(paths.CEILING, ceiling=kind) if index == 0 else at(paths.CARD_CEILING, gpu=index, ceiling=kind), record)

    # Correctness, one record per layout, and the negative controls (kernelkit.checks, kernelkit.controls).
    clock = [T0 + 3.0]
    for kernel, entry in kernels.items():
        spec = load_spec(kernel)
        layouts = tuple(entry["layouts"])
        for layout in layouts:
            cases = [dict(c) for c in checked_cases(kernel, layout)]
            if legacy:
                cases = [{k: v for k, v in c.items() if k not in ("deterministic", "launches", "differing_elements",
                                                                  "nondeterministic_reason")} for c in cases]
            record = {**suite_record(spec, []), "cases": cases, "case_count": len(cases),
                      "failed_count": sum(not c["passed"] for c in cases),
                      "max_abs_error": max(c["max_abs_error"] for c in cases), "layouts": [layout], "skipped": {},
                      "passed": all(c["passed"] for c in cases)}
            if not legacy:
                record.update(negative_control=None, determinism_runs=3, gpu_uuid=uuid, gpu_index=0,
                              job=_job(clock[0], 1.0, {"pid": 200 + len(kernel), "started_unix_s": clock[0]}))
            write(at(paths.CORRECTNESS, kernel=kernel, layout=layout), record)
        written = [layout for layout in layouts if not spec.is_baseline(layout)]
        for control in (controls if controls is not None else DEFAULT_CONTROLS).get(kernel, ()):
            mutation = spec.mutation(control)
            cases = [dict(c) for layout in written for c in checked_cases(kernel, layout, control)]
            caught = [c for c in cases if not c["passed"]]
            assert caught, f"the emulation of {kernel} does not show control {control}"
            by_layout: dict[str, str | None] = {layout: None for layout in written}
            for case in reversed(caught):
                by_layout[case["layout"]] = "determinism" if case["symptom"] == "launches differ" else "correctness"
            first = {key: caught[0][key] for key in ("layout", "shape", "pattern", "symptom", "worst_index")}
            record = {**suite_record(spec, [], control), "cases": cases, "case_count": len(cases),
                      "failed_count": len(caught), "max_abs_error": max(c["max_abs_error"] for c in cases),
                      "control": control, "mutation": {"find": mutation.find, "replace": mutation.replace, "why": mutation.why},
                      "layouts": written, "caught": True, "caught_by": {**first, "check": by_layout[first["layout"]]}}
            if not legacy:
                clock[0] += 1.0
                record.update(determinism_runs=3, caught_in_layouts=by_layout, racecheck=None, gpu_uuid=uuid, gpu_index=0,
                              job=_job(clock[0], 1.5, {"pid": 300 + len(control), "started_unix_s": clock[0]}))
            write(at(paths.CONTROL, kernel=kernel, control=control), record)
        if sanitizer:
            clean = {"memcheck": "========= ERROR SUMMARY: 0 errors",
                     "racecheck": "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"}
            write(at(paths.SANITIZER, kernel=kernel), {
                "kernel": kernel, "layouts": written, "source_sha256": spec.source_sha256(),
                "cases": [f"{specs.shape_name(s)} normal" for s in spec.sanitizer_shapes_used()],
                "tools": {tool: {"errors": 0, "exit_code": 0, "status": "ran",
                                 "tail": f"{kernel}: all cases passed\n{summary}"} for tool, summary in clean.items()},
                "gpu_uuid": uuid, "gpu_index": 0})

    # Timing: per kernel/shape/repeat (and cache) one process times every layout in a seeded order.
    factors = scale if callable(scale) else (lambda key, table=dict(scale or {}): table.get(key, table.get(key[:3], 1.0)))
    started = [T0 + 100.0]
    pids: dict[Any, dict[str, Any]] = {}
    # The workflow's order (kernelkit.plan): repeats in turn, each repeat's jobs by a seeded key.
    job_key = lambda kernel, shape, repeat, cache: zlib.crc32(  # noqa: E731
        f"{timing['order_seed']}/{repeat}/{kernel}/{shape}/{cache}".encode())
    jobs = sorted(((kernel, shape, repeat, cache) for repeat in range(1, repeats + 1)
                   for cache in kit_config.caches(config) for kernel, entry in kernels.items() for shape in entry["shapes"]),
                  key=lambda job: (job[2], job_key(*job)))
    for kernel, shape, repeat, cache in jobs:
        spec = load_spec(kernel)
        dims = spec.parse_shape(shape)
        order = _order(timing["order_seed"], kernel, shape, repeat, cache, kernels[kernel]["layouts"])
        for position, layout in enumerate(order):
            key = (kernel, shape, layout, repeat)
            who = process(key) if process else (kernel, shape, repeat, cache)
            named = pids.setdefault(who, {"pid": 1000 + len(pids), "started_unix_s": round(started[0], 3)})
            rng = _rng(seed, kernel, shape, layout, repeat, cache)
            median_us = model_us(kernel, shape, layout) * float(factors(key)) * (1 + noise / 2 * rng.standard_normal())
            if cache == "cold":
                median_us *= 1.3
            per_placement = placement_factors(key) if placement_factors else [1.0] * placements
            values = [float(median_us * per_placement[i // samples] * (1 + noise * v))
                      for i, v in enumerate(rng.standard_normal(samples * placements))]
            sample_placement = [i for i in range(placements) for _ in range(samples)]
            t0 = started[0]
            windows = [(t0 + 0.01 * i, t0 + 0.01 * i + 0.005) for i in range(len(values))]
            odd = disturb(key) if disturb else None
            trace = []
            for point in range(int(0.01 * len(values) / 0.02) + 2):
                hit = odd is not None and point >= odd.from_point
                trace.append({"t": t0 + 0.02 * point, "sm_clock_mhz": odd.sm_clock_mhz if hit else SM_CLOCK_MHZ,
                              "memory_clock_mhz": 3201, "power_w": 250.0, "temperature_c": 40,
                              "reasons": list(odd.reasons) if hit else [], "device_util_pct": 90,
                              "compute_pids": [named["pid"]], "foreign_rule": "by_pid_and_members",
                              "foreign_pids": list(odd.foreign_pids) if hit else [],
                              "processes": [{"pid": pid, "sm_util": 80, "judged": True} for pid in odd.foreign_pids]
                              if hit else []})
            after = ({"looked": True, "busy": True, "device_util_pct": 60, "outsiders": list(odd.right_after)}
                     if odd is not None and odd.right_after else {"looked": False, "reason": "no process but the kit's held a context"})
            tags = sampler.tag_samples(windows, trace, settings, SM_CLOCK_MHZ, foreign.busy_after(after))
            used = {"cache": cache, "clock_wait": {"checks": 0, "enabled": False, "ready": None, "waited_s": 0.0},
                    "context_switch": "other context", "host_late": {"kept": 0, "retaken": 0},
                    "launches_per_sample": 1 if cache == "cold" else launches_per_sample(median_us, method),
                    "name": "cuda_graph_replay", "stopped_by": "fixed_count"}
            if cache == "cold":
                used["flush"] = {"flush_bytes": 2 * L2_BYTES, "l2_bytes": L2_BYTES, "persisting_l2_reset": "done"}
            ended = t0 + 0.01 * len(values) + 0.01
            before_snap = _snapshot(t0, trace[0]["sm_clock_mhz"], trace[0]["reasons"])
            after_snap = _snapshot(ended, trace[-1]["sm_clock_mhz"], trace[-1]["reasons"])
            card = card_index(kernel, shape)
            if spec.is_baseline(layout):
                implementation = {"library": {"package": spec.baselines[layout].package, "version": "1.0",
                                              "call": spec.baselines[layout].call},
                                  "kernel_attributes": {}, "source_sha256": spec.source_sha256(), "compile_options": []}
            else:
                geometry = spec.launch(spec.layout(layout), dims)
                implementation = {
                    "launch": {"grid": list(geometry.grid), "block": list(geometry.block),
                               "shared_mem_bytes": geometry.shared_mem},
                    "kernel_attributes": {"num_regs": 16 + 2 * len(layout), "shared_size_bytes": 0, "local_size_bytes": 0,
                                          "max_threads_per_block": 1024, "const_size_bytes": 0},
                    "source_sha256": spec.source_sha256(), "compile_options": list(spec.compile_options_of(layout)),
                    "binary_sha256": "b" * 64}
            record = {
                "kernel": kernel, "shape": shape, "dims": dict(zip(spec.dims, dims)), "layout": layout,
                "layout_parameters": dict(spec.layout(layout)), "repeat": repeat,
                "order": {"seed": timing["order_seed"], "key": 16 * job_key(kernel, shape, repeat, cache) + position,
                          "layouts": order, "position": position},
                "method": {**method.describe(), **({"placements": placements} if placements > 1 else {})},
                "gpu_uuid": card_uuids[card] if cards else uuid, "gpu_index": card,
                "method_used": used, "unit": "microseconds per launch", "samples_us": values,
                "placements": [{"index": i, "pad_bytes": sum(range(i + 1)) << 20,
                                "addresses": {"x": 2**40 + (i << 24), "out": 2**41 + (i << 24)}, "method_used": used,
                                "samples": samples} for i in range(placements)],
                "sample_placement": sample_placement, "sampler": settings.describe(), "sample_tags": tags,
                "disturbed_samples": sampler.disturbed(tags), "clock_trace": trace,
                "verified": {"elements": int(np.prod(spec.output_shape(dims))), "max_abs_error": 4.5e-7, "mismatched": 0,
                             "nonfinite": 0, "passed": True, "reference": "float64 on GPU",
                             "tolerance": {"abs": spec.tolerance.abs, "rel": spec.tolerance.rel, "scale": "|reference|"}},
                **implementation,
                "input_pattern": spec.timing_pattern, "bytes_moved": spec.bytes_moved(dims), "flops": spec.flops(dims),
                "device_name": "NVIDIA H200", "started_utc": before_snap["time_utc"], "ended_utc": after_snap["time_utc"],
                "nvml_before": before_snap, "nvml_after": after_snap,
                "foreign_work": foreign.foreign_work(trace, tags, 0, after), "idle_wait": None,
                "job": _job(named["started_unix_s"], ended - named["started_unix_s"], dict(named)),
            }
            if legacy:
                for key in ("method_used", "placements", "sample_placement", "sampler", "sample_tags", "disturbed_samples",
                            "clock_trace", "verified", "foreign_work", "idle_wait", "job", "gpu_uuid", "gpu_index"):
                    record.pop(key)
                record["order"] = {"seed": timing["order_seed"], "key": record["order"]["key"]}
                record["method"] = {k: v for k, v in record["method"].items()
                                    if k in ("warmup_launches", "launches_per_graph", "samples")}
            write(at(paths.TIMING, view=paths.timing_view(cache), kernel=kernel, shape=shape, layout=layout, n=repeat),
                  record)
            started[0] = ended + 0.05

    for kernel in spans:
        spec = load_spec(kernel)
        for shape in kernels[kernel]["shapes"]:
            dims = spec.parse_shape(shape)
            rng = _rng(seed, "span", kernel, shape)
            layouts_entry = {}
            for layout in kernels[kernel]["layouts"]:
                centre = model_us(kernel, shape, layout) * float(factors((kernel, shape, layout, 1))) + 4.0
                layouts_entry[layout] = {
                    "samples": [{"round": r, "us": float(centre * (1 + 0.01 * rng.standard_normal() + 0.02 * r)),
                                 "disturbed": False, "t0": T0 + 500 + r, "t1": T0 + 500 + r + 0.001}
                                for r in range(config["span"]["rounds"]) for _ in range(config["span"]["samples_per_round"])],
                    "layout_parameters": dict(spec.layout(layout)), "source_sha256": spec.source_sha256(),
                    "compile_options": [], "kernel_attributes": {}}
            write(at(paths.SPAN, kernel=kernel, shape=shape, n=1), {
                "kernel": kernel, "shape": shape, "dims": dict(zip(spec.dims, dims)), "repeat": 1, "layouts": layouts_entry,
                "skipped": {}, "method": {"name": "event_span_rotating_rounds", "warmup_calls": 10, "rounds": 3,
                                          "samples_per_round": config["span"]["samples_per_round"],
                                          "context_switch": "other context"},
                "sampler": settings.describe(), "unit": "microseconds per call", "input_pattern": spec.timing_pattern,
                "bytes_moved": spec.bytes_moved(dims), "flops": spec.flops(dims), "device_name": "NVIDIA H200",
                "started_utc": _snapshot(T0 + 500)["time_utc"], "ended_utc": _snapshot(T0 + 504)["time_utc"],
                "nvml_before": _snapshot(T0 + 500), "nvml_after": _snapshot(T0 + 504), "clock_trace": [],
                "gpu_uuid": uuid, "gpu_index": 0,
                "job": _job(T0 + 499, 6.0, {"pid": 5000 + len(shape), "started_unix_s": T0 + 499})})

    if profile:
        for kernel, entry in kernels.items():
            for shape in entry["shapes"]:
                for layout in entry["layouts"]:
                    write(at(paths.PROFILE, kernel=kernel, shape=shape, layout=layout), {
                        "kernel": kernel, "shape": shape, "layout": layout, "exit_code": 0,
                        "ncu_arguments": ["--clock-control", "none", "--csv"],
                        "program": ["-m", "kernelkit", "profile-call", "--kernel", kernel],
                        "launches": [{"kernel": kernel, "block": "(256, 1, 1)", "grid": "(512, 1, 1)",
                                      "duration_ns": float(model_us(kernel, shape, layout) * 1e3),
                                      "dram_throughput_pct_of_peak": 72.5, "l2_throughput_pct_of_peak": 40.0,
                                      "l1_throughput_pct_of_peak": 30.0, "sm_throughput_pct_of_peak": 20.0,
                                      "fma_pipe_pct_of_peak": 5.0, "achieved_occupancy_pct": 80.0,
                                      "instructions_executed": 1.0e6, "shared_bank_conflicts": 0.0}],
                        "gpu_uuid": uuid, "gpu_index": 0})
    return run


def timing_files(run: Path) -> list[Path]:
    """The warm timing records of a run, through the kit's layout."""
    return paths.run_result_files(run, "timing")


def pooled_median(run: Path, kernel: str, shape: str, layout: str) -> float:
    """The median of every sample of every repeat of one configuration, read from its records."""
    return float(np.median([s for p in sorted(run.glob(f"timing/{kernel}/{shape}/{layout}/rep*.json"))
                            for s in json.loads(p.read_text())["samples_us"]]))


def copy_run(source: Path, root: Path, name: str | None = None) -> Path:
    """A copy of a synthetic run as results/<name>/ under `root`, to change without touching the original."""
    import shutil

    target = root / "results" / (name or source.name)
    shutil.copytree(source, target)
    return target


SEED_KERNELS = {
    "matmul": {"layouts": ["tile16", "reg4x4", "cupy", "torch", "triton"], "shapes": ["1024x1024x1024", "4096x4096x4096"]},
    "layernorm": {"layouts": ["block", "warp", "triton"], "shapes": ["4096x1024", "16384x4097"]},
    "neighbor": {"layouts": ["gather", "cupy"], "shapes": ["65536x128"]},
}
SEED_HYPOTHESES = [{"kernel": "matmul", "statement": "the register-tiled rewrite is faster than the 16x16 shared-memory tiles",
                    "faster": "reg4x4", "slower": "tile16"}]
