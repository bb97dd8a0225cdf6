"""How the run measured (method) and on what (environment), stated from the records that did it."""

from __future__ import annotations

from typing import Any

from kernelkit import document as doc
from kernelkit import units
from kernelkit.report.run import Run, fmt, snapshots, target_name, unavailable_fields


def timing_settings(run: Run) -> dict[str, Any]:
    """The timing settings the records used: one value each when they agree, else every value seen."""
    def seen(get: Any) -> Any:
        values = sorted({get(r) for r in run.timings}, key=str)
        return values[0] if len(values) == 1 else values

    settings = {key: seen(lambda r, key=key, default=default: r["method"].get(key, default)) for key, default in (
        ("warmup_launches", None), ("launches_per_graph", None), ("samples", None), ("max_sample_ms", 20),
        ("untimed_replays", 1))}
    return {**settings, "repeats": len({r["repeat"] for r in run.timings}),
            "order_seed": seen(lambda r: r["order"].get("seed")),
            "patterns": sorted({r["input_pattern"] for r in run.timings})}


def where_targets_ran(run: Run) -> str:
    """Which processes timed what, read from the records' job clocks and orders, never assumed."""
    from kernelkit.diff_inputs import by_process, shared_processes

    processes = by_process(enumerate(run.timings))
    per = [len(records) for records in processes.values()]
    text = (f"{len(run.timings)} timing records came from {len(processes)} processes, each timing {units.extent(per)} "
            f"layout{'s' if max(per) != 1 else ''}")
    if any(isinstance(r.get("order"), dict) and "layouts" in r["order"] for r in run.timings):
        text += " of one kernel/shape/repeat in a seeded shuffled order (each record names the order and its place in it)"
    configurations, shared = shared_processes(processes)
    if shared:
        return text + f"; in {shared} of {configurations} configurations, repeats shared a process"
    return text + f"; every repeat of each of the {configurations} configurations ran in a process of its own"


def context_switch_paragraph(run: Run) -> doc.Paragraph | None:
    """The switch to a second context before each measurement; None for records from before it."""
    outcomes = [r["method_used"]["context_switch"] for r in run.timings if "context_switch" in r.get("method_used", {})]
    if not outcomes:
        return None
    switched = outcomes.count("other context")
    text = (f"Before its warm-up, each of {switched} timed targets had the GPU run a 4 KiB memset in a second CUDA "
            "context of its process (timing.context_switch): a process that has loaded many modules otherwise times "
            "small kernels slower until the GPU has run another context's work, which a --cores 1 run's single "
            "worker never sees.")
    if others := sorted(set(outcomes) - {"other context"}):
        text += (f" {len(outcomes) - switched} timed targets could not switch: {others[0]}"
                 + (f" (and {len(others) - 1} other reason(s))" if len(others) > 1 else "") + ".")
    return doc.Paragraph(text)


def section_method(run: Run) -> doc.Section:
    t = timing_settings(run)
    launches = t["launches_per_graph"]
    text = (
        f"{where_targets_ran(run)}: compile the kernel with NVRTC, allocate and upload its inputs "
        f"(pattern: {', '.join(t['patterns'])}), then {fmt(t['warmup_launches'])} warm-up launches, capture "
        f"{fmt(launches)} launches of the kernel on the same buffers into one CUDA graph, replay the graph "
        f"{fmt(t['untimed_replays'])} time(s) untimed, and time {fmt(t['samples'])} replays, each between two CUDA "
        f"events recorded on the same stream. A sample is one replay's event time divided by {fmt(launches)}: an "
        "average per launch inside a replay, not a single-launch latency. Inside the timed interval: the graph replay "
        "only. Outside it: compilation, allocation, host-to-device copies, warm-up launches, graph capture and upload, "
        "the NVML snapshots. Buffers are reused across launches, so the caches are warm. "
        f"Every configuration was timed {t['repeats']} times (repeats); within a repeat the targets ran "
        f"in a seeded shuffled order (seed {fmt(t['order_seed'])}; each repeat has its own order, recorded as the order "
        "key in every timing file). The kit does not change clocks or power settings. These settings are read from "
        "the timing files that used them."
    )
    blocks: list[doc.Block] = [doc.Paragraph(text)]
    per_graph = launches if isinstance(launches, int) else max(launches)
    if fewer := [r for r in run.timings if r.get("method_used", {}).get("launches_per_sample", per_graph) < per_graph]:
        blocks.append(doc.Paragraph(
            f"Calls so long that {per_graph} of them would exceed {fmt(t['max_sample_ms'])} ms per sample were put "
            f"fewer to a sample (at least one), each file recording the count: {len(fewer)} timed targets, e.g. "
            + "; ".join(f"{target_name(r)} ({r['method_used']['launches_per_sample']})" for r in fewer[:4]) + "."))
    if events := [r for r in run.timings if r.get("method_used", {}).get("name") == "back_to_back_events"]:
        blocks.append(doc.Paragraph(
            f"{len(events)} timed targets could not be captured in a CUDA graph and were timed as the same number of "
            "back-to-back calls between two events on the same stream instead (the host enqueues them while the GPU "
            "runs, so launch overhead is hidden unless a call is shorter than its launch). Why capture failed, "
            f"from the files: {sorted({r['method_used']['capture_error'] for r in events})[0]} "
            f"({', '.join(sorted({r['kernel'] + ' ' + r['layout'] for r in events}))})."))
    blocks += filter(None, [context_switch_paragraph(run)])
    if run.spans:
        span = run.spans[0]["method"]
        blocks.append(doc.Paragraph(
            f"Span view: one process per kernel, shape and repeat ({len({r['repeat'] for r in run.spans})} repeat(s)) "
            f"times every configured layout of that shape: {fmt(span.get('warmup_calls'))} untimed calls of each, then "
            f"{fmt(span.get('rounds'))} rounds; round r starts with the r-th layout, and in its turn a layout gets one "
            f"untimed call, then {fmt(span.get('samples_per_round'))} samples, each a pair of CUDA events around one "
            "call followed by a synchronisation."))
    return doc.Section("Method", blocks, summary=(
        f"Method: {t['samples']} samples of a CUDA graph replay of {launches} launches after {t['warmup_launches']} "
        f"warm-up launches, {t['repeats']} repeat(s), order seed {t['order_seed']}"))


def environment_rows(run: Run) -> list[tuple[str, str]]:
    env = run.environment
    gpu, cuda, host, snap = env["gpu"], env["cuda"], env["host"], env["snapshot"]
    return [
        ("GPU", f"{cuda['device_name']} (compute capability {cuda['compute_capability']}, {cuda['sm_count']} SMs)"),
        ("UUID / PCI bus", f"{fmt(gpu['uuid'])} / {fmt(gpu['pci_bus_id'])}"),
        ("Memory / L2", f"{fmt(cuda['global_memory_bytes'])} bytes / {fmt(cuda['l2_cache_bytes'])} bytes"),
        ("Driver / CUDA driver API", f"{fmt(gpu['driver_version'])} / {fmt(cuda['cuda_driver_version'])}"),
        ("CUDA runtime / NVRTC", f"{fmt(cuda['cuda_runtime_version'])} / {fmt(cuda['nvrtc_version'])}"),
        ("CuPy / NumPy / Python", f"{cuda['cupy_version']} / {host['numpy_version']} / {host['python_version']}"),
        *([("Baseline packages", "; ".join(f"{name} {fmt(version)}" for name, version in env["baseline_packages"].items()))]
          if "baseline_packages" in env else []),
        ("SM clock at capture: now / max / application",
         f"{fmt(snap['sm_clock_mhz'])} / {fmt(gpu['sm_clock_max_mhz'])} / {fmt(gpu['sm_clock_application_mhz'])} MHz"),
        ("Memory clock at capture: now / max / application",
         f"{fmt(snap['memory_clock_mhz'])} / {fmt(gpu['memory_clock_max_mhz'])} / "
         f"{fmt(gpu['memory_clock_application_mhz'])} MHz"),
        ("Clocks locked", fmt(env["clocks_locked"])),
        ("Power draw / limit at capture", f"{fmt(snap['power_draw_w'])} / {fmt(gpu['power_limit_w'])} W"),
        ("Temperature / performance state at capture", f"{fmt(snap['temperature_c'])} C / {fmt(snap['performance_state'])}"),
        ("Clock-event reasons at capture", fmt(snap["clock_event_reasons"])),
        ("Persistence / ECC / MIG", f"{fmt(gpu['persistence_mode'])} / {fmt(gpu['ecc_mode_current'])} / "
         f"{fmt(gpu['mig_mode_current'])}"),
        ("Host", f"{host['os']}; {host['cpu']} ({host['cpu_count']} CPUs)"),
        ("Kit commit", f"{host['kit_commit']}" + (" (tree had uncommitted changes)" if host["kit_tree_dirty"] is True else "")),
        ("Config sha256", env["config_sha256"]),
        ("Captured (UTC)", env["captured_utc"]),
    ]


def clock_rows(run: Run) -> list[tuple[str, str, str]]:
    rows = []
    for key, label in (("sm_clock_mhz", "SM clock (MHz)"), ("memory_clock_mhz", "Memory clock (MHz)"),
                       ("temperature_c", "Temperature (C)"), ("power_draw_w", "Power draw (W)")):
        seen = [s[key] for _, _, s in snapshots(run) if isinstance(s.get(key), (int, float))]
        rows.append((label, *((f"{extreme(seen):g}" for extreme in (min, max)) if seen else ["not recorded"] * 2)))
    return rows


def section_environment(run: Run) -> doc.Section:
    env = run.environment
    reasons = sorted({r for _, _, s in snapshots(run) if isinstance(s.get("clock_event_reasons"), list)
                      for r in s["clock_event_reasons"]})
    blocks: list[doc.Block] = [
        doc.Table(("Field", "Value"), environment_rows(run)),
        doc.Paragraph(f"NVML snapshots right before and after each of the {len(run.timings)} timed targets "
                      "(they do not show what happened between them):"),
        doc.Table(("Quantity", "Min seen", "Max seen"), clock_rows(run)),
        doc.Paragraph(f"Clock-event reasons seen in those snapshots: {', '.join(reasons) or 'none'}."),
    ]
    if not env["nvml_available"]:
        blocks.append(doc.Paragraph(f"NVML was not usable ({env['nvml_error']}): clocks, power, temperature and "
                                    "clock-event reasons are not recorded for this run."))
    elif missing := unavailable_fields({k: env[k] for k in ("gpu", "cuda", "host", "snapshot")}):
        blocks.append(doc.Paragraph("Fields that could not be read: "
                                    + "; ".join(f"{key} ({why})" for key, why in missing) + "."))
    summary = (f"{run.device}, driver {fmt(env['gpu']['driver_version'])}, clocks "
               f"{'locked' if env['clocks_locked'] is True else 'not locked'}, kit {str(env['host']['kit_commit'])[:7]}")
    return doc.Section("Environment", blocks, summary=summary)
