"""Cross-check echo-view's GPU time breakdown against HolisticTraceAnalysis (HTA) 0.5.0.

For each job it runs HTA's ``get_temporal_breakdown`` and ``get_comm_comp_overlap`` and
recomputes both with echo-view (:mod:`echo_view.analysis.hta_compat`: HTA's window, step
filter and µs rounding on top of echo-view's interval arithmetic), then prints one Markdown
table row per (job, rank, quantity): HTA, echo-view, difference. It also prints echo-view's own
per-step breakdown of the same ranks, whose window differs from HTA's (see docs/accuracy.md).

HTA needs its own environment (jupyterlab, pandas<3):

    python3 -m venv .venv-hta
    .venv-hta/bin/pip install holistictraceanalysis==0.5.0 'pandas<3'
    .venv-hta/bin/pip install -e .
    .venv-hta/bin/python bench/hta_crosscheck.py [JOB ...]

A JOB is a trace file or a directory of trace files (one job); by default the samples and,
when present, a few real traces from ../shared.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.analysis.breakdown import breakdown  # noqa: E402
from echo_view.analysis.hta_compat import HtaBreakdown, hta_job_breakdown  # noqa: E402
from echo_view.model import Job  # noqa: E402

DEFAULT_JOBS = (
    ROOT / "samples" / "hta_nccl" / "nccl_data.json.gz",
    ROOT / "samples" / "dlrm_kineto",
    ROOT / "samples" / "hta_sampled_128",
)
#: Real traces from ../shared, compared too when present.
SHARED_JOBS = (
    ROOT.parent / "shared/data/hta-tests/negative_queue_length_values_check/rank0.json.gz",
    ROOT.parent / "shared/data/hta-tests/df_index_resolver/df_index_resolver.json.gz",
    ROOT.parent / "shared/data/hta-tests/trace_diff/control/control.json.gz",
    ROOT.parent / "shared/data/tracelens/mi300/resnet_act_checkpoint.json.gz",
)
QUANTITIES = ("window", "idle", "compute", "non_compute")


@dataclass(frozen=True)
class Row:
    """One compared quantity of one rank; times in µs, ``overlap`` in %."""

    job: str
    rank: int
    quantity: str
    hta: float
    ours: float
    ours_ns_exact: float
    window_us: float

    @property
    def diff(self) -> float:
        return self.ours - self.hta

    @property
    def diff_pct_of_window(self) -> float:
        """Difference in % of HTA's window (percentage points for ``overlap``)."""
        if self.quantity == "overlap":
            return self.diff
        return 100.0 * self.diff / self.window_us if self.window_us else 0.0


def trace_files(job: Path) -> list[Path]:
    """The trace files of a job path (a file, or every ``*.json``/``*.json.gz`` in a dir)."""
    if job.is_dir():
        return sorted(p for p in job.iterdir() if p.name.endswith((".json", ".json.gz")))
    return [job]


def run_hta(files: list[Path]) -> dict[int, dict[str, float]]:
    """HTA's numbers per rank: µs for the breakdown, % for the overlap."""
    logging.getLogger("hta").setLevel(logging.ERROR)
    from hta.configs.config import logger as hta_logger
    from hta.trace_analysis import TraceAnalysis

    hta_logger.setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        # HTA loads every trace file of a directory: give it exactly this job's files.
        for f in files:
            os.symlink(f.resolve(), Path(tmp) / f.name)
        ta = TraceAnalysis(trace_dir=tmp)
        tb = ta.get_temporal_breakdown(visualize=False)
        ov = ta.get_comm_comp_overlap(visualize=False)
    out: dict[int, dict[str, float]] = {}
    for _, r in tb.iterrows():
        out[int(r["rank"])] = {
            "window": float(r["kernel_time(us)"]),
            "idle": float(r["idle_time(us)"]),
            "compute": float(r["compute_time(us)"]),
            "non_compute": float(r["non_compute_time(us)"]),
        }
    for _, r in ov.iterrows():
        out[int(r["rank"])]["overlap"] = float(r["comp_comm_overlap_pctg"])
    return out


def read_job(files: list[Path]) -> Job:
    from importers.kineto import KinetoImporter

    return KinetoImporter().read(files)


def _ours(b: HtaBreakdown) -> dict[str, float]:
    return {
        "window": b.window_ns / 1e3,
        "idle": b.idle_ns / 1e3,
        "compute": b.compute_ns / 1e3,
        "non_compute": b.non_compute_ns / 1e3,
        "overlap": b.overlap_pct,
    }


def compare(job_path: Path) -> list[Row]:
    """HTA versus echo-view on one job."""
    files = trace_files(job_path)
    hta = run_hta(files)
    job = read_job(files)
    rounded = {b.rank: _ours(b) for b in hta_job_breakdown(job, round_to_us=True)}
    exact = {b.rank: _ours(b) for b in hta_job_breakdown(job, round_to_us=False)}
    name = job_path.name if job_path.is_dir() else job_path.name.split(".")[0]
    rows = []
    for rank in sorted(hta):
        window = hta[rank]["window"]
        for q in (*QUANTITIES, "overlap"):
            rows.append(Row(name, rank, q, hta[rank][q], rounded[rank][q], exact[rank][q], window))
    return rows


def per_step_lines(job_path: Path) -> list[str]:
    """echo-view's own per-step breakdown of the job, for context."""
    job = read_job(trace_files(job_path))
    lines = []
    for trace in job.traces:
        bd = breakdown(trace)
        if not len(bd):
            continue
        w = int(bd.window_ns.sum())
        parts = ", ".join(
            f"{n} {100 * int(getattr(bd, n + '_ns').sum()) / w:.2f}%"
            for n in ("compute", "exposed_comm", "memory", "idle")
        )
        name = job_path.name if job_path.is_dir() else job_path.name.split(".")[0]
        lines.append(f"| {name} | {trace.rank} | {len(bd)} | {w / 1e3:.1f} | {parts} |")
    return lines


def _cell(rows: dict[str, Row], q: str) -> str:
    r = rows[q]
    if q == "overlap":
        return f"{r.hta:.2f} / {r.ours:.2f}"
    return f"{r.hta:.0f} / {r.ours:.0f}"


def main(argv: list[str]) -> int:
    jobs = [Path(a) for a in argv] or [
        *DEFAULT_JOBS,
        *(p for p in SHARED_JOBS if p.exists()),
    ]
    results = [(job, compare(job)) for job in jobs]
    print("Agreement (HTA / echo-view with HTA's rules; times in µs, overlap in %):\n")
    print(
        "| job | rank | window | idle | compute | non-compute | comm overlapped (%) "
        "| largest diff (% of window) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for _, rows in results:
        for rank in sorted({r.rank for r in rows}):
            by = {r.quantity: r for r in rows if r.rank == rank}
            diff = max(abs(r.diff_pct_of_window) for q, r in by.items() if q != "overlap")
            worst = max(worst, diff)
            cells = " | ".join(_cell(by, q) for q in (*QUANTITIES, "overlap"))
            print(f"| {by['window'].job} | {rank} | {cells} | {diff:.4f} |")
    print(f"\nlargest difference: {worst:.4f} % of the window\n")
    print("Effect of HTA's whole-µs rounding (echo-view, % of the window, rounded -> exact ns):\n")
    print("| job | rank | idle | compute | non-compute | comm overlapped |")
    print("|---|---|---|---|---|---|")
    for _, rows in results:
        for rank in sorted({r.rank for r in rows}):
            by = {r.quantity: r for r in rows if r.rank == rank}
            w, we = by["window"].ours, by["window"].ours_ns_exact
            cells = [
                f"{100 * by[q].ours / w:.2f} -> {100 * by[q].ours_ns_exact / we:.2f}"
                for q in ("idle", "compute", "non_compute")
            ]
            cells.append(f"{by['overlap'].ours:.2f} -> {by['overlap'].ours_ns_exact:.2f}")
            print(f"| {by['window'].job} | {rank} | {' | '.join(cells)} |")
    print("\necho-view's own per-step breakdown (% of the summed step windows):\n")
    print("| job | rank | steps | step windows (µs) | breakdown |")
    print("|---|---|---|---|---|")
    for job, _ in results:
        for line in per_step_lines(job):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
