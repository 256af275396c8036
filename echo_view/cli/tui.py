"""``echo-view tui PATH [PATH2]``: browse a job's timeline in the terminal; with two inputs,
also diff them (predicted vs measured). Keys: ``?`` in the app, or docs/tui.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from echo_view.cli.parallel import add_parallel_options, read_job
from echo_view.cli.pathargs import path_arg
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.errors import UsageError
from echo_view.formats import Registry
from echo_view.model import Job
from echo_view.text import printable


def register(subparsers: Any) -> None:
    """Add the ``tui`` sub-command."""
    p = subparsers.add_parser(
        "tui",
        description="Open a job's timeline (every rank's CPU threads and GPU streams) in the "
        "terminal, with zoom, search, details and a summary. With a second input, a diff screen "
        "compares the two (for example predicted vs measured). Press ? in the app for the keys.",
    )
    p.add_argument("path", type=path_arg, metavar="PATH", help="a job (trace file or directory)")
    p.add_argument("path2", type=path_arg, nargs="?", metavar="PATH2", help="a second job to diff")
    add_parallel_options(p)
    add_progress_option(p)
    p.set_defaults(func=run)


def has_terminal() -> bool:
    """Whether standard input and output are both a terminal."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def run(args: argparse.Namespace, registry: Registry) -> int:
    """Read the inputs, then run the app until the user quits; an input error ends the command
    with the usual one-line error before the screen is taken."""
    from echo_view.tui.app import EchoViewApp

    paths: list[Path] = [args.path] + ([args.path2] if args.path2 is not None else [])
    for path in paths:
        registry.importer_for(path)  # a wrong path fails here, before the screen is taken
    if not has_terminal():
        # Without one the app draws to a pipe and waits for keys that never come.
        raise UsageError(
            "the terminal UI needs a terminal: standard input and output are not one",
            hint="run it in a terminal (ssh -t for a remote one); echo-view info and diff print"
            " the same summaries without one",
        )

    # Read before the app starts, with progress on stderr as other commands show it: an import
    # beside the app's event loop ran 1.2-1.7x as long as alone (the two threads share the GIL).
    with stderr_progress(args) as progress:
        jobs = [read_job(args, registry, [path], progress) for path in paths]
    app = EchoViewApp(list[Path | Job](jobs), titles=[str(p) for p in paths])
    app.show_traceback = args.debug
    app.run()
    if app.error is not None:
        raise app.error
    if app.crash is not None or app.return_code:
        what = f"{type(app.crash).__name__}: {app.crash}" if app.crash else "an unknown error"
        print(
            f"echo-view: error: the terminal UI stopped on an internal error ({printable(what)})"
            + ("" if args.debug else "; run with --debug for the traceback"),
            file=sys.stderr,
        )
        return 1
    return 0
