"""Kineto JSON import: throughput and peak memory of echo-view vs ``json.load`` vs HTA.

Inputs:

1. the largest real Kineto sample (``../shared/data/hta-tests/df_index_resolver``, gzip, 53.7 MB
   of JSON), when ``../shared`` is present;
2. a trace of at least ``--size-mb`` MB (default 200) made from that sample (or the largest one
   in ``samples/``) by replicating its events with timestamps shifted past the previous copy and
   correlation / External id / flow ids shifted past the previous copy's, each event's text
   otherwise unchanged. It is written once to ``bench/data/`` (git-ignored) and reused.

Each measurement runs in its own subprocess; the parse is timed inside it and its peak RSS is
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (interpreter and imports included, for every
method alike). Methods:

- ``echo-view``: ``KinetoImporter().read([path])``, the whole import into a ``Job`` (gzip is
  inflated with ISA-L's ``isal`` when installed, a dependency of echo-view, else zlib);
- ``json.load``: the standard library on the decompressed text (no columns built);
- ``hta``: HolisticTraceAnalysis 0.5.0's ``parse_trace_dataframe`` with its default parser
  configuration (``ParserBackend.JSON``) - run with ``hta`` when it is importable here, else with
  ``.venv-hta/bin/python`` (``python3 -m venv .venv-hta && .venv-hta/bin/pip install
  holistictraceanalysis==0.5.0 'pandas<3'``); skipped when neither exists.

Throughput is MB (10**6 bytes) of uncompressed JSON per second; medians of ``--runs`` runs.

    python bench/import_bench.py [--runs 3] [--size-mb 200] [--no-hta]
"""

from __future__ import annotations

# Only what every worker needs is imported here: each worker's peak RSS then counts its own
# method's imports (json/gzip for json.load), not the harness's (argparse, subprocess...).
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from decimal import Decimal

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"
REAL = ROOT.parent / "shared/data/hta-tests/df_index_resolver/df_index_resolver.json.gz"
FALLBACK = ROOT / "samples/hta_nccl/nccl_data.json.gz"
HTA_VENV = ROOT / ".venv-hta" / "bin" / "python"

_TS = re.compile(rb'("ts"\s*:\s*)(-?[0-9.eE+-]+)')
_IDS = re.compile(rb'("(?:id|correlation|External id|external id)"\s*:\s*)(-?\d+)(?=[\s,}])')


# -- data ---------------------------------------------------------------------------------


def _shift_number(text: bytes, shift: Decimal) -> bytes:
    from decimal import Decimal

    value = Decimal(text.decode()) + shift
    if "." not in text.decode() and "e" not in text.decode().lower():
        return str(int(value)).encode()
    return f"{value:.3f}".encode()


def replicate(src: Path, dst: Path, target_bytes: int) -> None:
    """Write ``dst``: ``src``'s events repeated until ``target_bytes``, each copy shifted."""
    from decimal import Decimal

    sys.path.insert(0, str(ROOT))
    import msgspec

    from importers.chrome_json import read_container

    with read_container(src) as c:
        raws = [bytes(r) for chunk in c.chunks(msgspec.Raw) for r in chunk.events]
        top = c.top
    docs = [msgspec.json.decode(r) for r in raws]
    ts = [Decimal(str(d["ts"])) for d in docs if "ts" in d and d.get("ph") != "M"]
    ends = [
        Decimal(str(d["ts"])) + Decimal(str(d.get("dur", 0)))
        for d in docs
        if "ts" in d and d.get("ph") != "M"
    ]
    span = max(ends) - min(ts) + 1000  # 1 ms gap between copies
    ids = [int(m.group(2)) for r in raws for m in _IDS.finditer(r)]
    id_span = max(ids) + 1 if ids else 0
    size = sum(len(r) for r in raws)
    copies = max(1, -(-target_bytes // size))
    meta = [r for r, d in zip(raws, docs, strict=True) if d.get("ph") == "M"]
    body = [r for r, d in zip(raws, docs, strict=True) if d.get("ph") != "M"]
    tmp = dst.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        out.write(b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n  ')
        out.write(b",\n  ".join(meta))
        for k in range(copies):
            shift = span * k
            id_shift = id_span * k

            def ts_sub(m: re.Match[bytes], shift: Decimal = shift) -> bytes:
                return m.group(1) + _shift_number(m.group(2), shift)

            def id_sub(m: re.Match[bytes], id_shift: int = id_shift) -> bytes:
                return m.group(1) + str(int(m.group(2)) + id_shift).encode()

            part = [_IDS.sub(id_sub, _TS.sub(ts_sub, r)) if k else r for r in body]
            out.write(b",\n  " + b",\n  ".join(part))
        out.write(b"\n  ]")
        for key, value in top.items():
            if key != "schemaVersion":
                out.write(b',\n  "%s": %s' % (key.encode(), msgspec.json.encode(value)))
        out.write(b"\n}\n")
    os.replace(tmp, dst)


def big_trace(size_mb: int) -> Path:
    src = REAL if REAL.exists() else FALLBACK
    dst = DATA / f"{src.name.split('.')[0]}_x{size_mb}MB.json"
    if not dst.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        print(f"writing {dst.relative_to(ROOT)} from {src.name} ...", flush=True)
        replicate(src, dst, size_mb * 10**6)
    return dst


def text_size(path: Path) -> int:
    import gzip

    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            n += len(block)
    return n


# -- workers (one per subprocess) ---------------------------------------------------------


def worker(method: str, path: str) -> None:
    import gc
    import json
    import resource

    if method == "echo-view":
        sys.path.insert(0, str(ROOT))
        from importers.kineto import KinetoImporter

        t0, c0 = time.perf_counter(), time.process_time()
        job = KinetoImporter().read([Path(path)])
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        events = job.event_count()
    elif method == "json.load":
        import gzip

        t0, c0 = time.perf_counter(), time.process_time()
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gz else open(path, "rb") as fh:
            doc = json.load(fh)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        events = len(doc["traceEvents"] if isinstance(doc, dict) else doc)
    elif method == "hta":
        import logging

        logging.disable(logging.WARNING)
        from hta.common.trace_parser import parse_trace_dataframe
        from hta.configs.parser_config import ParserConfig

        t0, c0 = time.perf_counter(), time.process_time()
        _, df, _ = parse_trace_dataframe(path, ParserConfig())
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        events = len(df)
    else:
        raise SystemExit(f"unknown method {method}")
    gc.collect()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "cpu": cpu, "rss": rss, "events": events}))


def hta_python() -> str | None:
    try:
        import hta  # noqa: F401

        return sys.executable
    except ImportError:
        return str(HTA_VENV) if HTA_VENV.exists() else None


def run_once(python: str, method: str, path: Path) -> dict[str, float]:
    import json
    import subprocess

    out = subprocess.run(
        [python, __file__, "--worker", method, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- main ---------------------------------------------------------------------------------


def bench(path: Path, runs: int, with_hta: bool) -> None:
    import statistics

    size = text_size(path)
    print(f"\n{path.name}: {size / 1e6:.1f} MB of JSON ({path.stat().st_size / 1e6:.1f} MB file)")
    methods = [("echo-view", sys.executable), ("json.load", sys.executable)]
    hta = hta_python() if with_hta else None
    if hta is not None:
        methods.append(("hta", hta))
    elif with_hta:
        print("  (HTA not available: install .venv-hta, see the module docstring)")
    # Rounds run the methods back to back, so that a busy machine slows all of them alike;
    # ratios are taken per round, then the median.
    runs_of: dict[str, list[dict[str, float]]] = {m: [] for m, _ in methods}
    for _ in range(runs):
        for method, python in methods:
            runs_of[method].append(run_once(python, method, path))
    ours = runs_of["echo-view"]
    for method, _ in methods:
        rs = runs_of[method]
        walls = ", ".join(f"{r['seconds']:.2f}" for r in rs)
        t = statistics.median(r["seconds"] for r in rs)
        cpu = statistics.median(r["cpu"] for r in rs)
        m = statistics.median(r["rss"] for r in rs)
        print(
            f"  {method:10s} median {t:6.2f} s wall {size / 1e6 / t:6.1f} MB/s, "
            f"{cpu:6.2f} s CPU {size / 1e6 / cpu:6.1f} MB/s; peak RSS {m / 1e6:6.0f} MB "
            f"({m / size:.2f}x the JSON); {int(rs[0]['events'])} rows; "
            f"wall runs {walls}"
        )
    for other in ("json.load", "hta"):
        if other in runs_of:
            wall = statistics.median(
                o["seconds"] / e["seconds"] for o, e in zip(runs_of[other], ours, strict=True)
            )
            cpu = statistics.median(
                o["cpu"] / e["cpu"] for o, e in zip(runs_of[other], ours, strict=True)
            )
            rss = statistics.median(
                o["rss"] / e["rss"] for o, e in zip(runs_of[other], ours, strict=True)
            )
            print(
                f"  echo-view vs {other}: {wall:.2f}x the throughput (wall), "
                f"{cpu:.2f}x (CPU), {rss:.2f}x less peak RSS"
            )
    print(
        f"  echo-view peak RSS / JSON size: {statistics.median(r['rss'] for r in ours) / size:.2f}x"
    )


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--no-hta", action="store_true", help="skip HolisticTraceAnalysis")
    ap.add_argument("--worker", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    sys.path.insert(0, str(ROOT))
    from importers.chrome_json_text import INFLATER

    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, medians of {args.runs} runs; "
        f"echo-view inflates gzip with {INFLATER}, json.load and HTA with zlib (gzip module)"
    )
    if REAL.exists():
        bench(REAL, args.runs, not args.no_hta)
    bench(big_trace(args.size_mb), args.runs, not args.no_hta)


if __name__ == "__main__":
    main()
