"""The command line: parses arguments, calls the layers below, prints (``echo_view.loading``
wires the formats to the core).

Each sub-command lives in its own module under ``echo_view.cli`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args, registry) -> int``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

try:  # a Ctrl-C while these load (numpy among them) printed a KeyboardInterrupt traceback
    from echo_view import __version__
    from echo_view.errors import (
        Deprecated,
        EchoViewError,
        InputNote,
        OutputError,
        Terminated,
        UsageError,
        clear_stop,
        request_stop,
        stop_requested,
    )
    from echo_view.formats import (
        INFLATION_FLOOR,
        MAX_INFLATION_RATIO,
        set_max_inflated_bytes,
        write_error,
    )
    from echo_view.text import cut_middle, printable
except KeyboardInterrupt:
    sys.stderr.write("echo-view: interrupted\n")
    raise SystemExit(130) from None

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
    "plan": "search parallel layouts on N GPUs: memory fit, simulated step time, ranking",
    "diff": "compare two jobs (predicted vs measured): step time per rank, breakdown, kernels",
    "tui": "browse timelines in the terminal; with two inputs, diff them",
    "comm": "predict one NCCL collective: time, algorithm, protocol, bandwidth",
    "calibrate": "fit a model's constants to measurements (comm, compute, interference)",
    "interference": "measure how much compute kernels slow down beside communication kernels",
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line, as every other error is (argparse
    printed the usage first, up to seven lines), pointing at ``--help``, with an option's
    value escaped and cut: they quote it whole (``--ranks`` given 100,000 digits printed a
    100 KB line)."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            2,
            f"{self.prog}: error: {printable(cut_middle(message))} (see {self.prog} --help)\n",
        )


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
    parser = _Parser(
        prog="echo-view",
        description="Predict, inspect and validate the step time of distributed training jobs.",
    )
    parser.add_argument("--version", action="version", version=f"echo-view {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, action=_Commands, parser_class=_Parser
    )
    chosen = None if argv is None else _command_word(argv)
    for name in COMMANDS:
        if chosen is None or name == chosen:
            importlib.import_module(f"echo_view.cli.{name}").register(sub)
        else:
            sub.add_parser(name, add_help=False)
    _add_inflation_option(parser, None)
    return parser


def _show_warning(message: Warning | str, category: type[Warning], *rest: Any, **kw: Any) -> None:
    """echo-view's own warnings as one ``echo-view: warning:`` line on stderr."""
    if issubclass(category, Deprecated | InputNote):
        print(f"echo-view: warning: {printable(cut_middle(str(message)))}", file=sys.stderr)
    else:
        _SHOW_WARNING(message, category, *rest, **kw)


_SHOW_WARNING = warnings.showwarning


def _command_word(argv: Sequence[str]) -> str:
    """The first word of ``argv`` that is neither a top-level option nor its value."""
    words = iter(argv)
    for word in words:
        if word == "--max-inflated-bytes":  # the one top-level option with a separate value
            next(words, None)
        elif not word.startswith("-"):
            return word
    return ""


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


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if stop_requested():
        return  # a second SIGTERM must not cut the cleanup
    request_stop()
    raise Terminated


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` while a command runs (main thread only)."""
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if on_main else None
    try:
        yield
        if stop_requested():  # the Terminated raised was swallowed on the way (a finalizer)
            raise Terminated
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)
        clear_stop()


class _CheckedStdout:
    """``sys.stdout`` while a command runs: a write or flush that fails (a full disk, an I/O
    error, `> /dev/full`) raises a one-line :class:`~echo_view.errors.OutputError` instead of
    an ``OSError`` traceback; a closed pipe stays a ``BrokenPipeError``."""

    def __init__(self, out: Any) -> None:
        self._out = out

    def _checked(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise write_error(exc, Path("standard output")) from None

    def write(self, data: str | bytes) -> int:
        return int(self._checked(self._out.write, data))

    def flush(self) -> None:
        self._checked(self._out.flush)

    @property
    def buffer(self) -> _CheckedStdout:
        """The binary stream under it, checked the same way (`check --json` writes bytes)."""
        return _CheckedStdout(self._out.buffer)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding... as the stream's
        return getattr(self._out, name)


@contextmanager
def _checked_stdout() -> Iterator[None]:
    """Route the command's standard output through :class:`_CheckedStdout`; when it can no
    longer be written, point file descriptor 1 at ``/dev/null`` so that the interpreter's own
    flush at exit does not print a second error."""
    real = sys.stdout
    sys.stdout = _CheckedStdout(real)
    try:
        try:
            yield
        except SystemExit:  # --help and --version exit, and what they print must arrive too
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # (what is still buffered fails here, inside the error handling)
    except (OutputError, BrokenPipeError):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), real.fileno())
        raise
    finally:
        sys.stdout = real


def _inflation_limit(text: str | None) -> int | None:
    if text is None:
        return None
    from echo_view.cli.sizes import parse_size

    limit = parse_size(text, "--max-inflated-bytes")
    if limit <= 0:
        raise UsageError(f"--max-inflated-bytes must be positive, got {text!r}")
    return limit


def _environment_problem() -> str | None:
    """What in the process's environment stops any command, before one is parsed; the standard
    streams made usable on the way."""
    # Started with a standard stream closed (`>&-`, `<&-`), Python leaves it None.
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, for its life)
    if sys.stdin is None:
        sys.stdin = open(os.devnull)  # noqa: SIM115 (reads as empty, never a terminal)
    if sys.stdout is None:
        return "standard output is closed (give the command an output: > FILE, or | less)"
    try:
        os.getcwd()
    except OSError:  # relative paths, imports and worker processes all need it
        return "the current directory no longer exists (cd to one that does)"
    # An ASCII terminal or PYTHONIOENCODING=ascii cannot encode µ, ×, ± or a name's é: shown
    # as \xb5 escapes instead of a UnicodeEncodeError traceback.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    warnings.showwarning = _show_warning
    problem = _environment_problem()
    if problem is not None:
        print(f"echo-view: error: {problem}", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        # argparse drops an error writing --help or --version: the checked stream raises it.
        with _checked_stdout():
            args = build_parser(argv).parse_args(argv)
            if not hasattr(args, "func"):  # argv named its command in an unusual place
                args = build_parser().parse_args(argv)
    except OutputError as exc:
        print(f"echo-view: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:  # while the command's module loads
        print("echo-view: interrupted", file=sys.stderr)
        return 130
    try:
        # Only a command needs these (--help and --version have exited by now); inside the
        # try, so that a Ctrl-C while they load is "interrupted", not a traceback.
        from echo_view.cli.guard import check_command_paths
        from echo_view.loading import build_registry

        with _sigterm_raises(), _checked_stdout():
            set_max_inflated_bytes(_inflation_limit(args.max_inflated_bytes))
            check_command_paths(args)
            code: int = args.func(args, build_registry())
            return code
    except EchoViewError as exc:
        if args.debug:  # the traceback, then the same line and exit code as without --debug
            _print_traceback()
        print(f"echo-view: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("echo-view: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        if args.debug:
            _print_traceback()
        print(
            "echo-view: error: out of memory (run it where more memory is free or allowed, "
            "ulimit -v; or read fewer ranks at once: --workers 1)",
            file=sys.stderr,
        )
        return 2
    except Terminated:
        print("echo-view: terminated", file=sys.stderr)
        return 143
    except BrokenPipeError:
        return 0
    finally:
        set_max_inflated_bytes(None)


def _print_traceback() -> None:
    """The traceback of the error being handled, for ``--debug``, with what the inputs put in
    its messages (escape sequences, control characters) shown escaped."""
    from echo_view.text import printable_lines

    sys.stderr.write(printable_lines(traceback.format_exc()))
