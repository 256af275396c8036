"""Collective model accuracy against nccl-tests: regenerates the tables of the "Collective (NCCL)
model versus nccl-tests" section of docs/accuracy.md.

    python bench/comm_accuracy.py [LOG_DIR]   (default: samples/echo_nccl_tests)

For every all-reduce log of Echo's Azure ND A100 v4 runs (1-128 GPUs) it prints the mean
absolute relative error of the predicted time, per log, for messages from 1 MiB and below:

- NCCL's own tuning model (tuning.cc v2.22.3 constants, datasheet bandwidths), as is;
- the plain alpha-beta baseline and echo-view's NCCL-like model, each calibrated the same way,
  in-sample (fitted on all multi-rank logs) and held out (each log predicted by constants
  fitted on the other logs only);
- the NCCL-like model with NCCL's own algorithm choice instead of the fastest.

The one-rank log (a local copy, busbw 0 by definition) is reported on its own.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from echo_view.cli.calibrate import measurements_from_log
from echo_view.sim.calibrate.comm import (
    ErrorStats,
    FitResult,
    Measurement,
    error_stats,
    fit_alphabeta,
    fit_nccl,
    leave_one_out,
    predicted_us,
)
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import CommParams, NcclModel
from importers.nccl_tests import parse_nccl_tests

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "samples" / "echo_nccl_tests"


def load(directory: Path) -> dict[int, list[Measurement]]:
    """Measurements per log, keyed by rank count. Azure NDv4: 8 A100-SXM4-40GB per node on
    NVSwitch, one 200 Gb/s HDR InfiniBand port per GPU, AMD EPYC 7V12 hosts."""
    out: dict[int, list[Measurement]] = {}
    for path in sorted(directory.glob("nccl_*.log")):
        log = parse_nccl_tests(path)
        counts = log.ranks_per_host
        cluster = make_cluster(
            "A100-SXM4-40GB", gpus_per_node=max(counts), nodes=len(counts), nic_gbytes_per_s=25
        ).with_overrides({"cpu": "amd"})
        out[log.nranks] = measurements_from_log(log, cluster)
    return dict(sorted(out.items()))


def nccl_own(data: Sequence[Measurement]) -> dict[str, ErrorStats]:
    """NCCL's tuning model: its own time for its own choice."""
    import numpy as np

    model = NcclModel()
    pred = np.array(
        [
            (est.nccl_time_ns or est.time_ns) / 1e3
            for m in data
            for est in [model.estimate(m.kind, m.nbytes, m.ranks, m.cluster)]
        ]
    )
    return error_stats(data, pred)


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def main(argv: Sequence[str]) -> int:
    directory = Path(argv[0]) if argv else DEFAULT_DIR
    if not directory.is_dir():
        print(f"no logs at {directory}", file=sys.stderr)
        return 2
    per_log = load(directory)
    multi = [m for n, ms in per_log.items() if n > 1 for m in ms]
    names = {n: ms[0].source for n, ms in per_log.items()}

    fitters: dict[str, Callable[[Sequence[Measurement]], FitResult]] = {
        "alpha-beta": fit_alphabeta,
        "echo-view": fit_nccl,
        "echo-view, NCCL's choice": partial(fit_nccl, start=CommParams(selection="nccl")),
    }
    columns: dict[str, dict[str, ErrorStats]] = {"NCCL tuning.cc": nccl_own(multi)}
    timings: dict[str, float] = {}
    fitted: dict[str, FitResult] = {}
    for label, fit in fitters.items():
        t0 = time.perf_counter()
        fitted[label] = fit(multi)
        timings[label] = time.perf_counter() - t0
        columns[f"{label} fit"] = fitted[label].errors
        columns[f"{label} held out"] = leave_one_out(multi, fit)

    for title, attr in ((">= 1 MiB", "mae_large"), ("< 1 MiB", "mae_small")):
        print(f"\nMean absolute error (%), messages {title}, out-of-place times\n")
        print("| log | ranks | " + " | ".join(columns) + " |")
        print("|---|---:|" + "---:|" * len(columns))
        for n, name in names.items():
            if n == 1:
                continue
            cells = [pct(getattr(col[name], attr)) for col in columns.values()]
            print(f"| {name} | {n} | " + " | ".join(cells) + " |")
        medians = [
            statistics.median(getattr(col[names[n]], attr) for n in names if n > 1)
            for col in columns.values()
        ]
        print("| median | | " + " | ".join(pct(m) for m in medians) + " |")
        worst = [
            max(getattr(col[names[n]], attr) for n in names if n > 1) for col in columns.values()
        ]
        print("| worst log | | " + " | ".join(pct(w) for w in worst) + " |")
        base = dict(zip(columns, medians, strict=True))
        print(
            f"\nmedian ratio echo-view / alpha-beta: in-sample "
            f"{base['echo-view fit'] / base['alpha-beta fit']:.2f}, held out "
            f"{base['echo-view held out'] / base['alpha-beta held out']:.2f}"
        )

    if 1 in per_log:
        one = per_log[1]
        result = fit_nccl([*multi, *one])
        stats = error_stats(one, predicted_us(NcclModel(result.params), one))[one[0].source]
        print(
            f"\none rank (local copy; fitted with all logs): >= 1 MiB {pct(stats.mae_large)} %, "
            f"< 1 MiB {pct(stats.mae_small)} %; hbm_eff {result.params.hbm_eff:.3f}"
        )

    best = fitted["echo-view"]
    print("\ncalibrated constants (all multi-rank logs):")
    for key in best.fitted:
        print(f"  {key} = {best.params.flat()[key]:.4g}")
    print("\ncalibration time (s): " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
