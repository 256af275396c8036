"""``echo-view info PATH... [--json]``: what a job's traces hold and where its step time goes.

Reads the files with the importer that recognises the first path, then prints, per rank and
GPU, the mean step time and its breakdown into compute, communication, exposed communication,
memory copies/sets and idle time (definitions: :mod:`echo_view.analysis.breakdown`), the job's
ranks, devices, clock alignment and collectives, and the top kernels and collectives. With
``--json`` it prints the stable object documented in :mod:`echo_view.analysis.summary` instead.
Import progress goes to stderr on a terminal or with ``--progress`` (:mod:`echo_view.cli.progress`).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from echo_view.analysis.summary import (
    CATEGORIES,
    JobSummary,
    RankRow,
    rank_summary,
    summarize_ranks,
)
from echo_view.cli.console import console
from echo_view.cli.numargs import int_arg
from echo_view.cli.parallel import add_parallel_options, read_ranks
from echo_view.cli.pathargs import path_arg
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.cli.tables import print_rows
from echo_view.errors import UsageError
from echo_view.formats import Registry, json_text
from echo_view.model import SEPARATE_RUNS
from echo_view.text import markup_safe, printable
from echo_view.units import format_duration

_LABELS = {
    "compute_ns": "compute",
    "comm_ns": "comm",
    "exposed_comm_ns": "exposed comm",
    "memory_ns": "memory",
    "idle_ns": "idle",
}


def register(subparsers: Any) -> None:
    """Add the ``info`` sub-command."""
    p = subparsers.add_parser(
        "info",
        description="Summarise the traces of one job: ranks, devices, clock alignment, "
        "collectives, and per rank the mean step time split into compute, communication, "
        "exposed communication, memory copies/sets and idle GPU time.",
    )
    p.add_argument("paths", nargs="+", type=path_arg, metavar="PATH", help="trace files of one job")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of tables")
    p.add_argument(
        "--top", type=int_arg, default=10, metavar="N", help="kernels/collectives to list (10)"
    )
    add_progress_option(p)
    add_parallel_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, registry: Registry) -> int:
    """Import, summarise, print."""
    paths: list[Path] = list(args.paths)
    if args.top < 0:
        raise UsageError(f"--top must be 0 or more, got {args.top}")
    with stderr_progress(args) as progress:
        # Each rank summarised where it is read: the job's events are never held at once.
        head, ranks = read_ranks(args, registry, paths, rank_summary, progress)
    summary = summarize_ranks(head, ranks, top=args.top)
    if args.json:
        sys.stdout.write(json_text(summary.to_json()))
    else:
        render(summary, console(), title=_title(paths))
    return 0


def _title(paths: list[Path]) -> str:
    """The input as one short line: the path, or how many files in which directory."""
    if len(paths) == 1:
        return str(paths[0])
    parents = {p.parent for p in paths}
    where = f" in {parents.pop()}" if len(parents) == 1 else ""
    return f"{len(paths)} files{where}"


def _ranks_text(ranks: tuple[int, ...]) -> str:
    if ranks and list(ranks) == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(str(r) for r in ranks)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _models(devices: list[dict[str, Any]]) -> str:
    """The GPU models among ``devices``: the name alone when all share one, else a count per
    name (``unnamed`` where the trace names none; device ids repeat across ranks, so they do
    not tell GPUs apart)."""
    counts = Counter(d["name"] for d in devices)
    if not counts:
        return "none"
    if len(counts) == 1 and None not in counts:
        return markup_safe(next(iter(counts)))
    named = sorted((n, k) for n, k in counts.items() if n is not None)
    parts = [f"{k:,} x {markup_safe(n)}" for n, k in named]
    if None in counts:
        parts.append(f"{counts[None]:,} unnamed")
    return ", ".join(parts)


def _share(ns: int, whole: int) -> str:
    pct = f" ({100 * ns / whole:.1f}%)" if whole else ""
    return format_duration(ns) + pct


def _rank_cells(r: RankRow) -> list[str]:
    cells = [
        str(r.rank),
        "-" if r.device is None else str(r.device),
        str(r.steps),
        format_duration(r.mean(r.cpu_step_ns)) if r.steps else "-",
        format_duration(r.mean_step_ns) if r.steps else "-",
    ]
    for name in CATEGORIES:
        if r.categories is None:
            cells.append("-")
        else:
            cells.append(_share(r.mean(r.categories[name]), r.mean_step_ns))
    return cells


def render(summary: JobSummary, console: Console, title: str | None = None) -> None:
    """Print ``summary`` as text tables under ``title`` (default: the job's source)."""
    job = summary.job
    al = job.alignment
    devices = summary.devices()
    console.print(printable(title or job.source or "job"), style="bold", markup=False)
    of = (
        "from captures of different runs"
        if al.method == SEPARATE_RUNS
        else f"of world size {job.world_size if job.world_size is not None else 'unknown'}"
    )
    console.print(
        f"ranks {_ranks_text(job.ranks)} ({len(job.ranks)} {of}); "
        f"{_count(len(devices), 'GPU')} with work: {_models(devices)}"
    )
    console.print(
        f"clock alignment: {al.method}, uncertainty {format_duration(al.uncertainty_ns)}"
        + (f" ({markup_safe(al.note)})" if al.note else "")
    )
    colls = summary.collectives_by_kind
    kinds = ", ".join(f"{k} {n}" for k, n in colls.items()) or "none"
    console.print(f"events {job.events:,}; collectives {sum(colls.values())}: {kinds}")
    rules = sorted({(r.step_rule, r.steps_detected) for r in summary.rows})
    console.print(
        "steps: "
        + ", ".join(f"{rule}{' (detected)' if det else ''}" for rule, det in rules)
        + "; times are means per step"
    )

    table = Table(box=box.SIMPLE_HEAD, title="Per rank", title_justify="left")
    for head in ("rank", "gpu", "steps", "cpu step", "step"):
        table.add_column(head, justify="right")
    for name in CATEGORIES:
        table.add_column(_LABELS[name], justify="right")
    print_rows(console, table, [_rank_cells(row) for row in summary.rows])
    slow = summary.slowest
    if slow is not None:
        console.print(
            f"slowest: rank {slow.rank}"
            + (f" gpu {slow.device}" if slow.device is not None else "")
            + f", step {format_duration(slow.mean_step_ns)}"
        )

    if summary.top_kernels:
        kt = Table(box=box.SIMPLE_HEAD, title="Top kernels (all ranks)", title_justify="left")
        kt.add_column("kernel")
        for head in ("count", "total", "ranks"):
            kt.add_column(head, justify="right")
        for k in summary.top_kernels:
            name = k.name if len(k.name) <= 90 else k.name[:87] + "..."
            kt.add_row(markup_safe(name), str(k.count), format_duration(k.total_ns), str(k.extra))
        console.print(kt)
    if summary.top_collectives:
        ct = Table(box=box.SIMPLE_HEAD, title="Collectives (all ranks)", title_justify="left")
        ct.add_column("kind")
        for head in ("count", "GPU time", "bytes"):
            ct.add_column(head, justify="right")
        for c in summary.top_collectives:
            nbytes = "unknown" if c.extra < 0 else f"{c.extra:,}"
            ct.add_row(markup_safe(c.name), str(c.count), format_duration(c.total_ns), nbytes)
        console.print(ct)
