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
from typing import Any

from echo_view import __version__
from echo_view.errors import EchoViewError

#: Sub-commands in ``--help`` order with their one-line help. Each lives in the module
#: ``echo_view.cli.<name>``, which exposes ``register(subparsers)``. A command's module is
#: imported only when that command runs, so ``--help`` and ``--version`` start without numpy,
#: rich or textual.
COMMANDS: dict[str, str] = {
    "info": "summarise traces: steps, compute/communication/idle breakdown, collectives",
    "export": "write traces as Perfetto JSON (.json, .json.gz) or protobuf (.pftrace)",
    "check": "validate traces: Perfetto conformance, Kineto semantics, cross-rank consistency",
    "simulate": "predict step time by simulation: replay a measured job, or ask what-if",
    "trace": "trace a workload config's rank roles into a traced-graph JSON (no GPU needed)",
    "diff": "compare two jobs (predicted vs measured): step time per rank, breakdown, kernels",
    "tui": "browse timelines in the terminal; with two inputs, diff them",
    "comm": "predict one NCCL collective: time, algorithm, protocol, bandwidth",
    "calibrate": "fit a model's constants to measurements (comm, compute, interference)",
    "interference": "measure how much compute kernels slow down beside NCCL kernels",
}


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The sub-command action: each command's one-line help comes from :data:`COMMANDS`."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().add_parser(name, help=COMMANDS[name], **kwargs)
        return parser


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``echo-view`` argument parser.

    Without ``argv`` every sub-command is built in full. With it, only the command ``argv``
    names is (its module imported); the others are listed by name and help only.
    """
    parser = argparse.ArgumentParser(
        prog="echo-view",
        description="Predict, inspect and validate the step time of distributed training jobs.",
    )
    parser.add_argument("--version", action="version", version=f"echo-view {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, action=_Commands)
    # Top-level options take no value, so the first other word names the command.
    chosen = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for name in COMMANDS:
        if chosen is None or name == chosen:
            importlib.import_module(f"echo_view.cli.{name}").register(sub)
        else:
            sub.add_parser(name, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    if not hasattr(args, "func"):  # argv named its command in an unusual place: build them all
        args = build_parser().parse_args(argv)
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
