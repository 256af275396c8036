"""Speed of ``echo-view plan`` on GPT-175B on 1,024 H100 (samples/configs/gpt175b-1024xH100.toml),
every dimension searched.

    python bench/plan_bench.py [--sample N]          # every layout of N groups, in this process
    python bench/plan_bench.py --search [--workers 1,2] [--top K]

``--sample N`` (the mode older trees have too, so the same command compares them): enumerating
every layout and checking its memory, then tracing and simulating every layout of every k-th
chunk-key group (N groups), in this process, with the split between tracing chunks, building
graphs from them and simulating; the time for all the layouts that fit is extrapolated by
layouts (sample time x all layouts / sampled layouts) and printed as an extrapolation.

``--search``: the whole search as ``plan`` runs it (compute floors of every group, then the
layouts that can reach the ``--top`` fastest, in ascending floor order) on a local Dask cluster
of each worker count given (``echo_view.workers.dask_client``), one after the other: wall time,
the CPU time the workers and this process used, how many layouts were simulated and ruled out,
and whether every run ranked the same top layouts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.cli.plan import PlanGraphs, run_pruned  # noqa: E402
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
from echo_view.workers import dask_client  # noqa: E402

CONFIG = ROOT / "samples" / "configs" / "gpt175b-1024xH100.toml"


def _cpu_s() -> float:
    """CPU time of the calling process (user + system)."""
    t = os.times()
    return t.user + t.system


def sample(groups: list[Any], n_groups: int, fitting: int) -> None:
    from echo_view.tracing.chunks import ChunkCache
    from echo_view.tracing.roles import trace_workload

    step = max(1, len(groups) // n_groups)
    chosen = groups[::step][:n_groups]
    n = sum(len(g.candidates) for g in chosen)
    t_trace = t_build = t_sim = 0.0
    cpu0 = _cpu_s()
    for g in chosen:
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
    total = t_trace + t_build + t_sim
    cpu = _cpu_s() - cpu0
    print(
        f"in-process, {len(chosen)} groups ({n:,} layouts): trace chunks {t_trace:.1f} s, "
        f"build graphs {t_build:.1f} s, simulate {t_sim:.1f} s; {total:.1f} s, "
        f"{1000 * total / n:.0f} ms per layout; {1000 * cpu / n:.0f} ms CPU per layout"
    )
    print(
        f"EXTRAPOLATED to all {fitting:,} layouts ({len(groups):,} groups) from the sample: "
        f"{total * fitting / n / 60:.1f} min in-process"
    )


def search(base: Any, groups: list[Any], workers: list[int], top: int) -> None:
    tops: dict[int, list[str]] = {}
    for w in workers:
        with dask_client(None, w) as client:
            client.run(lambda: None)  # the workers are up before the clock starts
            cpu0 = sum(client.run(_cpu_s).values()) + _cpu_s()
            t = time.perf_counter()
            graphs = PlanGraphs(CONFIG, base)
            executor = client.get_executor(pure=False)
            simulated = ruled_out = 0
            reported: list[Any] = []
            for part, skipped, _ in run_pruned(executor, 2 * w, groups, graphs, top, False):
                if skipped < 0:
                    reported = part
                    break
                simulated += len(part)
                ruled_out += skipped
            wall = time.perf_counter() - t
            cpu = sum(client.run(_cpu_s).values()) + _cpu_s() - cpu0
        ranked = rank(reported)
        tops[w] = [r.layout for r in ranked[:top]]
        print(
            f"dask, {w} worker(s): {wall:.1f} s wall, {cpu:.1f} s CPU; {simulated:,} layouts "
            f"simulated, {ruled_out:,} ruled out; load {os.getloadavg()[0]:.1f}; "
            f"best {tops[w][0]} ({ranked[0].step_time_s:.3f} s)"
        )
    same = all(v == tops[workers[0]] for v in tops.values())
    print(f"same top {top} with every worker count: {same}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=16, help="groups to time in-process")
    ap.add_argument("--search", action="store_true", help="the whole search on Dask")
    ap.add_argument("--workers", default="1,2", help="worker counts for --search (1,2)")
    ap.add_argument("--top", type=int, default=10, help="layouts ranked exactly (10)")
    args = ap.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    t0 = time.perf_counter()
    base = retarget(load_config(CONFIG), 1024, None)
    valid, total, invalid = enumerate_layouts(base, DIMENSIONS)
    groups = group_by_chunks(check_memory(valid))
    fitting = sum(len(g.candidates) for g in groups)
    print(
        f"enumerated {total:,}, invalid {invalid:,}, valid {len(valid):,}, fit {fitting:,} "
        f"in {len(groups):,} chunk-key groups: {time.perf_counter() - t0:.2f} s"
    )
    if args.search:
        search(base, groups, [int(w) for w in args.workers.split(",")], args.top)
    else:
        sample(groups, args.sample, fitting)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
