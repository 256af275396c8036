"""``echo-view export PATH... -o OUT``: write the traces of one job for Perfetto / chrome://tracing.

The importer is the one that recognises the first path (all paths must be of that format and
are read as one job); the exporter is chosen by the suffix of ``OUT``: ``.json`` / ``.json.gz``
(Chrome JSON that Perfetto and chrome://tracing open) or ``.pftrace`` (native Perfetto
protobuf, smaller and faster to load for big jobs). A one-line summary goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from echo_view.cli.parallel import add_parallel_options, read_job
from echo_view.cli.pathargs import output_arg, path_arg
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.formats import Exporter, Registry
from echo_view.model import Job
from echo_view.text import printable


def register(subparsers: Any) -> None:
    """Add the ``export`` sub-command."""
    p = subparsers.add_parser(
        "export",
        description="Write the traces of one job as one file for Perfetto: one process per "
        "rank and GPU, one per rank and CPU process (in .pftrace under one top-level track per "
        "rank, in rank order), named threads and streams, overlapping slices on extra lanes, "
        "launch -> kernel and cross-rank collective flows, a steps track per rank, times "
        "relative to the job start (exact to the nanosecond). See docs/perfetto.md.",
    )
    p.add_argument("paths", nargs="+", type=path_arg, metavar="PATH", help="trace files of one job")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=output_arg,
        metavar="OUT",
        help="output file; its suffix picks the format (.json, .json.gz, .pftrace)",
    )
    add_progress_option(p)
    add_parallel_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, registry: Registry) -> int:
    """Import, export, summarise on stderr."""
    paths: list[Path] = list(args.paths)
    out: Path = args.output
    # A wrong suffix fails before a long import (an output that is an input or a directory
    # was refused before the command ran: echo_view.cli.guard).
    exporter = registry.exporter_for(out)
    with stderr_progress(args) as progress:
        job = read_job(args, registry, paths, progress)
        exporter.write(job, out, progress)
    report_written(exporter, job, out)
    return 0


def report_written(exporter: Exporter, job: Job, out: Path) -> None:
    """Say on stderr what ``exporter`` just wrote to ``out`` (slices and flows as a viewer
    counts them, when the exporter reports them)."""
    stats = getattr(exporter, "last_stats", None)
    detail = stats.one_line() if stats is not None else f"{job.event_count()} events"
    print(f"echo-view: wrote {printable(str(out))} ({exporter.name}): {detail}", file=sys.stderr)
