"""The target plan of a run: which records it makes, which job makes each, and in what order; plain
Python, so tests need no Snakemake. One timing job per kernel/shape/repeat/cache times every layout:
a process pays 4-6 s before its first launch, and every repeat still has its own, which the diff needs."""

from __future__ import annotations

import os
import random
import re
import subprocess
import zlib
from dataclasses import dataclass
from typing import Any, Collection, Mapping

from kernelkit import KitError, config as kit_config, layout as paths, sweeps

# Snakemake priorities: the environment first (no GPU fails there), the ceilings on a GPU as cold as the
# run's start, every check, then timings repeat by repeat in a seeded order, each repeat's spans last.
ENVIRONMENT_PRIORITY = 2**40
CEILING_PRIORITY = 2**39
CHECK_PRIORITY = 2**38
REPEAT_STEP = 2**32


def order_key(seed: int, repeat: int, kernel: str, shape: str, cache: str = "warm") -> int:
    """A seeded key of one timing job; within a repeat, jobs run in ascending key. A key per job keeps
    each job's place when others are added, and drift lands on different kernels in each repeat."""
    return zlib.crc32(f"{seed}/{repeat}/{kernel}/{shape}/{cache}".encode())


def layout_order(seed: int, kernel: str, shape: str, repeat: int, cache: str, layouts: list[str]) -> list[str]:
    """The order in which one timing job times its layouts: seeded, different in every repeat."""
    order = list(layouts)
    random.Random(f"{seed}/{repeat}/{kernel}/{shape}/{cache}").shuffle(order)
    return order


@dataclass(frozen=True)
class TimingJob:
    kernel: str
    shape: str
    repeat: int
    cache: str
    order_key: int

    def priority(self, repeats: int) -> int:
        """Every job of repeat r before any of repeat r+1, then by order key."""
        return (repeats - self.repeat + 1) * REPEAT_STEP + (REPEAT_STEP // 2 - 1 - (self.order_key >> 1))


class Plan:
    """Every record of one run, from its validated config and the kernels' specs (name -> KernelSpec)."""

    def __init__(self, config: Mapping[str, Any], specs: Mapping[str, Any]) -> None:
        self.config = config
        self.run = config["run"]
        self.kernels = list(config["kernels"])
        self.specs = specs
        self.repeats = config["timing"]["repeats"]
        self.seed = config["timing"]["order_seed"]
        self.caches = kit_config.caches(dict(config))
        self.layouts = {k: kit_config.kernel_layouts(config, k) for k in self.kernels}
        # Span targets: span.kernels (else every kernel), span.repeats each (else timing.repeats); none without span.
        self.span_kernels = list(config["span"].get("kernels", self.kernels)) if "span" in config else []
        self.span_repeats = config["span"].get("repeats", self.repeats) if "span" in config else 0
        # Every timing job in the order the workflow runs them: repeat by repeat, each by order key.
        self._jobs = [job for repeat in range(1, self.repeats + 1)
                      for job in sorted((TimingJob(k, s, repeat, c, order_key(self.seed, repeat, k, s, c))
                                         for k in self.kernels for s in self.shapes(k) for c in self.caches),
                                        key=lambda job: job.order_key)]

    def shapes(self, kernel: str) -> list[str]:
        return list(self.config["kernels"][kernel]["shapes"])

    def hand_written(self, kernel: str) -> list[str]:
        """The configured layouts with a CUDA source: what the sanitizer checks."""
        return [name for name in self.layouts[kernel] if not self.specs[kernel].is_baseline(name)]

    def control_layouts(self, kernel: str) -> list[str]:
        return sweeps.control_layouts(self.specs[kernel], self.config["kernels"][kernel])

    def path(self, template: str, **parts: Any) -> str:
        return paths.path(template, run=self.run, **parts)

    def correctness_files(self, kernel: str) -> list[str]:
        return [self.path(paths.CORRECTNESS, kernel=kernel, layout=name) for name in self.layouts[kernel]]

    def control_files(self, kernel: str) -> list[str]:
        return [self.path(paths.CONTROL, kernel=kernel, control=name) for name in self.specs[kernel].mutations]

    def sanitizer_files(self, kernel: str) -> list[str]:
        """The kernel's one sanitizer record, when `sanitize` is on and it has a hand-written layout."""
        sanitized = self.config.get("sanitize", True) and self.hand_written(kernel)
        return [self.path(paths.SANITIZER, kernel=kernel)] if sanitized else []

    def timing_job_files(self, job: TimingJob) -> list[str]:
        return [self.path(paths.TIMING, view=paths.timing_view(job.cache), kernel=job.kernel, shape=job.shape,
                          layout=name, n=job.repeat) for name in self.layouts[job.kernel]]

    def timing_jobs(self) -> list[TimingJob]:
        return list(self._jobs)

    def timing_files(self, kernel: str | None = None, cache: str = "warm") -> list[str]:
        return [name for job in self.timing_jobs() if kernel in (None, job.kernel) and job.cache == cache
                for name in self.timing_job_files(job)]

    def span_priority(self, repeat: int) -> int:
        """After every timing job of the same repeat, before any of the next."""
        return (self.repeats - repeat) * REPEAT_STEP + REPEAT_STEP // 2

    def span_files(self) -> list[str]:
        return [self.path(paths.SPAN, kernel=name, shape=shape, n=repeat) for name in self.span_kernels
                for shape in self.shapes(name) for repeat in range(1, self.span_repeats + 1)]

    def ceiling_kinds(self) -> list[str]:
        return [kind for kind in paths.CEILING_KINDS if kind != "l2" or self.config["ceilings"]["l2"]]

    def ceiling_files(self) -> list[str]:
        return [self.path(paths.CEILING, ceiling=kind) for kind in self.ceiling_kinds()]

    def card_record_files(self, gpus: list[int] | None) -> list[str]:
        """Environment and ceilings of every card after the first (the first's are the run's own)."""
        return [self.path(template, gpu=gpu, ceiling=kind) for gpu in (gpus or [])[1:]
                for template, kind in [(paths.CARD_ENVIRONMENT, None)]
                + [(paths.CARD_CEILING, kind) for kind in self.ceiling_kinds()]]

    def profile_files(self) -> list[str]:
        return [self.path(paths.PROFILE, kernel=k, shape=s, layout=name) for k in self.kernels
                for s in self.shapes(k) for name in self.layouts[k] if self.config.get("profile")]

    def all_targets(self, gpus: list[int] | None = None) -> list[str]:
        targets = [self.path(paths.ENVIRONMENT), *self.ceiling_files(), *self.card_record_files(gpus)]
        for kernel in self.kernels:
            targets += self.correctness_files(kernel) + self.control_files(kernel) + self.sanitizer_files(kernel)
        reports = [self.path(template) for template in (paths.SUMMARY, paths.REPORT_MARKDOWN, paths.REPORT_HTML)]
        return (targets + self.timing_files() + self.timing_files(cache="cold") + self.span_files()
                + self.profile_files() + reports)

    def target_problem(self, target: str, gpus: list[int] | None = None) -> str | None:
        """One sentence on what is wrong with a target path a command names, or None for one this
        plan builds (or that is not a run's record, which Snakemake judges itself)."""
        clean = os.path.normpath(os.path.relpath(target) if os.path.isabs(target) else target)
        if clean == ".." or clean.startswith("../"):
            return f"target '{target}' is outside this checkout; name it from the repository root, as results/{self.run}/..."
        parts = clean.split("/")
        if parts[0] not in ("results", "reports") or len(parts) < 3 or parts[1] == "diff":
            return None
        if parts[1] != self.run:
            return (f"target '{target}' belongs to run '{parts[1]}', not to this run '{self.run}'; "
                    f"add --config run={parts[1]} to build it")
        for template in (paths.TIMING, paths.SPAN, paths.CORRECTNESS, paths.CONTROL, paths.SANITIZER, paths.PROFILE,
                         paths.CARD_ENVIRONMENT, paths.CARD_CEILING, paths.CEILING, paths.FIGURE):
            body = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
            match = re.fullmatch(body, clean)
            if match is None:
                continue
            part = match.groupdict()
            if part.get("view", "timing") not in ("timing", "cold") or clean == self.path(paths.CLOCK_FIGURE):
                return None
            try:
                return self.check_parts(part, template, gpus)
            except KitError as error:
                return f"target '{target}': {error}"
        return None

    def check_parts(self, part: Mapping[str, str], template: str, gpus: list[int] | None) -> None:
        """Raise KitError naming the first part of a target (its path's wildcards) that the config
        does not allow: the one judge of targets, for named paths and Snakemake's wildcards alike."""
        def allowed(what: str, value: str, choices: Collection[str], where: str) -> None:
            if value not in choices:
                raise KitError(f"{what} '{value}' is not {where}; allowed: {', '.join(choices) or '(none)'}")

        if "n" in part and not re.fullmatch(r"[1-9][0-9]*", part["n"]):
            raise KitError(f"names repeat 'rep{part['n']}'; repeats count from rep1 "
                           "(config keys 'timing.repeats', 'span.repeats')")
        if "gpu" in part:
            further = [str(gpu) for gpu in (gpus or [])[1:]]
            allowed("card", part["gpu"], further, "a further card of this run (config key 'gpus')")
        if "ceiling" in part:
            allowed("ceiling", part["ceiling"], self.ceiling_kinds(), "configured")
        if "kernel" not in part:
            return
        kernel = part["kernel"].removesuffix(".svg") if template == paths.FIGURE else part["kernel"]
        allowed("kernel", kernel, self.kernels, "configured")
        if "shape" in part:
            self.specs[kernel].parse_shape(part["shape"])
            allowed("shape", part["shape"], self.shapes(kernel), f"configured for kernel '{kernel}'")
        if "layout" in part:
            allowed("layout", part["layout"], self.layouts[kernel], f"configured for kernel '{kernel}'")
        if "control" in part:
            allowed("negative control", part["control"], self.specs[kernel].mutations, f"defined for kernel '{kernel}'")
        if template == paths.SANITIZER and not self.sanitizer_files(kernel):
            raise KitError(f"kernel '{kernel}' has no sanitizer record (no hand-written layout configured, or "
                           "config key 'sanitize' is off)")
        if template == paths.TIMING:
            repeat = int(part["n"])
            if repeat > self.repeats:
                raise KitError(f"repeat {repeat} is beyond config key 'timing.repeats' ({self.repeats})")
            cache = "cold" if part["view"] == "cold" else "warm"
            if cache not in self.caches:
                raise KitError(f"{cache}-cache targets are not configured; config key 'timing.cache' allows: "
                               f"{', '.join(self.caches)}")
        if template == paths.SPAN:
            if kernel not in self.span_kernels:
                raise KitError(f"kernel '{kernel}' has no span targets; config key 'span.kernels' allows: "
                               f"{', '.join(self.span_kernels) or '(none: the config has no span key)'}")
            if int(part["n"]) > self.span_repeats:
                raise KitError(f"span repeat {part['n']} is beyond config key 'span.repeats' ({self.span_repeats})")


def committed(run_dir: str, repo: str) -> bool:
    """Whether a run folder is committed evidence: git tracks files in it; in a copy without git,
    it holds summary.csv, which a run writes when it completes (the marker that survives a copy)."""
    try:
        listed = subprocess.run(["git", "ls-files", "--", run_dir], cwd=repo, capture_output=True, text=True, timeout=30)
        if listed.returncode == 0:
            return bool(listed.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return os.path.exists(os.path.join(run_dir, "summary.csv"))
