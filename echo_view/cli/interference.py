"""``echo-view interference PATH... [--json] [--holdout SPLIT]``: how much slower compute kernels
ran while communication kernels (NCCL, DeepEP) ran beside them on the same GPU.

Each PATH is a measured job (a trace file, or a directory of rank files). For every kernel class
the table gives the overlapped kernels that have a solo reference (the same kernel, by name and
launch configuration, running with no communication), their observed slowdown (median, p90),
their median overlap fraction, the collectives that overlapped them, and the full-overlap
slowdown of the constant model fitted to them. ``--holdout job|trace|step`` adds the held-out
duration errors of no interference, the constant model and the fitted model.

``--json`` keys (only ever added): ``inputs``, ``traces`` (``source``, ``samples``,
``comm_kernels``), ``classes`` (one object per class: ``class``, ``samples``, ``alone``,
``median_slowdown``, ``p90_slowdown``, ``median_overlap_fraction``, ``mostly_overlapped``
(samples overlapped >= 50%), ``mostly_median_slowdown``, ``mostly_p90_slowdown``,
``comm_kinds``, ``constant_factor``), ``holdout`` (split, then per model the
:class:`~echo_view.sim.interference.evaluate.Errors` fields) when asked.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from echo_view.cli.console import console
from echo_view.cli.parallel import add_parallel_options, parallel_of
from echo_view.cli.pathargs import path_arg
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.errors import UsageError
from echo_view.formats import Progress, Registry, json_text, no_progress
from echo_view.loading import SERIAL, Parallel, read_ranks
from echo_view.model.schema import json_schema
from echo_view.sim.compute import classify_kernel
from echo_view.sim.interference.evaluate import MODELS, Errors, holdout
from echo_view.sim.interference.fit import fit, folds
from echo_view.sim.interference.measure import OverlapSamples, class_table, measure_trace
from importers.folder import first_repeat

SPLITS = ("job", "trace", "step")


def register(subparsers: Any) -> None:
    """Add the ``interference`` sub-command."""
    p = subparsers.add_parser(
        "interference",
        description="Find compute kernels that overlapped a communication kernel on the same "
        "GPU, compare each with the same kernel running alone, and report the slowdown per "
        "kernel class.",
    )
    p.add_argument("paths", nargs="+", type=path_arg, metavar="PATH", help="measured jobs")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of tables")
    p.add_argument(
        "--holdout",
        choices=SPLITS,
        help="also report held-out errors of the models, split by job, trace or step",
    )
    add_parallel_options(p)
    add_progress_option(p)
    p.set_defaults(func=run)


def load_samples(
    paths: Sequence[Path],
    registry: Registry,
    parallel: Parallel = SERIAL,
    progress: Progress = no_progress,
) -> OverlapSamples:
    """Measure the overlapped kernels of every PATH, each rank where its file is read (as
    ``parallel`` says): only its samples come back, never the job's events."""
    names: set[str] = set()
    for path in paths:
        if str(path) in names:
            raise UsageError(f"{path} is given twice")
        names.add(str(path))
    # A file read as a rank of two jobs counted its kernels twice, and a held-out split by
    # job fitted and tested on them.
    listed = [(path, f) for path in paths for f in _files(path)]
    repeat = first_repeat([f for _, f in listed])
    if repeat is not None:
        (other, _), (_, file) = listed[repeat[0]], listed[repeat[1]]
        raise UsageError(f"{file} is given twice: it is also read as part of {other}")
    parts = []
    for path in paths:
        digest = partial(measure_trace, classify=classify_kernel, job_name=str(path))
        parts.extend(read_ranks([path], digest, registry, progress, parallel)[1])
    return OverlapSamples.concat(parts)


def _files(path: Path) -> list[Path]:
    """``path``, or the files in it when it is a folder (one that cannot be listed is named
    when it is read)."""
    try:
        return [f for f in path.iterdir() if f.is_file()] if path.is_dir() else [path]
    except OSError:
        return []


def report(samples: OverlapSamples, split: str | None) -> dict[str, Any]:
    """The command's JSON report (see the module docstring)."""
    const = fit(samples, "constant").class_factors() if len(samples) else {}
    traces = []
    for t, src in enumerate(samples.sources):
        traces.append(
            {
                "source": src,
                "samples": int((samples.cols["trace"] == t).sum()),
                "comm_kernels": int(samples.comm_kernels.get(t, 0)),
            }
        )
    classes = [
        {
            "class": r.op_class,
            "samples": r.samples,
            "alone": r.alone,
            "median_slowdown": _num(r.median_slowdown),
            "p90_slowdown": _num(r.p90_slowdown),
            "median_overlap_fraction": _num(r.median_fraction),
            "mostly_overlapped": r.mostly_samples,
            "mostly_median_slowdown": _num(r.mostly_median_slowdown),
            "mostly_p90_slowdown": _num(r.mostly_p90_slowdown),
            "comm_kinds": r.comm_kinds,
            "constant_factor": _num(const.get(r.op_class, math.nan)) if r.samples else None,
        }
        for r in class_table(samples)
    ]
    out: dict[str, Any] = {
        "inputs": sorted({s.split("#")[0] for s in samples.sources}),
        "samples": len(samples),
        "traces": traces,
        "classes": classes,
    }
    if split is not None:
        out["holdout"] = holdout_report(samples, split)
    return out


def split_parts(samples: OverlapSamples, split: str) -> int:
    """How many non-empty parts the held-out ``split`` cuts ``samples`` into."""
    return sum(bool(part.any()) for part in folds(samples, split))


def check_split(samples: OverlapSamples, split: str) -> None:
    """Refuse a held-out split with fewer than two parts: nothing is held out, and the
    table showed every model at "0 kernels"."""
    parts = split_parts(samples, split)
    if parts < 2:
        noun = {"job": "job", "trace": "trace", "step": "step, or only even or only odd steps"}
        where = f"one {noun[split]}" if parts else "no step" if split == "step" else "nowhere"
        raise UsageError(
            f"--holdout {split}: the overlapped kernels come from {where}; a held-out split "
            "needs two parts",
            hint="give traces of two jobs (job), two ranks (trace) or two steps (step)",
        )


def holdout_report(samples: OverlapSamples, split: str) -> dict[str, Any]:
    """Held-out errors per model, as plain numbers."""
    check_split(samples, split)
    errs, _ = holdout(samples, split)
    return {"split": split, **{m: _errors(errs[m]) for m in MODELS}}


def _errors(e: Errors) -> dict[str, Any]:
    return {k: _num(v) if isinstance(v, float) else v for k, v in e.as_dict().items()}


def _num(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 4)


def run(args: argparse.Namespace, registry: Registry) -> int:
    with stderr_progress(args) as progress:
        samples = load_samples(args.paths, registry, parallel_of(args), progress)
    rep = report(samples, args.holdout)
    if args.json:
        sys.stdout.write(json_text({"schema": json_schema("interference"), **rep}))
    else:
        render(rep, console(80, soft_wrap=True))
    return 0


_SHORT = {
    "all_reduce": "AR",
    "all_gather": "AG",
    "reduce_scatter": "RS",
    "send_recv": "SR",
    "send": "SR",
    "recv": "SR",
    "all_to_all": "A2A",
    "broadcast": "BC",
    "unknown": "?",
}


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def render(rep: dict[str, Any], console: Console) -> None:
    """The report as tables."""
    title = "slowdown of compute kernels overlapped by communication kernels"
    table = Table(box=box.SIMPLE_HEAD, title=title)
    for col in ("class", "kernels", "alone", "median", "p90", "overlap", "s", "collectives"):
        table.add_column(
            col,
            justify="left" if col in ("class", "collectives") else "right",
            no_wrap=col != "collectives",
            min_width=13 if col == "class" else None,
        )
    for c in rep["classes"]:
        kinds = " ".join(f"{_SHORT.get(k, k)}:{n}" for k, n in sorted(c["comm_kinds"].items()))
        table.add_row(
            c["class"],
            str(c["samples"]),
            str(c["alone"]),
            _f(c["median_slowdown"]),
            _f(c["p90_slowdown"]),
            _f(c["median_overlap_fraction"]),
            _f(c["constant_factor"]),
            kinds or "-",
        )
    console.print(table)
    used = [t for t in rep["traces"] if t["samples"]]
    console.print(
        f"{rep['samples']} overlapped kernels with a solo reference in {len(used)} of "
        f"{len(rep['traces'])} traces. kernels: overlapped, with a solo reference; alone: "
        "kernels that never overlapped; median, p90: slowdown = duration / solo duration; "
        "overlap: median share of the duration with communication active; s: full-overlap "
        "slowdown of the constant model; collectives: AR all-reduce, AG all-gather, "
        "RS reduce-scatter, SR send/recv, A2A all-to-all, BC broadcast, ? unknown"
    )
    if "holdout" in rep:
        h = rep["holdout"]
        t2 = Table(box=box.SIMPLE_HEAD, title=f"held-out duration error (split by {h['split']})")
        for col in ("model", "kernels", "weighted |err|", "median |err|", "total", "within 10%"):
            t2.add_column(col, justify="left" if col == "model" else "right")
        for m in MODELS:
            e = h[m]
            t2.add_row(
                m,
                str(e["samples"]),
                _pct(e["weighted_abs"]),
                _pct(e["median_abs"]),
                _pct(e["total"], sign=True),
                _pct(e["within_10"]),
            )
        console.print(t2)


def _pct(x: float | None, sign: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}%" if sign else f"{100 * x:.1f}%"
