"""Speed of ``echo-view plan`` on GPT-175B on 1,024 H100 (samples/configs/gpt175b-1024xH100.toml),
every dimension searched.

    python bench/plan_bench.py [--sample N]          # every layout of N groups, in this process
    python bench/plan_bench.py --search [--workers 1,2] [--top K]

``--sample N`` (the mode older trees have too, so the same command compares them): enumerating
every layout and checking its memory, then tracing and simulating every layout of every k-th
chunk-key group (N groups), in this process, with the split between tracing chunks, building
graphs from them and simulating; the time for all the layouts that fit is extrapolated by
layouts (sample time x all layouts / sampled layouts) and printed as an extrapolation.

``--floors N``: the host part of the compute floor (``host_floor_ns``, whole arrays) against the
pass-by-pass walk it replaced (:class:`~echo_view.sim.host.IssueFold` over
:func:`~echo_view.sim.schedule.schedule`, as the simulator walks a stage), on every k-th of the
layouts that fit (N of them), with the same chunk-table costs; medians of three timings each, and
whether every floor agrees. ``--config FILE`` searches another config (``--gpus``).

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
from echo_view.sim.host import HostParams, IssueFold, PipeSyncs, issue_span_ns  # noqa: E402
from echo_view.sim.plan import (  # noqa: E402
    DIMENSIONS,
    check_memory,
    enumerate_layouts,
    group_by_chunks,
    rank,
    retarget,
)
from echo_view.sim.runs import simulate_workload  # noqa: E402
from echo_view.sim.schedule import schedule  # noqa: E402
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


def _walked_host_floor_ns(cfg: Any, graph: Any, costs: Any) -> int:
    """The host floor as the pass-by-pass walk (the baseline of ``--floors``)."""
    p = cfg.parallel
    host = HostParams()
    if not host.kernel_ns:
        return 0
    spans = {}
    for key, tc in costs.items():
        issue = host.issue_ns(tc.fills, tc.waits)
        spans[key] = (issue_span_ns(tc.dur_ns, issue), tc.total_ns, int(issue.sum()))
    best = 0
    for ri, role in enumerate(graph.roles):
        stage = role.stages[0]
        total, fold, syncs = 0, IssueFold(), PipeSyncs(p, stage)
        for ps in schedule(stage, p.pp, cfg.micro_batches, p.virtual_stages, p.microbatch_group):
            if syncs.before(ps):
                total, fold = total + fold.span_ns, IssueFold()
            fold.add(*spans[(ri, "forward" if ps.forward else "backward", ps.chunk)])
        if cfg.training.optimizer_sync and p.fsdp == "none":
            total, fold = total + fold.span_ns, IssueFold()
        fold.add(*spans[(ri, "optimizer", 0)])
        best = max(best, total + fold.span_ns)
    return best


def floors(config: Path, groups: list[Any], n: int) -> None:
    from echo_view.sim.cluster import cluster_from_config
    from echo_view.sim.comm.defaults import default_comm_model
    from echo_view.sim.compose import role_costs
    from echo_view.sim.compose_costs import CollectiveCache
    from echo_view.sim.compute_presets import compute_params_for
    from echo_view.sim.plan import host_floor_ns

    layouts = [cfg for g in groups for cfg in g.candidates]
    chosen = layouts[:: max(1, len(layouts) // n)][:n]
    base = groups[0].candidates[0]
    graphs = PlanGraphs(config, base)
    fast_s: list[float] = []
    walk_s: list[float] = []
    same = passes = 0
    for cfg in chosen:
        graph = graphs(cfg)
        cluster = cluster_from_config(cfg.cluster, cfg.source)
        colls = CollectiveCache(default_comm_model(), cluster)
        costs = role_costs(graph, cfg, colls, compute_params_for(cluster.gpu))
        timed = []
        for fn in (host_floor_ns, _walked_host_floor_ns):
            runs = []
            for _ in range(3):
                t = time.perf_counter()
                value = fn(cfg, graph, costs)
                runs.append(time.perf_counter() - t)
            timed.append((sorted(runs)[1], value))
        fast_s.append(timed[0][0])
        walk_s.append(timed[1][0])
        same += timed[0][1] == timed[1][1]
        passes += 2 * cfg.micro_batches * cfg.parallel.virtual_stages * len(graph.roles)
    fast, walk = sum(fast_s), sum(walk_s)
    print(
        f"host floors of {len(chosen):,} layouts ({passes:,} passes walked in all): arrays "
        f"{fast:.3f} s, pass by pass {walk:.3f} s, {walk / fast:.1f}x; median per layout "
        f"{1000 * sorted(fast_s)[len(fast_s) // 2]:.2f} ms vs "
        f"{1000 * sorted(walk_s)[len(walk_s) // 2]:.2f} ms; floors equal: {same}/{len(chosen)}"
    )


def search(base_path: Path, base: Any, groups: list[Any], workers: list[int], top: int) -> None:
    tops: dict[int, list[str]] = {}
    for w in workers:
        with dask_client(None, w) as client:
            client.run(lambda: None)  # the workers are up before the clock starts
            cpu0 = sum(client.run(_cpu_s).values()) + _cpu_s()
            t = time.perf_counter()
            graphs = PlanGraphs(base_path, base)
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
    ap.add_argument("--floors", type=int, help="time the host floor of N layouts")
    ap.add_argument("--config", type=Path, default=CONFIG, help="config to plan (GPT-175B)")
    ap.add_argument("--gpus", type=int, default=1024, help="GPUs to plan for (1024)")
    ap.add_argument("--workers", default="1,2", help="worker counts for --search (1,2)")
    ap.add_argument("--top", type=int, default=10, help="layouts ranked exactly (10)")
    args = ap.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    t0 = time.perf_counter()
    base = retarget(load_config(args.config), args.gpus, None)
    valid, total, invalid = enumerate_layouts(base, DIMENSIONS)
    groups = group_by_chunks(check_memory(valid))
    fitting = sum(len(g.candidates) for g in groups)
    print(
        f"enumerated {total:,}, invalid {invalid:,}, valid {len(valid):,}, fit {fitting:,} "
        f"in {len(groups):,} chunk-key groups: {time.perf_counter() - t0:.2f} s"
    )
    if args.floors:
        floors(args.config, groups, args.floors)
    elif args.search:
        search(args.config, base, groups, [int(w) for w in args.workers.split(",")], args.top)
    else:
        sample(groups, args.sample, fitting)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
