"""``--workers N`` and ``--scheduler ADDRESS``: where a command reads a job's rank files.

Every command that reads a job takes both, through :func:`add_parallel_options`, and reads
through :func:`read_job` here, which hands :class:`~echo_view.loading.Parallel` to the one loader
(:func:`echo_view.loading.read_job`); a command that needs only per-rank results reads through
:func:`read_ranks` (:func:`echo_view.loading.read_ranks`), which never holds the whole job. The
rule for when a cluster is started is :func:`echo_view.loading.fans_out`; the job is byte for
byte the same either way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from echo_view.cli.numargs import int_arg
from echo_view.errors import UsageError
from echo_view.formats import Progress, Registry, no_progress
from echo_view.workers import check_scheduler, check_workers

if TYPE_CHECKING:
    from echo_view.loading import Parallel
    from echo_view.model import Job, JobHead, Trace


def add_parallel_options(parser: Any) -> None:
    """Add ``--workers`` and ``--scheduler`` to a sub-command that reads a job."""
    group = parser.add_argument_group("reading rank files in parallel (dask extra)")
    group.add_argument(
        "--workers",
        type=int_arg,
        metavar="N",
        help="read the rank files in N local worker processes (default: one per core, once "
        "they hold 256 MiB of JSON; 1: all in this process)",
    )
    group.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="read the rank files on the Dask cluster at ADDRESS (tcp://host:8786); its "
        "workers must see the files at the same paths",
    )


def parallel_of(args: argparse.Namespace) -> Parallel:
    """The ``--workers``/``--scheduler`` of ``args``, checked."""
    workers: int | None = getattr(args, "workers", None)
    scheduler: str | None = getattr(args, "scheduler", None)
    if workers is not None and scheduler is not None:
        raise UsageError(
            "--workers and --scheduler exclude each other",
            hint="--workers N starts N local processes; --scheduler uses an existing cluster",
        )
    if workers is not None:
        check_workers(workers)
    if scheduler is not None:  # also where one file is read in this process
        check_scheduler(scheduler)
    from echo_view.loading import Parallel  # not at import: `--help` needs none of it

    return Parallel(workers=workers, scheduler=scheduler)


def read_job(
    args: argparse.Namespace,
    registry: Registry,
    paths: Sequence[Path],
    progress: Progress = no_progress,
) -> Job:
    """The job ``paths`` hold, read where ``args`` says."""
    from echo_view.loading import read_job as load_job

    return load_job(paths, registry, progress, parallel_of(args))


R = TypeVar("R")


def read_ranks(
    args: argparse.Namespace,
    registry: Registry,
    paths: Sequence[Path],
    digest: Callable[[Trace], R],
    progress: Progress = no_progress,
) -> tuple[JobHead, list[R]]:
    """The job ``paths`` hold without its events, and ``digest`` of each rank, computed
    where ``args`` says the rank files are read."""
    from echo_view.loading import read_ranks as load_ranks

    return load_ranks(paths, digest, registry, progress, parallel_of(args))
