"""The command line: parses arguments, calls the layers below, prints (``echo_view.loading``
wires the formats to the core).

Each sub-command lives in its own module under ``echo_view.cli`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args, registry) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from echo_view import __version__
from echo_view.errors import Deprecated, EchoViewError, UsageError
from echo_view.formats import INFLATION_FLOOR, MAX_INFLATION_RATIO, set_max_inflated_bytes

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
    _add_inflation_option(parser, None)
    return parser


def _show_warning(message: Warning | str, category: type[Warning], *rest: Any, **kw: Any) -> None:
    """echo-view's own warnings as one ``echo-view: warning:`` line on stderr."""
    if issubclass(category, Deprecated):
        print(f"echo-view: warning: {message}", file=sys.stderr)
    else:
        _SHOW_WARNING(message, category, *rest, **kw)


_SHOW_WARNING = warnings.showwarning


_INFLATION_HELP = (
    "cap on the bytes each gzip input may inflate to (1G, 50GB...); replaces the default rule: "
    f"at most {MAX_INFLATION_RATIO}x the compressed bytes read, once past "
    f"{INFLATION_FLOOR >> 20} MiB (real traces inflate under 50x; gzip bombs ~1000x)"
)


def _add_inflation_option(parser: argparse.ArgumentParser, default: str | None) -> None:
    """``--max-inflated-bytes`` on ``parser`` and, recursively, on every sub-command (where
    it must not overwrite a value given before the sub-command)."""
    parser.add_argument(
        "--max-inflated-bytes", default=default, metavar="SIZE", help=_INFLATION_HELP
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_inflation_option(sub, argparse.SUPPRESS)


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that ``finally`` blocks run: temporary files and
    half-written outputs are removed (a SIGKILL cannot be caught and may leave them)."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup
    raise Terminated


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` while a command runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _inflation_limit(text: str | None) -> int | None:
    if text is None:
        return None
    from echo_view.cli.comm import parse_size

    limit = parse_size(text)
    if limit <= 0:
        raise UsageError(f"--max-inflated-bytes must be positive, got {text!r}")
    return limit


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    warnings.showwarning = _show_warning
    from echo_view.cli.guard import check_command_paths

    parser = build_parser()
    args = parser.parse_args(argv)
    from echo_view.loading import build_registry  # the formats: only a command needs them

    try:
        with _sigterm_raises():
            set_max_inflated_bytes(_inflation_limit(args.max_inflated_bytes))
            check_command_paths(args)
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
    except Terminated:
        print("echo-view: terminated", file=sys.stderr)
        return 143
    except BrokenPipeError:
        return 0
    finally:
        set_max_inflated_bytes(None)
