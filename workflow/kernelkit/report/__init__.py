"""The report of one run, built from `results/<run>/` alone, as Markdown and as HTML.

Only `register` is imported eagerly, so that building the kit's parser does not load pandas.
"""

from __future__ import annotations

from typing import Any

from kernelkit.report.commands import register

__all__ = ["register"]


def __getattr__(name: str) -> Any:
    """Everything else (Run, build, render_markdown, the section data functions) from `assemble`, on first use."""
    import importlib

    assemble = importlib.import_module("kernelkit.report.assemble")
    if name in assemble.__all__:
        return getattr(assemble, name)
    raise AttributeError(f"module 'kernelkit.report' has no attribute '{name}'")
