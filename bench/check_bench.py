"""``echo-view check`` versus the Kineto import of the same file: time and peak memory.

Inputs are those of ``bench/import_bench.py`` (and its generated file is reused): the largest
real Kineto sample (``../shared/data/hta-tests/df_index_resolver``, gzip) when ``../shared`` is
present, and a trace of at least ``--size-mb`` MB (default 200) made from it by replicating its
events with shifted timestamps and ids, written once to ``bench/data/`` (git-ignored).

Each measurement runs in its own subprocess; the work is timed inside it and its peak RSS is
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (interpreter and imports included). Methods:

- ``import``: ``KinetoImporter().read([path])``, the baseline;
- ``check``: every file rule of ``echo-view check PATH`` (what the CLI runs for one file),
  streaming the file chunk by chunk through the container reader.

Targets: check time <= 2x the import time, check peak RSS <= 1.5x the JSON size. Medians of
``--runs`` runs.

    python bench/check_bench.py [--runs 3] [--size-mb 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from import_bench import REAL, big_trace, text_size  # noqa: E402


def worker(method: str, path: str) -> None:
    import gc
    import resource

    if method == "import":
        from importers.kineto import KinetoImporter

        t0 = time.perf_counter()
        job = KinetoImporter().read([Path(path)])
        seconds = time.perf_counter() - t0
        info = {"events": job.event_count()}
    elif method == "check":
        from echo_view.cli.check import check_json_file
        from echo_view.validate import Report

        t0 = time.perf_counter()
        report = Report()
        check_json_file(Path(path), report)
        seconds = time.perf_counter() - t0
        info = {"events": report.files[0].events, "findings": {t.code: t.count for t in report}}
    else:
        raise SystemExit(f"unknown method {method}")
    gc.collect()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "rss": rss, **info}))


def run_once(method: str, path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", method, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def bench(path: Path, runs: int) -> None:
    size = text_size(path)
    print(f"\n{path.name}: {size / 1e6:.1f} MB of JSON ({path.stat().st_size / 1e6:.1f} MB file)")
    med: dict[str, tuple[float, float]] = {}
    for method in ("import", "check"):
        times: list[float] = []
        rss: list[float] = []
        last: dict[str, object] = {}
        # Alternate nothing: runs of one method back to back, each in a fresh process.
        for _ in range(runs):
            last = run_once(method, path)
            times.append(float(last["seconds"]))  # type: ignore[arg-type]
            rss.append(float(last["rss"]))  # type: ignore[arg-type]
        t, m = statistics.median(times), statistics.median(rss)
        med[method] = (t, m)
        print(
            f"  {method:7s} median {t:6.2f} s  {size / 1e6 / t:6.1f} MB/s  peak RSS "
            f"{m / 1e6:5.0f} MB ({m / size:.2f}x the JSON)  {last['events']} events  "
            f"runs: {', '.join(f'{x:.2f}' for x in times)}"
        )
        if "findings" in last:
            print(f"          findings: {last['findings']}")
    (ti, _), (tc, mc) = med["import"], med["check"]
    print(f"  check time / import time: {tc / ti:.2f}x (target <= 2x)")
    print(f"  check peak RSS / JSON size: {mc / size:.2f}x (target <= 1.5x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--worker", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, medians of {args.runs} runs")
    if REAL.exists():
        bench(REAL, args.runs)
    bench(big_trace(args.size_mb), args.runs)


if __name__ == "__main__":
    main()
