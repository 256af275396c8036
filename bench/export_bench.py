"""Export speed against import speed of the same data (Perfetto JSON and pftrace).

The real 8-rank DLRM job in ``samples/dlrm_kineto`` is replicated in time (copies of each rank's
events, shifted past the previous copy, with correlation / External id / flow ids and step
numbers renumbered) until it holds at least ``--slices`` slices, and written as 8 plain Kineto
JSON files. The baseline is the Kineto importer reading those files; then the imported job is
exported to ``.json``, ``.json.gz`` and ``.pftrace``. Each step is timed ``--repeat`` times and
the medians and the export/import ratios are printed.

    python bench/export_bench.py [--slices 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.model import Job  # noqa: E402
from exporters.layout import build_layout  # noqa: E402
from exporters.perfetto_json import PerfettoJsonExporter  # noqa: E402
from exporters.perfetto_proto import PerfettoProtoExporter  # noqa: E402

SAMPLE = ROOT / "samples" / "dlrm_kineto"
ID_STRIDE = 10_000_000  # ids of copy k are shifted by k * ID_STRIDE


def replicate(src: Path, dst: Path, copies: int) -> int:
    """Write ``copies`` time-shifted copies of the events of Kineto file ``src`` to ``dst``."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events: list[dict[str, Any]] = doc["traceEvents"]
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    lo = min(float(e["ts"]) for e in timed)
    hi = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed)
    period = int(hi - lo) + 1000  # µs; the copies do not overlap
    out: list[dict[str, Any]] = [e for e in events if e.get("ph") == "M"]
    for k in range(copies):
        for e in timed:
            c = dict(e)
            c["ts"] = e["ts"] + k * period
            if "id" in c and isinstance(c["id"], int):
                c["id"] += k * ID_STRIDE
            args = c.get("args")
            if isinstance(args, dict):
                args = dict(args)
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int) and args[key] >= 0:
                        args[key] += k * ID_STRIDE
                c["args"] = args
            name = c.get("name", "")
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                c["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k}"
            out.append(c)
    doc["traceEvents"] = out
    dst.write_text(json.dumps(doc))
    return len(out)


def median_time(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    """Median wall and median CPU (process) seconds of ``repeat`` calls, and the last result.

    CPU time is reported too because on a shared machine the wall time also measures the
    other processes; CPU time mostly does not.
    """
    wall, cpu = [], []
    result: object = None
    for _ in range(repeat):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slices", type=int, default=1_000_000, help="at least this many")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    try:
        from importers.kineto import KinetoImporter
    except ImportError as exc:
        print(f"Kineto importer unavailable ({exc}); no baseline", file=sys.stderr)
        return 1
    files = sorted(SAMPLE.glob("*.json.gz"))
    per_copy = 0  # slices (X events) per copy of the job
    for f in files:
        events = json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]
        per_copy += sum(1 for e in events if e.get("ph") == "X")
    copies = -(-args.slices // per_copy)
    with tempfile.TemporaryDirectory(prefix="export_bench.") as tmp:
        d = Path(tmp)
        paths = []
        total = 0
        for f in files:
            p = d / f.name.removesuffix(".gz")
            total += replicate(f, p, copies)
            paths.append(p)
        size = sum(p.stat().st_size for p in paths)
        print(f"input: {len(paths)} Kineto files, {total} trace events, {size / 1e6:.0f} MB JSON")
        importer = KinetoImporter()
        t_import, c_import, job = median_time(lambda: importer.read(paths), args.repeat)
        assert isinstance(job, Job)
        slices = sum(int(r.is_slice.sum()) for r in build_layout(job).ranks)
        print(f"imported: {job.event_count()} events ({slices} slices), {len(job)} ranks")
        t_layout, c_layout, _ = median_time(lambda: build_layout(job), args.repeat)
        results = [("import (Kineto JSON, baseline)", t_import, c_import, size)]
        for name, exporter in (
            ("export .json", PerfettoJsonExporter()),
            ("export .json.gz", PerfettoJsonExporter()),
            ("export .pftrace", PerfettoProtoExporter()),
        ):
            out = d / ("out" + name.split()[-1])
            t, c, _ = median_time(lambda e=exporter, o=out: e.write(job, o), args.repeat)
            results.append((name, t, c, out.stat().st_size))
            os.unlink(out)
    print(
        f"\nmedians of {args.repeat} runs; layout alone (inside every export): "
        f"{t_layout:.2f} s wall, {c_layout:.2f} s CPU"
    )
    print(f"{'step':32} {'wall s':>7} {'x import':>9} {'CPU s':>7} {'x import':>9} {'MB':>6}")
    for name, t, c, nbytes in results:
        print(
            f"{name:32} {t:7.2f} {t / t_import:9.2f} {c:7.2f} {c / c_import:9.2f} "
            f"{nbytes / 1e6:6.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
