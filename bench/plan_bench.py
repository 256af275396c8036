"""Speed of ``echo-view plan`` on GPT-175B on 1,024 H100 (samples/configs/gpt175b-1024xH100.toml),
every dimension searched.

    python bench/plan_bench.py [--sample N]

Times (1) enumerating every layout and checking its memory, then (2) tracing and simulating a
sample of the layouts that fit (every k-th graph group, N of them), three ways: in this process
(with the trace / simulate split), on a local Dask cluster of 1 worker and of 2 workers, each
with an empty graph cache (so every graph is traced, as on a first run). The time for all the
layouts that fit is extrapolated from the sample's mean per group.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.cli.plan import graph_of, run_on_dask  # noqa: E402
from echo_view.loading import load_config  # noqa: E402
from echo_view.sim.plan import (  # noqa: E402
    DIMENSIONS,
    check_memory,
    enumerate_layouts,
    group_by_graph,
    rank,
    retarget,
)
from echo_view.sim.runs import simulate_workload  # noqa: E402
from echo_view.workers import dask_client  # noqa: E402

CONFIG = ROOT / "samples" / "configs" / "gpt175b-1024xH100.toml"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=16)
    args = ap.parse_args()
    t0 = time.perf_counter()
    base = retarget(load_config(CONFIG), 1024, None)
    valid, total, invalid = enumerate_layouts(base, DIMENSIONS)
    cands = check_memory(valid)
    groups = group_by_graph(cands)
    t_enum = time.perf_counter() - t0
    fitting = sum(len(g.candidates) for g in groups)
    print(
        f"enumerated {total:,}, invalid {invalid:,}, valid {len(valid):,}, fit {fitting:,} "
        f"in {len(groups):,} graph groups: {t_enum:.2f} s"
    )
    step = max(1, len(groups) // args.sample)
    sample = groups[::step][: args.sample]
    n = sum(len(g.candidates) for g in sample)
    graph_for = partial(graph_of, config_path=CONFIG)

    with tempfile.TemporaryDirectory() as cache:
        os.environ["ECHO_VIEW_CACHE"] = cache
        t_trace = t_sim = 0.0
        serial = []
        for g in sample:
            t = time.perf_counter()
            graph = graph_for(g.candidates[0])
            t_trace += time.perf_counter() - t
            t = time.perf_counter()
            for cfg in g.candidates:
                serial.append((cfg, simulate_workload(cfg, graph).step_ns))
            t_sim += time.perf_counter() - t
    per = (t_trace + t_sim) / len(sample)
    print(
        f"in-process, {len(sample)} groups ({n} layouts): trace {t_trace:.1f} s, simulate "
        f"{t_sim:.1f} s, {per:.2f} s per group"
    )
    walls = {}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["ECHO_VIEW_CACHE"] = cache
            with dask_client(None, workers) as client:
                t = time.perf_counter()
                out = [r for part in run_on_dask(client, sample, graph_for) for r in part]
                walls[workers] = time.perf_counter() - t
        print(
            f"dask, {workers} worker(s): {walls[workers]:.1f} s for {len(out)} layouts "
            f"({walls[workers] / len(sample):.2f} s per group); best {rank(out)[0].layout}"
        )
    speedup = walls[1] / walls[2]
    full2 = walls[2] / len(sample) * len(groups)
    print(
        f"2 workers vs 1: {speedup:.2f}x; all {len(groups):,} groups extrapolated: "
        f"{full2 / 60:.0f} min with 2 workers, {per * len(groups) / 60:.0f} min in-process"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
