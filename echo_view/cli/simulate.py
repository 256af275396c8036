"""``echo-view simulate INPUT [-o OUT] [--json] [--set KEY=VALUE ...] [--comm measured|model]``.

INPUT is a measured job (any trace format an importer reads): its dependency graph is
reconstructed and replayed, with measured durations (replay) or with what-if changes
(``--set compute.scale.gemm=0.5``, ``--set cluster.nic_gbytes_per_s=50 --comm model``).
``--comm model`` takes collective times from the NCCL model on the job's cluster instead of the
trace. ``-o`` writes the predicted timeline in any export format; ``--json`` prints the step
times (predicted and measured), their breakdown and ``step_bound`` (whether the step is bound
by CPU dispatch or by the GPUs, from re-simulating with each side 2x faster:
:mod:`echo_view.sim.bound`).

Knobs for ``--set``: ``cluster.<key>`` (see :data:`echo_view.sim.cluster.OVERRIDE_KEYS`),
``compute.scale.<class>`` (:data:`echo_view.sim.compute.SCALE_KEYS`), ``comm.scale``,
``interference`` (``on``, the default: compute beside communication is slowed, the measured
slowdown removed first; ``off``; or a model file from ``echo-view calibrate interference``).
The run itself is :func:`echo_view.sim.runs.replay_job`.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from echo_view.cli.numargs import float_arg, put_setting
from echo_view.cli.parallel import add_parallel_options, read_job
from echo_view.cli.pathargs import output_arg, path_arg
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.errors import UsageError
from echo_view.formats import Progress, Registry, json_text, no_progress
from echo_view.text import printable
from echo_view.units import format_duration

if TYPE_CHECKING:
    from echo_view.model import Job


def register(subparsers: Any) -> None:
    """Add the ``simulate`` sub-command."""
    p = subparsers.add_parser(
        "simulate",
        description="Reconstruct a measured job's dependency graph and simulate it: with "
        "measured durations (replay), or with changed compute speed, cluster or "
        "communication (what-if). Prints the predicted step time beside the measured one.",
    )
    p.add_argument(
        "input",
        type=path_arg,
        metavar="INPUT",
        help="a measured job (trace file or dir), a workload config (.toml) or a traced graph",
    )
    p.add_argument("-o", "--output", type=output_arg, metavar="OUT", help="write the predicted job")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a cluster or model knob (cluster.nic_gbytes_per_s=50 (GB/s), "
        "compute.scale.gemm=0.5, compute.scale.all=0.8, comm.scale=0); repeatable",
    )
    p.add_argument(
        "--comm",
        choices=("measured", "model"),
        help="a measured job's collective times: as measured (default) or from the NCCL model",
    )
    p.add_argument(
        "--compute",
        type=path_arg,
        metavar="FILE",
        help="workload configs: kernel cost parameters from echo-view calibrate compute "
        "(the table of the config's GPU; --set compute.* still overrides)",
    )
    p.add_argument(
        "--ranks",
        choices=("stages", "all"),
        default="stages",
        help="workload configs: simulate one rank per pipeline stage (exact when the "
        "tensor- and data-parallel ranks are symmetric; default) or every rank",
    )
    p.add_argument(
        "--timeout",
        type=float_arg,
        metavar="SECONDS",
        help="configs whose [model] names a script: the limit per rank for tracing it "
        "(default 600), when no traced graph is at hand",
    )
    add_parallel_options(p)
    add_progress_option(p)
    p.set_defaults(func=run)


#: ``--timeout`` given for an input that traces no script.
TIMEOUT_FOR_SCRIPTS = "--timeout applies to configs whose [model] names a script"


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as a mapping (:mod:`echo_view.sim.runs` checks the keys)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        put_setting(out, key, value.strip())
    return out


def load_job(
    path: Path, registry: Registry, args: argparse.Namespace, progress: Progress = no_progress
) -> Job:
    """INPUT as a measured job (workload configs and traced graphs go to
    :func:`echo_view.cli.simulate_workload.run_workload` instead)."""
    return read_job(args, registry, [path], progress)


def run(args: argparse.Namespace, registry: Registry) -> int:
    """Import, reconstruct, simulate, report (and export)."""
    # Imported here, not at the top: `simulate --help` needs none of the simulator.
    from echo_view.cli.export import report_written
    from echo_view.cli.simulate_workload import run_workload
    from echo_view.loading import is_workload_input, setting_file
    from echo_view.model.schema import json_schema
    from echo_view.sim.runs import check_keys, replay_job

    if is_workload_input(args.input):
        if args.comm is not None:  # accepted, and the model timed them whatever it said
            raise UsageError(
                "--comm applies to a measured job; a config's collectives are always timed "
                "by the NCCL model",
                hint="drop --comm",
            )
        return run_workload(args, registry, parse_overrides(args.overrides))
    for option, given in (
        ("--compute", getattr(args, "compute", None)),
        ("--ranks all", getattr(args, "ranks", "stages") == "all"),
    ):
        if given:
            raise UsageError(
                f"{option} applies to workload configs and traced graphs, not to a measured job",
                hint="a replay takes its kernel times from the trace; use --set compute.scale.*",
            )
    if getattr(args, "timeout", None) is not None:
        raise UsageError(TIMEOUT_FOR_SCRIPTS)
    overrides = parse_overrides(args.overrides)
    check_keys(overrides, workload=False)  # before the (possibly long) import
    exporter = registry.exporter_for(args.output) if args.output is not None else None
    t0 = time.perf_counter()
    with stderr_progress(args) as progress:
        job = load_job(args.input, registry, args, progress)
    t_import = time.perf_counter()
    interference = setting_file(overrides.get("interference"))
    run = replay_job(job, overrides, args.comm or "measured", interference_file=interference)
    t_sim = time.perf_counter()
    report = {
        "schema": json_schema("simulate"),
        "input": str(args.input),
        **run.report,
        "seconds": {"import": t_import - t0, "simulate": t_sim - t_import},
    }
    if exporter is not None:
        with stderr_progress(args) as progress:
            exporter.write(run.predicted, args.output, progress)
        report_written(exporter, run.predicted, args.output)
    if args.json:
        sys.stdout.write(json_text(report))
    else:
        sys.stdout.write(render(report))
    return 0


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds * 1e9)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}%"


def render(report: dict[str, Any]) -> str:
    """The report as plain text."""
    colls = report["collectives"]
    lines = [
        f"{report['mode']} of {printable(str(report['input']))} (collectives: {report['comm']}, "
        f"{colls['modelled']} of {colls['total']} modelled)",
        f"step time {_fmt(report['step_time_s'])}"
        + (
            f", measured {_fmt(report['measured_step_time_s'])} ({_pct(report['error_pct'])})"
            if "measured_step_time_s" in report
            else ""
        ),
        "",
        f"{'rank':>5} {'step':>11} {'measured':>11} {'error':>8} {'compute':>11} "
        f"{'comm':>11} {'exposed':>11} {'idle':>11}",
    ]
    if colls.get("not_modelled_because"):
        lines[1:1] = [
            f"note: {colls['measured']} collective(s) keep their measured time (the comm model "
            f"needs the message size): {colls['not_modelled_because']}"
        ]
    for r in report["ranks"]:
        lines.append(
            f"{r['rank']:>5} {_fmt(r['step_time_s']):>11} "
            f"{_fmt(r.get('measured_step_time_s')):>11} {_pct(r.get('error_pct')):>8} "
            f"{_fmt(r['compute_s']):>11} {_fmt(r['comm_s']):>11} "
            f"{_fmt(r['exposed_comm_s']):>11} {_fmt(r['idle_s']):>11}"
        )
    if report.get("step_bound"):
        lines += ["", textwrap.fill(_bound_text(report), width=100)]
    return "\n".join(lines) + "\n"


def _bound_text(report: dict[str, Any]) -> str:
    b = report["step_bound"]
    gains = (
        f"2x faster GPU work (kernels, copies, collectives) shortens the step by "
        f"{100 * b['gpu_2x_gain']:.2f}%, a 2x faster CPU by {100 * b['cpu_2x_gain']:.1f}%"
    )
    if b["bound"] == "cpu-dispatch":
        rows = [r for r in report["ranks"] if r["step_time_s"] and r["idle_s"] is not None]
        slow = max(rows, key=lambda r: r["step_time_s"], default=None)
        idle = (
            f"; the slowest rank's GPU is idle {100 * slow['idle_s'] / slow['step_time_s']:.0f}% "
            "of its step"
            if slow is not None
            else ""
        )
        return (
            f"bound by CPU dispatch: {gains}{idle}. The GPUs wait for the CPU's launches, so "
            "GPU-side knobs (compute.scale.<class>, comm.scale, cluster.*) cannot help; "
            "compute.scale.cpu can."
        )
    if b["bound"] == "gpu":
        return f"bound by the GPUs: {gains}."
    return f"neither the CPU nor the GPU alone bounds the step: {gains}."
