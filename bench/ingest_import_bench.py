"""Kineto import of both timestamp kinds vs ``json.load``, in the same run.

Two inputs of about ``--size-mb`` MB (default 200) of JSON, generated once into ``bench/data/``
(git-ignored) by :func:`import_bench.replicate` (events repeated, each copy's timestamps and
ids shifted past the previous copy's, every event's text otherwise as written):

- **integer µs**: from ``../shared/data/hta-tests/df_index_resolver`` (integer µs on an absolute
  epoch, as Kineto wrote before PyTorch 2.3);
- **fractional µs**: from ``../shared/data/hta-tests/ns_resolution_trace`` (absolute-epoch µs
  with three decimals, 19 significant digits, as recent PyTorch and ROCm write them; a double
  cannot hold them, so they are converted exactly from their text).

Each measurement runs in its own subprocess (:func:`import_bench.worker`: the parse timed inside
it, peak RSS from ``ru_maxrss``); rounds run both methods back to back and ratios are taken per
round, then the median.

    python bench/ingest_import_bench.py [--runs 3] [--size-mb 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import import_bench as ib

SHARED = ib.ROOT.parent / "shared/data/hta-tests"
INPUTS = {
    "integer µs": SHARED / "df_index_resolver/df_index_resolver.json.gz",
    "fractional µs": SHARED / "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
}


def generated(src: Path, size_mb: int) -> Path:
    dst = ib.DATA / f"{src.name.split('.')[0]}_x{size_mb}MB.json"
    if not dst.exists():
        ib.DATA.mkdir(parents=True, exist_ok=True)
        print(f"writing {dst.relative_to(ib.ROOT)} from {src.name} ...", flush=True)
        # In a subprocess: a worker forked from this process would otherwise report this
        # process's peak RSS as its own (Linux carries ru_maxrss across fork and exec).
        code = (
            "import sys; from pathlib import Path; import import_bench as ib; "
            "ib.replicate(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))"
        )
        argv = [sys.executable, "-c", code, str(src), str(dst), str(size_mb * 10**6)]
        subprocess.run(argv, check=True, cwd=Path(__file__).parent)
    return dst


def bench(kind: str, path: Path, runs: int) -> None:
    size = path.stat().st_size
    rounds: list[tuple[dict[str, float], dict[str, float]]] = []
    for _ in range(runs):
        ours = ib.run_once(sys.executable, "echo-view", path)
        base = ib.run_once(sys.executable, "json.load", path)
        rounds.append((ours, base))
    print(
        f"\n{kind}: {path.name}, {size / 1e6:.1f} MB of JSON, {int(rounds[0][1]['events'])} events"
    )
    for i, name in enumerate(("echo-view", "json.load")):
        wall = statistics.median(r[i]["seconds"] for r in rounds)
        cpu = statistics.median(r[i]["cpu"] for r in rounds)
        rss = statistics.median(r[i]["rss"] for r in rounds)
        walls = ", ".join(f"{r[i]['seconds']:.2f}" for r in rounds)
        print(
            f"  {name:9s} median {wall:6.2f} s wall ({size / 1e6 / wall:5.1f} MB/s), "
            f"{cpu:6.2f} s CPU; peak RSS {rss / 1e6:5.0f} MB ({rss / size:.2f}x the JSON); "
            f"wall runs {walls}"
        )
    wall_x = statistics.median(b["seconds"] / o["seconds"] for o, b in rounds)
    cpu_x = statistics.median(b["cpu"] / o["cpu"] for o, b in rounds)
    rss_x = statistics.median(o["rss"] / size for o, _ in rounds)
    print(
        f"  echo-view vs json.load: {wall_x:.2f}x (wall), {cpu_x:.2f}x (CPU); "
        f"echo-view peak RSS {rss_x:.2f}x the JSON"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=200)
    args = ap.parse_args()
    missing = [str(p) for p in INPUTS.values() if not p.exists()]
    if missing:
        raise SystemExit(f"needs ../shared (absent: {', '.join(missing)})")
    print(f"python {sys.version.split()[0]}, medians of {args.runs} rounds")
    for kind, src in INPUTS.items():
        bench(kind, generated(src, args.size_mb), args.runs)


if __name__ == "__main__":
    main()
