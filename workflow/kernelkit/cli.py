"""`kernelkit <stage>`: one process per workflow job, each writing one result file.

Failures are one sentence: a KitError or an argument error exits 2, anything unexpected 3 (traceback
with KERNELKIT_DEBUG=1), so CI can tell a kit bug."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn, Sequence

from kernelkit import (KitError, ceilings, checks, config, controls, diff_document, environment, gpulock, history,
                       report, scaffold, span, timing, tools)
from kernelkit.records import printable


class OneSentenceParser(argparse.ArgumentParser):
    """Argument errors as one sentence, not a usage block (subcommand parsers inherit this class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneSentenceParser(prog="kernelkit", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="command")
    # In the order a run goes through them; `kernelkit --help` lists them so.
    for stage in (config, environment, ceilings, checks, controls, timing, span, tools, report, diff_document, history,
                  scaffold):
        stage.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if argv is None:
        gpulock.command_is_process()  # its own process: a GPU hold lasts until it exits
    try:
        return args.func(args)
    except KitError as error:
        print(f"kernelkit {args.command}: {printable(str(error))}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - a kit bug must not read as a verdict or as bad input
        if os.environ.get("KERNELKIT_DEBUG") == "1":
            raise
        detail = printable(" ".join(str(error).split()))[:200]
        print(f"kernelkit {args.command}: internal error: {type(error).__name__}: {detail} "
              "(KERNELKIT_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 3
