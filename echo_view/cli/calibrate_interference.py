"""``echo-view calibrate interference PATH... -o interference.toml``: fit the interference model
to measured jobs.

Measures the overlapped kernels of every PATH (:mod:`echo_view.cli.interference`), fits the
constant-per-class and the fitted model, evaluates both held out (``--split``: by job when two
or more jobs are given, else by step) and writes the better of the two by the held-out
duration-weighted error — the fitted model only when it beats the constant one; its solo-time
scale and shrink are tuned as in the evaluation (cross-validation over the same split). The
simulator reads the file with ``--set interference=FILE.toml``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from echo_view.cli.console import console
from echo_view.cli.interference import (
    SPLITS,
    _errors,
    check_split,
    load_samples,
    render,
    report,
    split_parts,
)
from echo_view.cli.parallel import add_parallel_options, parallel_of
from echo_view.cli.pathargs import output_arg, path_arg
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.errors import UsageError, warn_deprecated
from echo_view.formats import Registry, atomic_output, json_text
from echo_view.model.schema import json_schema
from echo_view.sim.interference import InterferenceModel, model_to_toml
from echo_view.sim.interference.evaluate import MODELS, holdout
from echo_view.sim.interference.fit import fit
from echo_view.sim.interference.measure import OverlapSamples
from echo_view.text import markup_safe


def register(subparsers: Any) -> None:
    """Add ``calibrate interference``."""

    p = subparsers.add_parser(
        "interference",
        help="fit the interference model to measured jobs with overlapping NCCL kernels",
        description="Fit how much compute kernels slow down beside NCCL kernels (a constant "
        "per kernel class, and a model of kernel and collective features), evaluate both on "
        "held-out data and write the better one as TOML.",
    )
    p.add_argument("paths", nargs="+", type=path_arg, metavar="PATH", help="measured jobs")
    p.add_argument("-o", "--output", type=output_arg, required=True, metavar="FILE.toml")
    p.add_argument(
        "--holdout",
        choices=SPLITS,
        help="held-out split, as in `echo-view interference --holdout` (default: job with two "
        "or more jobs, else step, else trace: the first with two parts)",
    )
    # The same option's earlier name, read for one more release.
    p.add_argument("--split", choices=SPLITS, dest="split_deprecated", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_parallel_options(p)
    add_progress_option(p)
    p.set_defaults(func=run)


def default_split(samples: OverlapSamples, paths: int) -> str:
    """``job`` with two or more inputs, else ``step``, else ``trace`` (the first with two
    parts: a one-step capture of 8 ranks has no second step, but has other ranks)."""
    for split in ("job", "step", "trace") if paths > 1 else ("step", "trace"):
        if split_parts(samples, split) >= 2:
            return split
    return "job" if paths > 1 else "step"


def run(args: argparse.Namespace, registry: Registry) -> int:
    if args.output.suffix.lower() != ".toml":
        raise UsageError(f"the output must be a .toml file, got {args.output.name}")
    with stderr_progress(args) as progress:
        samples = load_samples(args.paths, registry, parallel_of(args), progress)
    if len(samples) < 10:
        raise UsageError(
            f"only {len(samples)} overlapped kernels with a solo reference: too few to fit",
            hint="give traces where compute overlaps NCCL kernels and runs alone too",
        )
    if args.split_deprecated is not None:
        warn_deprecated("--split", "--holdout")
    split = args.holdout or args.split_deprecated or default_split(samples, len(args.paths))
    check_split(samples, split)
    errs, _ = holdout(samples, split)
    evaluation = {split: {m: _errors(errs[m]) for m in MODELS}}
    better = errs["fitted"].weighted_abs < errs["constant"].weighted_abs
    kind = "fitted" if better else "constant"
    sources = ", ".join(str(p) for p in args.paths)
    # The shipped fit is made the way the evaluated ones were: scale and shrink tuned by
    # cross-validation over the same kind of split.
    fitted = fit(samples, kind, tune_by=split)
    model = InterferenceModel(
        fitted, f"calibrated on {sources} ({len(samples)} kernels)", evaluation
    )
    with atomic_output(args.output) as tmp:
        tmp.write_text(model_to_toml(model), encoding="utf-8")
    rep = report(samples, None)
    rep["holdout"] = {"split": split, **evaluation[split]}
    rep["chosen"] = kind
    rep["output"] = str(args.output)
    if args.json:
        sys.stdout.write(json_text({"schema": json_schema("calibrate-interference"), **rep}))
    else:
        term = console(80, soft_wrap=True)
        render(rep, term)
        term.print(
            f"wrote the {kind} model to {markup_safe(str(args.output))}"
            + ("" if better else " (the fitted model did not beat the constant one held out)")
        )
        if errs[kind].weighted_abs >= errs["none"].weighted_abs:
            term.print(
                "note: held out, it does not beat ignoring interference on these traces "
                "(their overlapped kernels show no consistent slowdown)"
            )
    return 0
