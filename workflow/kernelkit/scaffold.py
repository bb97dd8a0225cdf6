"""`kernelkit new NAME`: a working starting folder for a new operation: a memory-bound kernel
(y = scale * x), its spec, two negative controls and its float32 emulation, passing the same CPU
tests as every kernel folder. Naming it in the config is the only other step."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from kernelkit import KitError, spec as specs
from kernelkit.records import printable, write_text_atomic

TEMPLATES = Path(__file__).resolve().parent / "templates" / "new_kernel"
PLACEHOLDER = "NEWKERNEL"
# A CUDA and Python identifier, and a folder name the config accepts.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def write_folder(name: str, kernels: Path) -> Path:
    """Write kernels/<name>/ from the templates; refuse a bad name or an existing folder."""
    if not NAME_PATTERN.match(name):
        raise KitError(f"kernel name '{printable(name[:80])}' must be 1 to 64 lower-case letters, digits and '_', "
                       "starting with a letter")
    if kernels.exists() and not kernels.is_dir():
        raise KitError(f"--kernels {printable(str(kernels))} is a file, not a folder of kernels")
    if name == "clocks":
        raise KitError("kernel name 'clocks' is reserved: reports/<run>/figures/clocks.svg is the clock figure")
    folder = kernels / name
    if folder.exists():
        raise KitError(f"{folder} already exists; choose another name")
    try:
        for template, target in (("kernel.cu", f"{name}.cu"), ("spec.py", "spec.py"), ("emulation.py", "emulation.py")):
            write_text_atomic(folder / target, (TEMPLATES / template).read_text(encoding="utf-8").replace(PLACEHOLDER, name))
    except OSError as error:
        raise KitError(f"cannot write {printable(str(folder))} ({error.strerror or error})") from None
    specs.load(name, kernels)  # what was written must load
    return folder


def cmd_new(args: argparse.Namespace) -> int:
    kernels = Path(args.kernels) if args.kernels else specs.kernels_dir()
    folder = write_folder(args.name, kernels)
    print(f"wrote {folder}/ ({args.name}.cu, spec.py, emulation.py). Check it on the CPU with `python -m pytest "
          f"tests/test_operations.py`, then name it in config/config.yaml:\n"
          f"  kernels:\n    {args.name}:\n      layouts: [t256]\n      shapes: [\"16777216\"]")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("new", help="write a working starting folder for a new kernel under kernels/")
    p.add_argument("name", help="the new kernel's name: its folder, CUDA function and config key")
    p.add_argument("--kernels", help="the kernels folder to write into (default: $KERNELKIT_KERNELS, else kernels/)")
    p.set_defaults(func=cmd_new)
