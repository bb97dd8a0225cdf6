"""Correctness and negative controls: what was checked before anything was timed."""

from __future__ import annotations

from typing import Any

from kernelkit import determinism, verify
from kernelkit import document as doc
from kernelkit.report.run import Run


def correctness_rows(run: Run) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for record in run.correctness:
        for layout in dict.fromkeys(case["layout"] for case in record["cases"]):
            layout_cases = [case for case in record["cases"] if case["layout"] == layout]
            largest = max(layout_cases, key=lambda c: c["max_abs_error"])
            rows.append((record["kernel"], layout, f"{sum(c['passed'] for c in layout_cases)}/{len(layout_cases)}",
                         f"{largest['max_abs_error']:.4e}",
                         f"{largest['shape']} {largest['pattern']} at {largest['worst_index']}"))
    return rows


def section_correctness(run: Run) -> doc.Section:
    cases = [case for record in run.correctness for case in record["cases"]]
    blocks: list[doc.Block] = []
    passed = sum(c["passed"] for c in cases)
    if cases:
        worst = max(cases, key=lambda c: c["max_abs_error"])
        blocks.append(doc.Paragraph(
            "Float64 NumPy reference from the exact FP32 inputs on the device; a case passes when every output element "
            "is finite and |err| <= abs + rel * scale, where scale is |ref|, or for reductions the sum of the absolute "
            "terms (the magnitude FP32 rounding grows with), every element was overwritten (no sentinel left) and the "
            "guard regions before and after the output are unchanged. A library baseline allocates its own output: "
            "its result is copied into the guarded buffer before the check, so guards do not apply to it, but a "
            f"result of the wrong shape or type leaves the sentinel. {len(cases)} cases in all, "
            f"{passed} passed; largest absolute error {worst['max_abs_error']:.4e} "
            f"({worst['kernel']} {worst['layout']} {worst['shape']} {worst['pattern']})."))
        tolerances = sorted({(r["kernel"], r["tolerance"]["abs"], r["tolerance"]["rel"]) for r in run.correctness})
        blocks.append(doc.Paragraph("Tolerances (abs, rel): " + "; ".join(
            f"{kernel} {abs_:g}, {rel:g}" for kernel, abs_, rel in tolerances) + "."))
    blocks.append(doc.Table(("Kernel", "Layout", "Passed", "Largest abs error", "Where"), correctness_rows(run)))
    blocks += [doc.Paragraph(text) for text in (determinism_sentence(cases), verified_sentence(run.timings + run.cold))
               if text]
    skipped = [f"{r['kernel']} {layout}: {reason}" for r in run.correctness for layout, reason in r.get("skipped", {}).items()]
    if skipped:
        blocks.append(doc.Paragraph("Skipped, neither checked nor timed: " + "; ".join(skipped) + "."))
    layouts = len({(r["kernel"], c["layout"]) for r in run.correctness for c in r["cases"]})
    return doc.Section("Correctness", blocks,
                       summary=f"Correctness: {passed} of {len(cases)} cases passed over {layouts} layouts")


def determinism_sentence(cases: list[dict[str, Any]]) -> str | None:
    """What the repeated launches of the correctness cases showed; None for runs made before them."""
    if (found := determinism.summarize(cases)) is None:
        return None
    text = (f"Determinism: each of {found['cases']} cases was launched {', '.join(map(str, found['launches']))} times on a "
            f"freshly filled output; {len(found['differing'])} did not repeat their bits"
            + (f" ({'; '.join(found['differing'])})" if found["differing"] else "") + ".")
    return text + (f" Declared nondeterministic: {'; '.join(found['exempt'])}." if found["exempt"] else "")


def verified_sentence(records: list[dict[str, Any]]) -> str | None:
    """What the timing records say about their timed-shape verification; None for runs before it."""
    if (found := verify.summarize(records)) is None:
        return None
    worst = found["worst"]
    return (f"Timed shapes: {found['verified']} of {found['records']} timing records verified their own output once at "
            f"the timed shape against a float64 reference ({', '.join(found['references']) or 'none'})"
            + (f", largest |error| {worst['max_abs_error']:.4e} ({worst['kernel']} {worst['shape']} {worst['layout']})"
               if worst else "") + "."
            + (f" Not verified: {'; '.join(found['not_verified'])}." if found["not_verified"] else "")
            + (f" {found['without']} records predate the verification." if found["without"] else ""))


def symptom_kind(symptom: str) -> str:
    """'NaN in 8 and Inf in 0 output elements' -> 'NaN': the class of failure, without counts."""
    return next((name for kind, name in (("guard", "guard overwritten"), ("sentinel", "sentinel left"), ("NaN", "NaN"),
                                         ("error above tolerance", "error above tolerance")) if kind in symptom), symptom)


def control_rows(run: Run) -> list[tuple[str, ...]]:
    rows = []
    for control in run.controls:
        caught = [case for case in control["cases"] if not case["passed"]]
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for case in caught:
            by_kind.setdefault(symptom_kind(case["symptom"]), []).append(case)
        how = "; ".join(f"{kind} ({len(cs)} cases; patterns {', '.join(sorted({c['pattern'] for c in cs}))})"
                        for kind, cs in sorted(by_kind.items()))
        first = control["caught_by"]
        where = " ".join(str(first[key]) for key in ("layout", "shape", "pattern") if key in first)
        rows.append((control["kernel"], control["control"], control["mutation"]["why"],
                     f"{len(caught)}/{len(control['cases'])}", how or "none",
                     f"{where + ': ' if where else ''}{first['symptom']}{caught_by(control)}"))
    return rows


def joint_racecheck(control: dict[str, Any]) -> dict[str, Any] | None:
    """A control's racecheck run over several layouts at once, or None (older: one per layout)."""
    racecheck = control.get("racecheck")
    return racecheck if isinstance(racecheck, dict) and "layouts" in racecheck else None


def caught_by(control: dict[str, Any]) -> str:
    """The checks that caught a control, per layout ("" where older records do not name them)."""
    if not (checks := control.get("caught_in_layouts")):
        return ""
    joint = joint_racecheck(control)
    if joint is None:
        return " (caught by " + ", ".join(f"{layout}: {check or 'nothing'}" for layout, check in checks.items()) + ")"
    parts = [f"{layout}: {check}" for layout, check in checks.items() if check]
    if joint.get("hazards") and control["caught_by"].get("check") != "racecheck":
        parts.append(f"racecheck: {joint['hazards']} hazards over {', '.join(joint['layouts'])} in one run")
    return " (caught by " + "; ".join(parts) + ")" if parts else ""


def was_caught(control: dict[str, Any]) -> bool:
    """A failing case, or (records naming the check per layout) a layout caught by any check:
    racecheck catches a race whose every case passed."""
    return (any(not case["passed"] for case in control["cases"])
            or any(control.get("caught_in_layouts", {}).values())
            or bool((joint_racecheck(control) or {}).get("hazards")))


def section_controls(run: Run) -> doc.Section:
    caught = sum(1 for c in run.controls if was_caught(c))
    return doc.Section("Negative controls", [
        doc.Paragraph("Mutated builds of the same source; each must be caught before anything is timed: by the "
                      "correctness cases, by their repeated launches disagreeing (determinism) or, for a race the "
                      "cases cannot show, by compute-sanitizer's racecheck."),
        doc.Table(("Kernel", "Control", "Mutation", "Cases failed", "Symptoms", "First failing case"), control_rows(run)),
    ], summary=f"Negative controls: {caught} of {len(run.controls)} mutated builds were caught by the checks")
