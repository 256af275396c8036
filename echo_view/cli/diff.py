"""``echo-view diff A B [--json] [--fail-above PCT] [--plot OUT.png]``: compare two jobs.

A and B are anything echo-view reads (measured traces, predicted jobs). The comparison (rank and
step alignment, categories, kernel classes, collectives, verdict) is
:func:`echo_view.analysis.diff.diff_jobs`; ``--json`` prints its stable object (documented in
docs/cli.md). ``--fail-above PCT`` makes the exit status 1 when the step-time error exceeds PCT
percent (or when nothing could be compared), for CI. ``--plot`` draws per-rank step-time bars
beside the category breakdown (needs the ``plot`` extra: matplotlib).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from echo_view.analysis.diff import (
    CATEGORIES,
    DEFAULT_TOLERANCE_PCT,
    ItemDiff,
    JobDiff,
    diff_jobs,
    rank_names,
)
from echo_view.cli.console import console
from echo_view.cli.numargs import float_arg, int_arg
from echo_view.cli.parallel import add_parallel_options, read_job
from echo_view.cli.pathargs import output_arg, path_arg
from echo_view.cli.plotting import new_figure, plot_format, save_figure
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.cli.tables import print_rows
from echo_view.errors import UsageError
from echo_view.formats import Registry, json_text
from echo_view.model import Job
from echo_view.text import markup_safe, printable
from echo_view.units import format_duration

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def register(subparsers: Any) -> None:
    """Add the ``diff`` sub-command."""
    p = subparsers.add_parser(
        "diff",
        description="Compare job A with job B: per rank the step time of each, the delta and "
        "the error; per category (compute, communication, exposed communication, memory, "
        "idle) the time of each and the delta; the kernel classes and collectives that moved "
        "most; and a verdict. The reference for the error is the measured input when exactly "
        "one input is predicted, else A.",
    )
    p.add_argument("a", type=path_arg, metavar="A", help="first job (trace file or directory)")
    p.add_argument("b", type=path_arg, metavar="B", help="second job (trace file or directory)")
    p.add_argument("--json", action="store_true", help="print the stable JSON object")
    p.add_argument(
        "--fail-above",
        type=float_arg,
        metavar="PCT",
        help="exit 1 when the step-time error exceeds PCT percent",
    )
    p.add_argument(
        "--plot",
        type=output_arg,
        metavar="OUT",
        help="write step-time and breakdown bars (.png/.svg/.pdf)",
    )
    p.add_argument("--top", type=int_arg, default=10, metavar="N", help="kernels/collectives (10)")
    p.add_argument(
        "--tolerance",
        type=float_arg,
        default=DEFAULT_TOLERANCE_PCT,
        metavar="PCT",
        help=f"step-time change the verdict calls a match ({DEFAULT_TOLERANCE_PCT:g})",
    )
    add_progress_option(p)
    add_parallel_options(p)
    p.set_defaults(func=run)


def _read(registry: Registry, path: Path, args: argparse.Namespace) -> Job:
    with stderr_progress(args) as progress:
        return read_job(args, registry, [path], progress)


def run(args: argparse.Namespace, registry: Registry) -> int:
    """Read both jobs, compare, print; the exit status follows ``--fail-above``."""
    if args.top < 0:
        raise UsageError(f"--top must be 0 or more, got {args.top}")
    if args.fail_above is not None and not 0 <= args.fail_above <= 1e6:  # (also nan, inf)
        raise UsageError(
            f"--fail-above must be a percentage from 0 to 1,000,000, got {args.fail_above:g}"
        )
    if not 0 <= args.tolerance <= 1e6:  # (also nan)
        raise UsageError(
            f"--tolerance must be a percentage from 0 to 1,000,000, got {args.tolerance:g}"
        )
    if args.plot is not None:
        plot_format(args.plot)  # fail before the (possibly long) import
    diff = diff_jobs(
        _read(registry, args.a, args),
        _read(registry, args.b, args),
        top=args.top,
        tolerance_pct=args.tolerance,
    )
    if args.plot is not None:  # first: an output that cannot be written stops the report too
        write_plot(diff, args.plot)
    if args.json:
        sys.stdout.write(json_text(diff.to_json()))
    else:
        render(diff, console(width=140))
    if args.fail_above is not None:
        err = diff.error_pct
        if err is None or err > args.fail_above:
            shown = "unknown" if err is None else f"{err:.2f}%"
            print(
                f"echo-view: step-time error {shown} exceeds --fail-above {args.fail_above:g}%",
                file=sys.stderr,
            )
            return 1
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def _delta(ns: int) -> str:
    return ("+" if ns > 0 else "-" if ns < 0 else "±") + format_duration(abs(ns))


def _items_table(title: str, items: list[ItemDiff], head: str) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    t.add_column(head)
    for h in ("A / step", "B / step", "delta", "delta %", "count A", "count B"):
        t.add_column(h, justify="right")
    for it in items:
        name = it.name if len(it.name) <= 70 else it.name[:67] + "..."
        t.add_row(
            markup_safe(name),
            format_duration(it.time.a_ns),
            format_duration(it.time.b_ns),
            _delta(it.time.delta_ns),
            _pct(it.time.delta_pct()),
            f"{it.a_count:g}",
            f"{it.b_count:g}",
        )
    return t


def render(diff: JobDiff, console: Console) -> None:
    """Print ``diff`` as text tables."""
    ref_b = diff.reference_is_b
    pa = " (predicted)" if diff.a_predicted else ""
    pb = " (predicted)" if diff.b_predicted else ""
    console.print(f"[bold]A[/bold] {markup_safe(diff.a_source)}{pa}")
    console.print(f"[bold]B[/bold] {markup_safe(diff.b_source)}{pb}")
    for warning in diff.warnings:
        console.print(Text(f"warning: {printable(warning)}", style="bold yellow"))
    code, text = diff.verdict
    colour = {"match": "green", "b_slower": "red", "b_faster": "cyan"}.get(code, "yellow")
    console.print(f"[bold {colour}]{markup_safe(text)}[/]")
    err = diff.error_pct
    if err is not None:
        console.print(f"step-time error {err:.2f}% of {'B' if ref_b else 'A'} (slowest rank)")

    rt = Table(box=box.SIMPLE_HEAD, title="Step time per rank", title_justify="left")
    for h in ("rank", "steps", "A", "B", "delta", "delta %", "error %"):
        rt.add_column(h, justify="right")
    rows = []
    for r, name in zip(diff.ranks, rank_names(diff.ranks), strict=True):
        e = r.step.error_pct(ref_b)
        rows.append(
            [
                name,
                f"{len(r.steps_a)} ({r.step_alignment})",
                format_duration(r.step.a_ns),
                format_duration(r.step.b_ns),
                _delta(r.step.delta_ns),
                _pct(r.step.delta_pct()),
                "-" if e is None else f"{e:.2f}",
            ]
        )
    print_rows(console, rt, rows)
    ct = Table(box=box.SIMPLE_HEAD, title="Categories (mean over ranks)", title_justify="left")
    for h in ("category", "A", "B", "delta", "delta %"):
        ct.add_column(h, justify="right" if h != "category" else "left")
    for c in CATEGORIES:
        p = diff.categories[c]
        ct.add_row(
            c,
            format_duration(p.a_ns),
            format_duration(p.b_ns),
            _delta(p.delta_ns),
            _pct(p.delta_pct()),
        )
    console.print(ct)
    if diff.kernels:
        console.print(_items_table("Kernel classes by |delta|", diff.kernels, "kernel class"))
    if diff.collectives:
        console.print(_items_table("Collectives by |delta|", diff.collectives, "collective"))
    for note in diff.notes:
        console.print(f"note: {markup_safe(note)}")


def write_plot(diff: JobDiff, path: Path) -> None:
    """Per-rank step-time bars (A beside B) and the category breakdown, written atomically."""
    plot_format(path)
    save_figure(plot_figure(diff), path)


def plot_figure(diff: JobDiff) -> Figure:
    """The ``--plot`` figure: the whole verdict as its title (wrapped, never cut), legends
    beside the axes so that they cover no bar."""
    fig = new_figure(figsize=(12, 5), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=(3, 2))
    ranks = rank_names(diff.ranks)
    xs = list(range(len(ranks)))
    ax1.bar([x - 0.2 for x in xs], [r.step.a_ns / 1e6 for r in diff.ranks], 0.4, label="A")
    ax1.bar([x + 0.2 for x in xs], [r.step.b_ns / 1e6 for r in diff.ranks], 0.4, label="B")
    ax1.set_xticks(xs, ranks)
    ax1.set_xlabel("rank")
    ax1.set_ylabel("step time (ms)")
    ax1.set_title("Step time per rank")
    ax1.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    parts = ("compute", "exposed_comm", "memory", "idle")
    colours = ("#4caf50", "#9c27b0", "#ff9800", "#bdbdbd")
    bottom = [0.0, 0.0]
    for part, colour in zip(parts, colours, strict=True):
        vals = [diff.categories[part].a_ns / 1e6, diff.categories[part].b_ns / 1e6]
        ax2.bar(["A", "B"], vals, 0.6, bottom=bottom, label=part, color=colour)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax2.set_ylabel("time per step (ms, mean over ranks)")
    ax2.set_title("Category breakdown")
    ax2.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    lines = [f"warning: {w}" for w in diff.warnings] + [diff.verdict[1]]
    fig.suptitle("\n".join(t for line in lines for t in textwrap.wrap(line, 130)), fontsize="small")
    return fig
