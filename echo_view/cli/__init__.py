"""The command line: parses arguments, calls the layers below, prints (``echo_view.loading``
wires the formats to the core).

Each sub-command lives in its own module under ``echo_view.cli`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args, registry) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from echo_view import __version__
from echo_view.errors import EchoViewError

#: Sub-command modules, in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = (
    "info", "export", "check", "simulate", "trace", "diff", "tui", "comm", "calibrate",
    "interference",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The ``echo-view`` argument parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="echo-view",
        description="Predict, inspect and validate the step time of distributed training jobs.",
    )
    parser.add_argument("--version", action="version", version=f"echo-view {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"echo_view.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from echo_view.loading import build_registry  # the formats: only a command needs them

    try:
        code: int = args.func(args, build_registry())
        return code
    except EchoViewError as exc:
        if args.debug:
            raise
        print(f"echo-view: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("echo-view: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
