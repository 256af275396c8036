"""Speed of ``echo-view plan`` on GPT-175B on 1,024 H100 (samples/configs/gpt175b-1024xH100.toml),
every dimension searched.

    python bench/plan_bench.py [--sample N | --full]

Times (1) enumerating every layout and checking its memory, then (2) tracing and simulating
the layouts that fit, grouped by chunk key as ``plan`` runs them: every group with ``--full``,
else every k-th group (N groups, all their layouts). Three ways: in this process (with the
split between tracing chunks, building graphs from them and simulating), then on a local Dask
cluster of 1 worker and of 2 workers in the same run (``echo_view.workers.dask_client``, the
tasks of ``plan``). A sample's time for all the layouts that fit is extrapolated by layouts
(sample wall time x all layouts / sampled layouts) and printed as an extrapolation.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.cli.plan import PlanGraphs, run_on_dask  # noqa: E402
from echo_view.loading import load_config  # noqa: E402
from echo_view.sim.plan import (  # noqa: E402
    DIMENSIONS,
    check_memory,
    enumerate_layouts,
    group_by_chunks,
    rank,
    retarget,
)
from echo_view.sim.runs import simulate_workload  # noqa: E402
from echo_view.tracing.chunks import ChunkCache  # noqa: E402
from echo_view.tracing.roles import trace_workload  # noqa: E402
from echo_view.workers import dask_client  # noqa: E402

CONFIG = ROOT / "samples" / "configs" / "gpt175b-1024xH100.toml"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=16, help="groups to time (every k-th)")
    ap.add_argument("--full", action="store_true", help="every group")
    args = ap.parse_args()
    t0 = time.perf_counter()
    base = retarget(load_config(CONFIG), 1024, None)
    valid, total, invalid = enumerate_layouts(base, DIMENSIONS)
    groups = group_by_chunks(check_memory(valid))
    t_enum = time.perf_counter() - t0
    fitting = sum(len(g.candidates) for g in groups)
    print(
        f"enumerated {total:,}, invalid {invalid:,}, valid {len(valid):,}, fit {fitting:,} "
        f"in {len(groups):,} chunk-key groups: {t_enum:.2f} s"
    )
    step = 1 if args.full else max(1, len(groups) // args.sample)
    sample = groups if args.full else groups[::step][: args.sample]
    n = sum(len(g.candidates) for g in sample)

    t_trace = t_build = t_sim = 0.0
    for g in sample:
        cache = ChunkCache()  # one per group, as a plan task has
        for cfg in g.candidates:
            kinds = len(cache)
            t = time.perf_counter()
            graph = trace_workload(cfg, cache)
            dt = time.perf_counter() - t
            if len(cache) == kinds:
                t_build += dt
            else:  # new chunk kinds traced (their graph's build included)
                t_trace += dt
            t = time.perf_counter()
            simulate_workload(cfg, graph)
            t_sim += time.perf_counter() - t
    inproc = t_trace + t_build + t_sim
    print(
        f"in-process, {len(sample)} groups ({n:,} layouts): trace chunks {t_trace:.1f} s, "
        f"build graphs {t_build:.1f} s, simulate {t_sim:.1f} s; {inproc:.1f} s, "
        f"{1000 * inproc / n:.0f} ms per layout"
    )
    walls: dict[int, float] = {}
    best: dict[int, str] = {}
    graphs = PlanGraphs(CONFIG, base)
    for workers in (1, 2):
        with dask_client(None, workers) as client:
            t = time.perf_counter()
            out = [r for part in run_on_dask(client, sample, graphs) for r in part]
            walls[workers] = time.perf_counter() - t
        best[workers] = rank(out)[0].layout
        print(
            f"dask, {workers} worker(s): {walls[workers]:.1f} s for {len(out):,} layouts "
            f"({1000 * walls[workers] / n:.0f} ms per layout); best {best[workers]}"
        )
    assert best[1] == best[2]
    print(f"2 workers vs 1: {walls[1] / walls[2]:.2f}x")
    if not args.full:
        scale = fitting / n
        print(
            f"EXTRAPOLATED to all {fitting:,} layouts ({len(groups):,} groups) from the "
            f"sample: {walls[2] * scale / 60:.1f} min with 2 workers, "
            f"{walls[1] * scale / 60:.1f} min with 1, {inproc * scale / 60:.1f} min in-process"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
