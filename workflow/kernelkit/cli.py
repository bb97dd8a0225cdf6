"""`kernelkit <stage>`: one process per workflow job, each writing one result file.

Each stage module adds its own subcommands (`register`) and owns what they do; this module
only builds the parser from them and turns a KitError into one sentence and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Sequence

from kernelkit import KitError
from kernelkit import ceilings, checks, config, environment, interim_commands, scaffold, span, timing, tools

# In the order a run goes through them; `kernelkit --help` lists them so.
STAGES: tuple[Callable[[Any], None], ...] = (
    config.register,
    environment.register,
    ceilings.register,
    checks.register,
    timing.register,
    span.register,
    tools.register,
    interim_commands.register_report,  # becomes report.register
    interim_commands.register_diff,  # becomes diff.register
    scaffold.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelkit", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="command")
    for register in STAGES:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KitError as error:
        print(f"kernelkit {args.command}: {error}", file=sys.stderr)
        return 2
