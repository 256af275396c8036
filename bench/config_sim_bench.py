"""Wall time and peak RSS of ``echo-view simulate CONFIG --json`` on the scale configs in
samples/configs (graphs from the shipped cache, no tracing), each run in its own process,
median of N runs (CPU time = user + system of the process, which other load on the machine
inflates less than wall time); and the time to trace one role of GPT-175B on the meta device.

    python bench/config_sim_bench.py [--repeat 3]
    python bench/config_sim_bench.py --all-ranks 512,2048,8192 [--repeat 1]

``--all-ranks`` instead simulates every rank (``--ranks all``) of a small model on many GPUs:
the Megatron-LM CI sample ``megatron-ci-small/tp1-pp1-distopt.toml`` (data parallel only) with
its data parallelism and global batch scaled to each GPU count, written into ``bench/data/``;
where per-rank work once grew with the ranks (a pass over every op, or over every rank of the
data-parallel group, per rank), these times grew with the square of the GPU count.

Echo's published simulation times (arXiv 2412.12487, Table 8) are printed beside ours for
scale: 83.4 s for 128 GPUs, 718.7 s for 1,024 and 4,976.9 s for 8,192.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("echo-gpt175b-96xH800.toml", 96, 83.4, "Echo @128 GPUs"),
    ("gpt175b-1024xH100.toml", 1024, 718.7, "Echo @1,024 GPUs"),
    ("gpt175b-8192xH100.toml", 8192, 4976.9, "Echo @8,192 GPUs"),
]


def _cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _one(config: Path, *extra: str) -> tuple[float, float, float, float]:
    code = (
        "import resource, sys\n"
        "from echo_view.cli import main\n"
        "c = main()\n"
        "sys.stderr.write(f'RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}')\n"
        "raise SystemExit(c)\n"
    )
    exe = [sys.executable, "-c", code]
    t0, c0 = time.perf_counter(), _cpu_children()
    out = subprocess.run(
        [*exe, "simulate", str(config), "--json", *extra],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall, cpu = time.perf_counter() - t0, _cpu_children() - c0
    rss = int(out.stderr.rsplit("RSS ", 1)[1]) / 1024
    return wall, rss, json.loads(out.stdout)["step_time_s"], cpu


def _trace_role() -> tuple[float, float]:
    code = (
        "import time,resource,tomllib;"
        "from echo_view.model.config_parse import parse_workload_config;"
        "from echo_view.tracing.roles import trace_workload;"
        "p='samples/configs/echo-gpt175b-96xH800.toml';"
        "c=parse_workload_config(tomllib.load(open(p,'rb')));t=time.perf_counter();"
        "g=trace_workload(c);d=time.perf_counter()-t;"
        "print(d/len(g.roles), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
    )
    per_role, rss = out.stdout.split()
    return float(per_role), float(rss)


def _wide(gpus: int) -> Path:
    """The Megatron-LM CI tp1-pp1 sample on ``gpus`` GPUs (8 a node, 4 sequences a GPU)."""
    text = (ROOT / "samples/configs/megatron-ci-small/tp1-pp1-distopt.toml").read_text()
    text = text.split("[reference]")[0]
    for old, new in (("dp = 8", f"dp = {gpus}"), ("nodes = 1", f"nodes = {gpus // 8}"),
                     ("global = 32", f"global = {4 * gpus}")):  # fmt: skip
        assert f"\n{old}" in text, old
        text = text.replace(f"\n{old}", f"\n{new}", 1)
    path = ROOT / "bench" / "data" / f"wide-tp1-pp1-{gpus}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _all_ranks(counts: list[int], repeat: int) -> None:
    print("| GPUs | wall s (median) | CPU s (median) | peak RSS MB (max) | predicted step s |")
    print("|---:|---:|---:|---:|---:|")
    for gpus in counts:
        runs = [_one(_wide(gpus), "--ranks", "all") for _ in range(repeat)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[3] for r in runs)
        rss = max(r[1] for r in runs)
        print(f"| {gpus:,} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {runs[0][2]:.4f} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--all-ranks", help="GPU counts, e.g. 512,2048: every rank simulated")
    args = ap.parse_args()
    if args.all_ranks:
        _all_ranks([int(n) for n in args.all_ranks.split(",")], args.repeat)
        return 0
    print(
        "| config | GPUs | wall s (median) | CPU s (median) | peak RSS MB (max) "
        "| predicted step s | Echo's time |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, gpus, echo_s, label in CASES:
        runs = [_one(ROOT / "samples" / "configs" / name) for _ in range(args.repeat)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[3] for r in runs)
        rss = max(r[1] for r in runs)
        print(
            f"| {name} | {gpus} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {runs[0][2]:.3f} | "
            f"{echo_s} s ({label}) |"
        )
    per_role, rss = _trace_role()
    print(f"\ntracing GPT-175B (96 H800 layout), per role: {per_role:.2f} s, peak RSS {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
