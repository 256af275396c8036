"""HolisticTraceAnalysis 0.5.0's temporal breakdown through echo-view's adapter
(``job.to_hta()``, :mod:`echo_view.api.hta`) beside echo-view's own numbers under HTA's rules
(:mod:`echo_view.analysis.hta_compat`), on jobs HTA cannot read itself (Nsight exports) and on
Kineto ones. Prints one Markdown row per (job, rank, rounding); times in µs.

    .venv-hta/bin/python bench/hta_adapter.py [JOB ...]     # default: the Nsight and DLRM samples
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import echo_view as ev  # noqa: E402
from echo_view.analysis.hta_compat import hta_job_breakdown  # noqa: E402

DEFAULT_JOBS = (ROOT / "samples/nsys/h100_2gpu_1s.sqlite.gz", ROOT / "samples/dlrm_kineto")
COLUMNS = ("kernel_time(us)", "idle_time(us)", "compute_time(us)", "non_compute_time(us)")


def rows(path: Path) -> list[str]:
    job = ev.load(path)
    out = []
    for round_to_us in (True, False):
        tb = job.to_hta(round_to_us=round_to_us).get_temporal_breakdown(visualize=False)
        ours = {b.rank: b for b in hta_job_breakdown(job.model, round_to_us=round_to_us)}
        for _, r in tb.iterrows():
            b = ours[int(r["rank"])]
            mine = (b.window_ns, b.idle_ns, b.compute_ns, b.non_compute_ns)
            cells = [
                f"{float(r[c]):.3f} / {ns / 1e3:.3f}" for c, ns in zip(COLUMNS, mine, strict=True)
            ]
            worst = max(abs(float(r[c]) - ns / 1e3) for c, ns in zip(COLUMNS, mine, strict=True))
            pct = 100 * worst / (b.window_ns / 1e3) if b.window_ns else 0.0
            name = path.name.split(".")[0]
            rounding = "µs" if round_to_us else "exact"
            out.append(
                f"| {name} | {int(r['rank'])} | {rounding} | {' | '.join(cells)} | {pct:.4f} |"
            )
    return out


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    head = ("job", "rank", "times", "window", "idle", "compute", "non-compute", "largest diff %")
    print("| " + " | ".join(head) + " |")
    print("|---|---|---|---|---|---|---|---|")
    for path in [Path(a) for a in argv] or list(DEFAULT_JOBS):
        print("\n".join(rows(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
