"""``echo-view calibrate TARGET ...``: fit a model's physical constants to measurements.

Targets are sub-commands: ``comm`` fits the collective model to nccl-tests logs and writes a
TOML file that ``echo-view comm --model`` and the simulator read. Each target lives in
:data:`TARGETS`: ``comm`` here, others in ``echo_view.cli.calibrate_<target>`` modules that
expose ``register(subparsers)`` like a command.

``calibrate comm LOG... -o comm.toml`` reads each log's ranks and hosts, puts them on the
cluster the options describe (GPU matched from the log's device names unless ``--gpu``), fits
(:mod:`echo_view.sim.calibrate.comm`) and reports the fit error per log; ``--holdout`` also reports
each log predicted by constants fitted on the other logs only.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from echo_view import __version__
from echo_view.cli.comm import (
    add_cluster_options,
    format_bytes,
    nic_option,
    parse_collective,
    parse_sets,
)
from echo_view.cli.console import console
from echo_view.cli.pathargs import output_arg, path_arg
from echo_view.errors import ConfigError, InputNote, UsageError
from echo_view.formats import Registry, atomic_output, json_text
from echo_view.model.schema import json_schema
from echo_view.sim.calibrate.comm import (
    ErrorStats,
    FitResult,
    Measurement,
    fit_alphabeta,
    fit_nccl,
    leave_one_out,
)
from echo_view.sim.cluster import Cluster, ClusterKeys, gpu_preset, make_cluster, match_gpu
from echo_view.sim.comm import (
    AlphaBetaModel,
    CommParams,
    NcclModel,
    bus_factor,
    comm_model_to_toml,
)
from echo_view.text import markup_safe
from importers.nccl_tests import NcclTestsLog, parse_nccl_tests

#: Calibration targets, in ``--help`` order.
TARGETS: tuple[str, ...] = ("comm", "compute", "interference")


def register(subparsers: Any) -> None:
    """Add ``calibrate`` and its targets."""
    p = subparsers.add_parser(
        "calibrate",
        description="Fit the physical constants of a cost model to measurements and write "
        "them to a file the simulator reads.",
    )
    sub = p.add_subparsers(dest="target", metavar="TARGET", required=True)
    for name in TARGETS:
        if name == "comm":
            register_comm(sub)
        else:
            importlib.import_module(f"echo_view.cli.calibrate_{name}").register(sub)


def register_comm(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "comm",
        help="fit the collective model to nccl-tests logs",
        description="Fit the NCCL-like collective model (latencies per protocol and link "
        "tier, bandwidth efficiencies, per-channel costs) to nccl-tests logs and write the "
        "constants as TOML. Prints the fit error per log, split at 1 MiB.",
    )
    p.add_argument("logs", nargs="+", type=path_arg, metavar="LOG", help="nccl-tests stdout logs")
    p.add_argument("-o", "--output", type=output_arg, required=True, metavar="FILE.toml")
    p.add_argument(
        "--model",
        choices=("nccl", "alphabeta"),
        default="nccl",
        help="model to fit (default nccl; alphabeta is the plain baseline)",
    )
    add_cluster_options(p, gpu_default=None)
    p.add_argument(
        "--collective",
        metavar="NAME",
        help="collective the logs measured, for old logs that do not say (all_gather, ...)",
    )
    p.add_argument(
        "--in-place", action="store_true", help="fit the in-place times (default out-of-place)"
    )
    p.add_argument(
        "--holdout",
        action="store_true",
        help="also report each log predicted from the other logs only",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run_comm)


def log_cluster(log: NcclTestsLog, args: argparse.Namespace) -> Cluster:
    """The cluster a log ran on, as far as it and the options tell."""
    gpu = gpu_preset(args.gpu, where="--gpu").name if args.gpu is not None else None
    if gpu is None:
        names = log.device_names
        spec = match_gpu(names[0]) if len(names) == 1 else None
        if spec is None:
            raise ConfigError(
                f"no GPU preset matches the log's devices {', '.join(names)}",
                path=log.path,
                hint="name the GPU with --gpu (e.g. --gpu A100-SXM4-40GB)",
            )
        gpu = spec.name
    sets = parse_sets(args.set)
    counts = log.ranks_per_host
    given = sets.pop("gpus_per_node", None)
    where = "--set gpus_per_node"
    if args.gpus_per_node is not None:
        given, where = str(args.gpus_per_node), "--gpus-per-node"
    # 0 and a value that was not a number read as "not given" (and int("1.5") a traceback).
    gpn = (
        int(ClusterKeys.check("gpus_per_node", given, where=where))
        if given is not None
        else max(counts)
    )
    nodes = sets.pop("nodes", None)
    if nodes is not None and ClusterKeys.check("nodes", nodes, where="--set nodes") != len(counts):
        raise UsageError(
            f"--set nodes={nodes}: the log ran on {len(counts)} host(s), which are the nodes",
            path=log.path,
            hint="leave nodes out: it is read from the log",
        )
    if max(counts) > gpn:
        raise ConfigError(
            f"{max(counts)} ranks ran on one host but nodes have {gpn} GPUs",
            path=log.path,
            where="cluster.gpus_per_node",
        )
    cluster = make_cluster(
        gpu, gpus_per_node=gpn, nodes=len(counts), nic_gbytes_per_s=nic_option(args)
    )
    return cluster.with_overrides(sets)


def measurements_from_log(
    log: NcclTestsLog, cluster: Cluster, *, in_place: bool = False
) -> list[Measurement]:
    """One measurement per row; each host's ranks fill one node of ``cluster``."""
    ranks: list[int] = []
    for host, count in enumerate(log.ranks_per_host):
        ranks += [host * cluster.gpus_per_node + i for i in range(count)]
    group = tuple(ranks)
    out = []
    # Twice the fastest link the cluster has: above it no collective runs (NVLS reductions in
    # the switch reach about 1.1x NVLink); a wrong --gpu or a damaged log does.
    links = [cluster.nvlink_bw] + ([cluster.nic_bytes_per_s_per_gpu] if len(ranks) > 1 else [])
    bound = 2 * max(links)
    factor = bus_factor(log.collective, len(ranks))
    too_fast: list[tuple[int, float]] = []
    for row in log.rows:
        t = row.in_place_time_ns if in_place else row.time_ns
        if t is None or t <= 0 or row.nbytes <= 0:
            continue
        busbw = row.nbytes * factor / (t * 1e-9)
        if busbw > bound:
            too_fast.append((row.line, busbw))
        out.append(
            Measurement(
                kind=log.collective,
                nbytes=row.nbytes,
                time_ns=t,
                ranks=group,
                cluster=cluster,
                gpus_per_thread=log.gpus_per_thread,
                source=Path(log.path).name,
                line=row.line,
            )
        )
    if too_fast:
        line, busbw = too_fast[0]
        warnings.warn(
            f"{Path(log.path).name}: {len(too_fast)} row(s) move data faster than twice the "
            f"{cluster.gpu.name}'s {max(links) / 1e9:g} GB/s links (first at line {line}: "
            f"busbw {busbw / 1e9:,.0f} GB/s); check --gpu and the log",
            InputNote,
            stacklevel=2,
        )
    return out


def read_logs(args: argparse.Namespace) -> list[Measurement]:
    collective = parse_collective(args.collective) if args.collective else None
    measurements: list[Measurement] = []
    names: set[str] = set()
    for path in args.logs:
        if path.name in names:
            raise UsageError(f"two logs are named {path.name}; errors are reported per file name")
        names.add(path.name)
        log = parse_nccl_tests(path, collective=collective)
        measurements += measurements_from_log(log, log_cluster(log, args), in_place=args.in_place)
    if not measurements:
        raise UsageError("the logs hold no timed rows to fit")
    if len(measurements) > MAX_FIT_ROWS:
        raise UsageError(
            f"the logs hold {len(measurements):,} timed rows, more than the {MAX_FIT_ROWS:,} "
            "one fit takes (each costs time and memory in every iteration): fit on fewer logs"
        )
    if args.holdout and len(args.logs) * len(measurements) > MAX_HOLDOUT_ROW_FITS:
        raise UsageError(
            f"--holdout refits once per log: {len(args.logs):,} fits of up to "
            f"{len(measurements):,} rows is more than {MAX_HOLDOUT_ROW_FITS:,} rows in all "
            "(give fewer logs, or leave --holdout out)"
        )
    return measurements


#: Timed rows one fit takes: each is predicted in every iteration of the least squares (about
#: 0.2 ms a row for the whole fit here), so 20,000 rows take seconds; real logs hold tens each.
MAX_FIT_ROWS = 20_000

#: ``--holdout`` fits once per log left out: logs x rows is bounded so that it takes about as
#: long as ten full fits.
MAX_HOLDOUT_ROW_FITS = 10 * MAX_FIT_ROWS


def run_comm(args: argparse.Namespace, registry: Registry) -> int:
    del registry
    if args.output.suffix.lower() != ".toml":
        raise UsageError(f"the output must be a .toml file, got {args.output.name}")
    measurements = read_logs(args)
    fitter = fit_nccl if args.model == "nccl" else fit_alphabeta
    sources = [p.name for p in args.logs]
    if args.holdout and len(sources) < 2:  # (before the fit, not after it)
        raise UsageError("--holdout needs at least two logs")
    result = fitter(measurements, source=f"calibrated on {', '.join(sources)}")
    if len(result.fitted) >= len(measurements):  # (a one-row log "fitted" 5 at 0.0% error)
        warnings.warn(
            f"{len(result.fitted)} constant(s) fitted to {len(measurements)} row(s): the fit "
            "reproduces them and says little beyond; give logs of more sizes",
            InputNote,
            stacklevel=2,
        )
    holdout = None
    if args.holdout:
        holdout = leave_one_out(measurements, fitter)
    model: NcclModel | AlphaBetaModel
    if isinstance(result.params, CommParams):
        model = NcclModel(result.params)
    else:
        model = AlphaBetaModel(result.params)
    toml = comm_model_to_toml(model, _fit_table(result, holdout, args))
    with atomic_output(args.output) as tmp:
        tmp.write_text(toml, encoding="utf-8")
    if args.json:
        sys.stdout.write(json_text(_report_json(result, holdout, args)))
    else:
        _render(result, holdout, args, console())
    return 0


def _fit_table(
    result: FitResult, holdout: dict[str, ErrorStats] | None, args: argparse.Namespace
) -> dict[str, Any]:
    logs = list(result.errors)
    table: dict[str, Any] = {
        "echo_view_version": __version__,
        "logs": logs,
        "column": "in-place" if args.in_place else "out-of-place",
        "fitted": list(result.fitted),
        "mae_ge_1mib": [_num(result.errors[k].mae_large) for k in logs],
        "mae_lt_1mib": [_num(result.errors[k].mae_small) for k in logs],
    }
    if holdout is not None:
        table["holdout_mae_ge_1mib"] = [_num(holdout[k].mae_large) for k in logs]
        table["holdout_mae_lt_1mib"] = [_num(holdout[k].mae_small) for k in logs]
    return table


def _num(x: float) -> float:
    return -1.0 if math.isnan(x) else round(x, 5)


def _report_json(
    result: FitResult, holdout: dict[str, ErrorStats] | None, args: argparse.Namespace
) -> dict[str, Any]:
    return {
        "schema": json_schema("calibrate-comm"),
        "output": str(args.output),
        "model": args.model,
        "params": result.params.flat(),
        "fitted": list(result.fitted),
        "iterations": result.iterations,
        "fit": {k: _clean(v.as_dict()) for k, v in result.errors.items()},
        "holdout": None
        if holdout is None
        else {k: _clean(v.as_dict()) for k, v in holdout.items()},
    }


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}%"


def _render(
    result: FitResult,
    holdout: dict[str, ErrorStats] | None,
    args: argparse.Namespace,
    console: Console,
) -> None:
    table = Table(box=box.SIMPLE_HEAD, title="mean absolute error of the fitted model")
    cols: Sequence[str] = ["log", "rows", ">= 1 MiB", "< 1 MiB", "worst"]
    if holdout is not None:
        cols = [*cols, "held out >= 1 MiB", "held out < 1 MiB"]
    for c in cols:
        table.add_column(c, justify="left" if c == "log" else "right")
    for name, e in result.errors.items():
        row = [
            markup_safe(name),
            str(e.count_large + e.count_small),
            _pct(e.mae_large),
            _pct(e.mae_small),
            f"{_pct(e.worst)} at {format_bytes(e.worst_nbytes)}",
        ]
        if holdout is not None:
            row += [_pct(holdout[name].mae_large), _pct(holdout[name].mae_small)]
        table.add_row(*row)
    console.print(table)
    console.print(
        f"fitted {len(result.fitted)} constants in {result.iterations} iterations: "
        + ", ".join(f"{k}={result.params.flat()[k]:.4g}" for k in result.fitted)
    )
    console.print(f"wrote {markup_safe(str(args.output))}")
