"""``echo-view calibrate compute TRACE... -o compute.toml``: fit the kernel cost model to the
kernels of PyTorch profiler traces recorded with ``record_shapes=True``.

Each trace's GPU comes from its ``deviceProperties`` (matched to a preset; ``--gpu`` names it
when the trace does not, or overrides it). The traces of each GPU are fitted together
(:mod:`echo_view.sim.calibrate.compute`); the report gives per GPU the fitted parameters, the
in-sample error, the error on held-out ops and the error of the uncalibrated defaults on those
same ops. The TOML file holds one ``[gpu."NAME"]`` table of fitted parameters per GPU, read by
``echo-view simulate CONFIG.toml --compute FILE``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from echo_view import __version__
from echo_view.analysis.kernel_fit import KernelSamples, samples_of_jobs
from echo_view.cli.console import console
from echo_view.cli.parallel import add_parallel_options, parallel_of
from echo_view.cli.pathargs import output_arg, path_arg
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.errors import InputError, UsageError
from echo_view.formats import Progress, Registry, atomic_output, json_text, no_progress
from echo_view.loading import SERIAL, Parallel, read_job
from echo_view.model import Job
from echo_view.model.schema import json_schema
from echo_view.model.toml_file import dump_toml, significant
from echo_view.sim.calibrate.compute import Calibration, ErrorStats, calibrate
from echo_view.sim.cluster import GpuSpec, gpu_preset, match_gpu
from echo_view.sim.compute_presets import compute_params_for
from echo_view.text import markup_safe

_SHAPES_HINT = (
    "profile with torch.profiler.profile(..., record_shapes=True) so that each op records "
    "its Input Dims"
)


def register(subparsers: Any) -> None:
    """Add ``calibrate compute``."""
    p = subparsers.add_parser(
        "compute",
        help="fit the kernel cost model to the kernels of profiler traces",
        description="Fit the kernel cost model (GEMM, attention and memory efficiencies, "
        "shortest kernel) to the kernels of PyTorch profiler traces recorded with "
        "record_shapes=True, per GPU, and report its error on held-out ops. Writes the "
        "parameters as TOML for simulate --compute.",
    )
    p.add_argument(
        "traces", nargs="+", type=path_arg, metavar="TRACE", help="Kineto trace files or rank dirs"
    )
    p.add_argument("-o", "--output", type=output_arg, required=True, metavar="FILE.toml")
    p.add_argument(
        "--gpu",
        metavar="NAME",
        help="GPU preset of every trace (default: matched from each trace's devices)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_parallel_options(p)
    add_progress_option(p)
    p.set_defaults(func=run_compute)


def _sources(path: Path, job: Job) -> tuple[str, ...]:
    if len(job.traces) == 1:
        return (path.name,)
    names = tuple(Path(t.source).name for t in job.traces)
    if len(set(names)) == len(names) and all(names):
        return names
    return tuple(f"{path.name}#rank{t.rank}" for t in job.traces)


def read_samples(
    paths: list[Path],
    registry: Registry,
    parallel: Parallel = SERIAL,
    progress: Progress = no_progress,
) -> KernelSamples:
    """Every countable op of the traces (rank files read where ``parallel`` says); a one-line
    error when none recorded shapes."""
    jobs = [read_job([p], registry, progress, parallel) for p in paths]
    samples = samples_of_jobs(jobs, [_sources(p, j) for p, j in zip(paths, jobs, strict=True)])
    st = samples.stats
    where = paths[0] if len(paths) == 1 else None
    if st.kernels == 0:
        raise InputError("the traces hold no GPU kernels", path=where)
    if st.ops_with_shapes == 0:
        raise InputError(
            f"none of the {st.kernels} kernels was launched by an op with recorded shapes; "
            "the traces need record_shapes=True",
            path=where,
            hint=_SHAPES_HINT,
        )
    if not len(samples):
        raise InputError(
            f"{st.ops_with_shapes} ops recorded shapes, but none is a kind the cost model "
            "counts (matrix products, attention, elementwise, copies, layer norm)",
            path=where,
        )
    return samples


def by_gpu(
    samples: KernelSamples, gpu: str | None
) -> tuple[dict[str, tuple[GpuSpec, KernelSamples]], list[str]]:
    """The samples of each GPU preset, and the traces skipped for want of a known GPU."""
    forced = gpu_preset(gpu) if gpu is not None else None
    groups: dict[str, tuple[GpuSpec, list[int]]] = {}
    unknown: list[int] = []
    for i, (name, memory) in enumerate(samples.devices):
        spec = forced or (match_gpu(name, memory if memory > 0 else None) if name else None)
        if spec is None:
            unknown.append(i)
        else:
            groups.setdefault(spec.name, (spec, []))[1].append(i)
    skipped = sorted(
        {
            f"{samples.sources[int(t)]} ({samples.devices[int(d)][0] or 'no GPU named'})"
            for t, d in zip(samples.trace, samples.device, strict=True)
            if int(d) in unknown
        }
    )
    out = {
        name: (spec, samples.select(np.isin(samples.device, ids)))
        for name, (spec, ids) in sorted(groups.items())
    }
    return out, skipped


def run_compute(args: argparse.Namespace, registry: Registry) -> int:
    if args.output.suffix.lower() != ".toml":
        raise UsageError(f"the output must be a .toml file, got {args.output.name}")
    if args.gpu is not None:
        gpu_preset(args.gpu, where="--gpu")  # before the traces are read
    with stderr_progress(args) as progress:
        samples = read_samples(list(args.traces), registry, parallel_of(args), progress)
    groups, skipped = by_gpu(samples, args.gpu)
    if not groups:
        raise InputError(
            "no trace names a GPU this version has a preset for: " + ", ".join(skipped),
            hint="name it with --gpu (e.g. --gpu A100-SXM4-80GB)",
        )
    results = [calibrate(s, spec, compute_params_for(spec)) for spec, s in groups.values()]
    text = compute_toml(results)
    with atomic_output(args.output) as tmp:
        tmp.write_text(text, encoding="utf-8")
    if args.json:
        report = {
            "schema": json_schema("calibrate-compute"),
            "output": str(args.output),
            "gpus": {c.gpu: calibration_json(c) for c in results},
            "skipped": skipped,
        }
        sys.stdout.write(json_text(report))
    else:
        _render(results, skipped, args.output, console())
    return 0


def calibration_json(c: Calibration) -> dict[str, Any]:
    """A calibration as JSON-ready values."""
    h = c.holdout
    return {
        "params": c.fitted_values(),
        "defaults": {k: getattr(c.defaults, k) for k in c.fitted},
        "fitted": list(c.fitted),
        "traces": list(c.traces),
        "ops": c.ops,
        "shapes": c.shapes,
        "class_ops": c.class_ops,
        "class_shapes": c.class_shapes,
        "gemm_dtypes": list(c.gemm_dtypes),
        "in_sample": c.in_sample.as_dict(),
        "default_in_sample": c.default_in_sample.as_dict(),
        "holdout": None
        if h is None
        else {
            "split": h.split,
            "folds": h.folds,
            "fitted": h.fitted.as_dict(),
            "default": h.default.as_dict(),
            "by_class": {
                k: {"fitted": a.as_dict(), "default": b.as_dict()}
                for k, (a, b) in h.by_class.items()
            },
        },
    }


def compute_toml(results: list[Calibration]) -> str:
    """The TOML text of ``results``: per GPU its fitted parameters and a ``fit`` sub-table."""
    gpus: dict[str, Any] = {}
    for c in results:
        fit: dict[str, Any] = {
            "traces": list(c.traces),
            "ops": c.ops,
            "shapes": c.shapes,
            "gemm_dtypes": list(c.gemm_dtypes),
            "in_sample_median_abs_error": c.in_sample.median_abs,
            "in_sample_mean_abs_error": c.in_sample.mean_abs,
        }
        if c.holdout is not None:
            fit |= {
                "holdout_split": c.holdout.split,
                "holdout_ops": c.holdout.fitted.ops,
                "holdout_median_abs_error": c.holdout.fitted.median_abs,
                "holdout_mean_abs_error": c.holdout.fitted.mean_abs,
                "holdout_default_median_abs_error": c.holdout.default.median_abs,
                "holdout_default_mean_abs_error": c.holdout.default.mean_abs,
            }
        # Parameters at full precision (the file reproduces the fit exactly); the fit's
        # statistics to 6 digits.
        gpus[c.gpu] = {**c.fitted_values(), "fit": significant(fit)}
    return dump_toml(
        {"gpu": gpus},
        f"Kernel cost model parameters fitted by `echo-view calibrate compute` "
        f"(echo-view {__version__}).\n"
        "`echo-view simulate CONFIG.toml --compute FILE` applies the table of the config's\n"
        "GPU; parameters not listed keep that GPU's defaults (kernel_gap_ns, the idle time\n"
        "between kernels, is not visible in kernel durations and is never fitted here).",
    )


def _pair(e: ErrorStats | None) -> str:
    """``median / mean`` of the absolute errors, in percent."""
    if e is None or not e.ops:
        return "-"
    return f"{100 * e.median_abs:.1f} / {100 * e.mean_abs:.1f}"


def _render(results: list[Calibration], skipped: list[str], out: Path, console: Console) -> None:
    table = Table(
        box=box.SIMPLE_HEAD,
        title="kernel time error |predicted - measured| / measured, median / mean %",
    )
    cols = ["GPU", "traces", "ops", "shapes", "in-sample", "held out", "defaults, held out",
            "split"]  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col in ("GPU", "split") else "right")
    for c in results:
        h = c.holdout
        table.add_row(
            markup_safe(c.gpu),
            str(len(c.traces)),
            str(c.ops),
            str(c.shapes),
            _pair(c.in_sample),
            _pair(h.fitted if h else None),
            _pair(h.default if h else None),
            "-" if h is None else f"{h.split} x{h.folds}, {h.fitted.ops} ops",
        )
    console.print(table)
    for c in results:
        values = c.fitted_values()
        if not values:
            console.print(f"{markup_safe(c.gpu)}: too few shapes to fit; defaults kept")
            continue
        dtypes = f" [GEMMs: {', '.join(c.gemm_dtypes)}]" if c.gemm_dtypes else ""
        console.print(
            f"{markup_safe(c.gpu)}{markup_safe(dtypes)}: "
            + ", ".join(
                f"{k}={_short(v)} (default {_short(getattr(c.defaults, k))})"
                for k, v in values.items()
            )
        )
    if skipped:
        console.print("skipped (no known GPU; use --gpu): " + markup_safe(", ".join(skipped)))
    console.print(f"wrote {markup_safe(str(out))}")


def _short(v: float | int) -> str:
    return str(v) if isinstance(v, int) else f"{v:.4g}"
