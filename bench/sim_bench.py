"""Simulator speed: simulated ops per second on large synthetic workloads, against a plain
``heapq`` loop over the same number of events measured in the same run; and the time to
replay the 8-rank DLRM sample.

Run: ``python bench/sim_bench.py [--ranks 64] [--layers 400] [--repeat 5]``.

Workloads:

- **replay-shaped**: per rank a CPU thread that launches every GPU op (launch -> kernel), a
  compute stream, a communication stream; data-parallel all-reduce buckets during backward
  (event waits both ways), a host sync at the end of each step. Every kernel has an outside
  dependency (its launch), so chain coarsening has almost nothing to merge.
- **graph-shaped**: the same kernels without CPU launches (a traced graph): long runs of
  kernels with no outside dependency, which the engine coarsens into chains.

The baseline pushes one entry per op onto a heap and pops them all (entries packed into one int,
as the engine packs them): the least work an event-heap simulator does per op, with no
dependency logic at all. Runs of the engine and the baseline are interleaved and the medians
reported, because the machine is shared.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from echo_view.model import CollectiveKind, EventKind, Lane, LaneKind, ProcessGroup, StringTable
from echo_view.model.workload import (
    CLASS_COLLECTIVE,
    CLASS_GEMM,
    CLASS_OTHER,
    CollectiveSpecs,
    DepKind,
    DepMode,
    DepTable,
    OpTable,
    StepMarks,
    Workload,
)
from echo_view.sim import engine

ROOT = Path(__file__).resolve().parents[1]


def synthetic(ranks: int, layers: int, steps: int, launches: bool, seed: int = 0) -> Workload:
    """A data-parallel training job of ``ranks`` ranks, ``layers`` layers, ``steps`` steps."""
    rng = np.random.default_rng(seed)
    # One rank's program, as (lane, kind, class, coll-slot) items in program order plus edges
    # between item indices; lanes: 0 CPU, 1 compute stream, 2 comm stream.
    lane: list[int] = []
    coll: list[int] = []
    edges: list[tuple[int, int, int, int, int]] = []  # src, dst, mode, lag, kind
    n_coll = 0
    last_kernel = -1
    last_coll = -1
    bucket = 8

    def item(ln: int, c: int = -1) -> int:
        lane.append(ln)
        coll.append(c)
        return len(lane) - 1

    def gpu_op(ln: int, c: int = -1) -> int:
        k = -1
        if launches:
            k = item(0)
        g = item(ln, c)
        if launches:
            edges.append((k, g, int(DepMode.START_TO_START), 5_000, int(DepKind.LAUNCH)))
        return g

    for _step in range(steps):
        for _ in range(layers):  # forward
            last_kernel = gpu_op(1)
        for j in range(layers):  # backward, all-reduce every `bucket` layers
            last_kernel = gpu_op(1)
            if j % bucket == bucket - 1:
                c = gpu_op(2, n_coll)
                n_coll += 1
                edges.append((last_kernel, c, int(DepMode.END_TO_START), 1_000, int(DepKind.EVENT)))
                last_coll = c
        first_opt = gpu_op(1)  # optimizer waits for the last all-reduce
        edges.append((last_coll, first_opt, int(DepMode.END_TO_START), 1_000, int(DepKind.EVENT)))
        last_kernel = first_opt
        for _ in range(layers // 4):
            last_kernel = gpu_op(1)
        if launches:
            sync = item(0)
            edges.append(
                (last_kernel, sync, int(DepMode.END_TO_END), 2_000, int(DepKind.HOST_SYNC))
            )
    per = len(lane)
    lane_a = np.array(lane, dtype=np.int64)
    coll_a = np.array(coll, dtype=np.int64)
    e = np.array(edges, dtype=np.int64).reshape(-1, 5)
    n = per * ranks
    rank = np.repeat(np.arange(ranks), per)
    op_lane = np.tile(lane_a, ranks) + 3 * rank
    is_cpu = np.tile(lane_a == 0, ranks)
    is_coll = np.tile(coll_a >= 0, ranks)
    dur = np.where(is_cpu, rng.integers(3_000, 8_000, n), rng.integers(10_000, 200_000, n))
    gap = np.where(is_cpu, rng.integers(5_000, 20_000, n), 1_000)
    off = np.repeat(np.arange(ranks) * per, len(e))
    strings = StringTable(["cudaLaunchKernel", "gemm", "ncclAllReduce"])
    name = np.where(is_cpu, 0, np.where(is_coll, 2, 1))
    release = np.full(n, -1)
    release[np.unique(op_lane, return_index=True)[1]] = 0
    lanes = []
    for r in range(ranks):
        lanes += [
            Lane(LaneKind.CPU_THREAD, r, "main", "main"),
            Lane(LaneKind.GPU_STREAM, r, 7, "stream 7", device=0, stream=7),
            Lane(LaneKind.GPU_STREAM, r, 13, "stream 13", device=0, stream=13),
        ]
    ops = OpTable(
        rank=rank,
        lane=op_lane,
        kind=np.where(is_cpu, int(EventKind.RUNTIME), int(EventKind.KERNEL)),
        op_class=np.where(is_cpu, CLASS_OTHER, np.where(is_coll, CLASS_COLLECTIVE, CLASS_GEMM)),
        name=name,
        dur_ns=dur,
        gap_ns=gap,
        release_ns=release,
        step=np.full(n, -1),
        coll=np.where(is_coll, np.tile(coll_a, ranks), -1),
        source=np.full(n, -1),
    )
    deps = DepTable.from_edges(
        n,
        np.tile(e[:, 0], ranks) + off,
        np.tile(e[:, 1], ranks) + off,
        np.tile(e[:, 2], ranks),
        np.tile(e[:, 3], ranks),
        np.tile(e[:, 4], ranks),
    )
    specs = CollectiveSpecs(
        kind=np.full(n_coll, int(CollectiveKind.ALL_REDUCE)),
        bytes=np.full(n_coll, 25 << 20),
        group=np.zeros(n_coll, dtype=np.int64),
        seq=np.arange(n_coll),
        measured_ns=rng.integers(50_000, 500_000, n_coll),
    )
    return Workload(
        strings=strings,
        lanes=tuple(lanes),
        lane_rank=np.repeat(np.arange(ranks), 3),
        ops=ops,
        deps=deps,
        collectives=specs,
        groups=(ProcessGroup("dp", tuple(range(ranks))),),
        steps=StepMarks.empty(),
        world_size=ranks,
    )


def heap_baseline(times: list[int]) -> None:
    """Push every op's completion once and pop them all, keys packed as the engine packs
    them (one int per event: the cheapest heap entry)."""
    heap: list[int] = []
    push, pop = heapq.heappush, heapq.heappop
    span = 2 * len(times)
    for i, t in enumerate(times):
        push(heap, t * span + i)
    while heap:
        divmod(pop(heap), span)


def medians_s(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median wall time of each function; runs are interleaved so that load from other
    processes on a shared machine falls on all of them alike."""
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            runs[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in runs.items()}


def median_s(fn: Callable[[], object], repeat: int) -> float:
    return medians_s({"x": fn}, repeat)["x"]


def bench_workload(label: str, wl: Workload, repeat: int) -> None:
    n = len(wl)
    dur, cdur = wl.ops.dur_ns, wl.collectives.measured_ns
    res = engine.run(wl, dur, cdur)
    times = res.end_ns.tolist()
    chained = engine._Graph(wl, wl.ops.gap_ns).chained
    t = medians_s(
        {
            "engine": lambda: engine.run(wl, dur, cdur),
            "engine, no coarsening": lambda: engine.run(wl, dur, cdur, coarsen=False),
            "heapq baseline": lambda: heap_baseline(times),
        },
        repeat,
    )
    print(f"{label}: {n:,} ops, {len(wl.deps):,} explicit deps, {len(wl.collectives):,} "
          f"collectives, {chained:,} chain links")  # fmt: skip
    for name, secs in t.items():
        print(f"  {name:<24} {secs:8.3f} s  {n / secs:>12,.0f} ops/s")
    base = t["heapq baseline"]
    print(f"  ratio engine / baseline: {t['engine'] / base:.2f}  "
          f"(no coarsening: {t['engine, no coarsening'] / base:.2f})")  # fmt: skip


def bench_dlrm(repeat: int) -> None:
    from echo_view.sim import predicted_job, simulate
    from echo_view.sim.replay import workload_from_job
    from importers.kineto import KinetoImporter

    path = ROOT / "samples" / "dlrm_kineto"
    t_import = median_s(lambda: KinetoImporter().read([path]), repeat)
    job = KinetoImporter().read([path])
    t_build = median_s(lambda: workload_from_job(job), repeat)
    wl = workload_from_job(job)
    t_sim = median_s(lambda: simulate(wl), repeat)
    sim = simulate(wl)
    origin = int(wl.meta["origin_ns"])
    t_out = median_s(lambda: predicted_job(wl, sim.result, job, origin), repeat)
    total = t_build + t_sim + t_out
    print(f"DLRM replay (8 ranks, {len(wl):,} ops, {job.event_count():,} events):")
    print(f"  import {t_import:.3f} s (not part of the replay)")
    print(f"  workload {t_build:.3f} s + simulate {t_sim:.3f} s + predicted job {t_out:.3f} s"
          f" = {total:.3f} s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--layers", type=int, default=800)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    for label, launches in (("replay-shaped", True), ("graph-shaped", False)):
        wl = synthetic(args.ranks, args.layers, args.steps, launches)
        bench_workload(label, wl, args.repeat)
    bench_dlrm(args.repeat)


if __name__ == "__main__":
    main()
