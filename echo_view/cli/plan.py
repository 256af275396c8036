"""``echo-view plan CONFIG.toml --gpus N``: search the parallel layouts of a config's model on N
GPUs, drop those that do not fit in memory, simulate the rest and rank them by step time.

The search runs on a Dask cluster (:func:`echo_view.workers.dask_client`): a local one of
``--workers`` processes by default, an existing one with ``--scheduler``, or none with
``--serial``. One task per group of layouts sharing a chunk key: the task traces the group's
model chunks once and builds each layout's graph from them (the base layout's graph may be
found beside the config or in the cache instead), so neither chunks nor graphs travel; results
stream back as tasks finish. Nothing is printed or written until every task has finished, so Ctrl-C
(which stops the workers) leaves no partial output.

``--json`` prints ``counts`` (``enumerated``, ``invalid``, ``out_of_memory``, ``simulated``),
``ranked`` (every simulated layout, fastest first: ``layout``, ``step_time_s``,
``tokens_per_s_per_gpu``, ``mfu``, ``peak_bytes``, ``needed_bytes``, ``parallel``),
``pareto`` (the layout names on the step-time / peak-memory Pareto front), ``gpus``, ``gpu``,
``search``, ``seconds``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from echo_view.cli.plotting import new_figure, plot_format, save_figure
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.errors import UsageError
from echo_view.formats import Registry, json_text
from echo_view.loading import graph_for_config, load_config
from echo_view.model.config import WorkloadConfig, tracing_key
from echo_view.model.graph import TracedGraph
from echo_view.model.schema import json_schema
from echo_view.sim.plan import (
    DIMENSIONS,
    Counts,
    Group,
    Ranked,
    check_memory,
    enumerate_layouts,
    group_by_chunks,
    pareto_front,
    parse_dimensions,
    rank,
    retarget,
    simulate_group,
)
from echo_view.text import printable
from echo_view.workers import dask_client

GB = 1e9


def register(subparsers: Any) -> None:
    """Add the ``plan`` sub-command."""
    p = subparsers.add_parser(
        "plan",
        description="Enumerate the tensor/pipeline/virtual/context-parallel layouts, "
        "micro-batch sizes, recomputation and optimizer sharding of CONFIG's model on N GPUs, "
        "drop those that do not fit in the GPU's memory, simulate the rest (on a Dask "
        "cluster) and rank them by step time.",
    )
    p.add_argument("config", type=Path, metavar="CONFIG.toml")
    p.add_argument("--gpus", type=int, required=True, metavar="N", help="GPUs to plan for")
    p.add_argument("--gpu", metavar="G", help="GPU preset (default: the config's)")
    p.add_argument(
        "--search",
        default=",".join(DIMENSIONS),
        metavar="DIMS",
        help=f"dimensions to vary (default: {','.join(DIMENSIONS)}); others stay as in CONFIG",
    )
    p.add_argument("--top", type=int, default=10, metavar="K", help="rows in the table (10)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="step time vs memory, Pareto")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, metavar="N", help="local Dask worker processes")
    where.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler")
    where.add_argument("--serial", action="store_true", help="run in this process, no cluster")
    add_progress_option(p)
    p.set_defaults(func=run)


class PlanGraphs:
    """The traced graph of each candidate layout of one config.

    The base layout's graph is found as ``simulate`` finds it (beside the config, in the
    cache, or traced); every other layout's is built from chunks traced once per chunk key in
    this process (:class:`~echo_view.tracing.chunks.ChunkCache`), not written to the cache
    (without torch, a cached graph is used or the one-line error says what to install). Pickled
    (sent to a worker), it carries only the config's path and key: each task starts with an
    empty chunk cache and traces what its group needs.
    """

    def __init__(self, config_path: Path, base: WorkloadConfig) -> None:
        self.config_path = config_path
        self.base_key = _key_text(base)
        self._chunks: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config_path": self.config_path, "base_key": self.base_key}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config_path, self.base_key = state["config_path"], state["base_key"]
        self._chunks = None

    def __call__(self, cfg: WorkloadConfig) -> TracedGraph:
        if _key_text(cfg) == self.base_key:
            return graph_for_config(cfg, self.config_path)[0]
        try:
            from echo_view.tracing.chunks import ChunkCache
            from echo_view.tracing.roles import trace_workload
        except ImportError:  # no torch: a cached graph, or the error naming the extra
            return graph_for_config(cfg, self.config_path)[0]
        if self._chunks is None:
            self._chunks = ChunkCache()
        return trace_workload(cfg, self._chunks)


def _key_text(cfg: WorkloadConfig) -> str:
    return json.dumps(tracing_key(cfg), sort_keys=True)


def run_serial(
    groups: list[Group], graph_for: Callable[[WorkloadConfig], TracedGraph]
) -> Iterator[list[Ranked]]:
    """Each group's results, simulated in this process."""
    for g in groups:
        yield simulate_group(g, graph_for)


def run_on_dask(
    client: Any, groups: list[Group], graph_for: Callable[[WorkloadConfig], TracedGraph]
) -> Iterator[list[Ranked]]:
    """Each group's results as its task finishes on ``client``'s workers (one task per group:
    its chunks are traced where its layouts are simulated; the largest submitted first, so
    that the last tasks to finish are short); leaving early cancels the rest."""
    executor = client.get_executor(pure=False)
    largest_first = sorted(groups, key=lambda g: g.work(), reverse=True)
    futures = [executor.submit(simulate_group, g, graph_for) for g in largest_first]
    try:
        for fut in concurrent.futures.as_completed(futures):
            yield fut.result()
    finally:
        for fut in futures:
            fut.cancel()


def run(args: argparse.Namespace, registry: Registry) -> int:
    del registry
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, got {args.top}")
    dims = parse_dimensions(args.search)
    if args.plot is not None:
        plot_format(args.plot)  # before the search, which takes minutes
    t0 = time.perf_counter()
    base = retarget(load_config(args.config), args.gpus, args.gpu)
    valid, total, invalid = enumerate_layouts(base, dims)
    candidates = check_memory(valid)
    groups = group_by_chunks(candidates)
    fitting = sum(len(g.candidates) for g in groups)
    graph_for = PlanGraphs(args.config, base)
    results: list[Ranked] = []
    with stderr_progress(args) as progress:

        def collect(stream: Iterator[list[Ranked]]) -> None:
            for part in stream:
                results.extend(part)
                done = len(results)
                progress(f"simulated {done:,} of {fitting:,} layouts", done / fitting)

        if not groups:
            pass
        elif args.serial:
            collect(run_serial(groups, graph_for))
        else:
            with dask_client(args.scheduler, args.workers) as client:
                collect(run_on_dask(client, groups, graph_for))
    ranked = rank(results)
    counts = Counts(total, invalid, len(candidates) - fitting, len(ranked))
    front = pareto_front(ranked)
    if args.plot is not None:
        write_plot(ranked, front, args.plot)
    report = {
        "input": str(args.config),
        "gpus": args.gpus,
        "gpu": base.cluster.gpu,
        "search": list(dims),
        "counts": counts.to_json(),
        "ranked": [r.to_json() for r in ranked],
        "pareto": [r.layout for r in front],
        "seconds": round(time.perf_counter() - t0, 3),
    }
    if args.json:
        sys.stdout.write(json_text({"schema": json_schema("plan"), **report}))
    else:
        sys.stdout.write(_render(report, ranked, args.top))
    return 0


def _render(report: dict[str, Any], ranked: list[Ranked], top: int) -> str:
    c = report["counts"]
    lines = [
        f"{printable(report['gpu'])} x {report['gpus']:,}: {c['enumerated']:,} layouts "
        f"enumerated, {c['invalid']:,} invalid, {c['out_of_memory']:,} out of memory, "
        f"{c['simulated']:,} simulated ({report['seconds']:.1f} s)",
    ]
    if not ranked:
        if c["invalid"] == c["enumerated"]:
            # Nothing passed the config rules (a GPU count no tp x pp x cp divides, say).
            lines.append(
                "no valid layout: the config's rules refuse every one (is the GPU count a "
                "multiple of the parallel sizes and the batch a multiple of micro x dp?)"
            )
        else:
            lines.append(
                "no layout fits: try more GPUs, recomputation or the distributed optimizer"
            )
        return "\n".join(lines) + "\n"
    head = f"{'#':>3}  {'layout':<46} {'step (s)':>9} {'tok/s/GPU':>10} {'MFU':>6} {'mem (GB)':>9}"
    lines += [head, "-" * len(head)]
    front = set(report["pareto"])
    for i, r in enumerate(ranked[:top], 1):
        mark = "*" if r.layout in front else " "
        lines.append(
            f"{i:>3}{mark} {r.layout:<46} {r.step_time_s:>9.3f} {r.tokens_per_s_per_gpu:>10,.0f} "
            f"{100 * r.mfu:>5.1f}% {r.peak_bytes / GB:>9.1f}"
        )
    lines.append("* on the Pareto front of step time and peak memory")
    return "\n".join(lines) + "\n"


def write_plot(ranked: list[Ranked], front: list[Ranked], path: Path) -> None:
    """Step time against peak memory per layout, the Pareto front joined; written atomically."""
    fig = new_figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    ax.scatter(
        [r.peak_bytes / GB for r in ranked], [r.step_time_s for r in ranked], s=8,
        color="#9e9e9e", label="layout that fits",
    )  # fmt: skip
    pts = sorted(front, key=lambda r: r.peak_bytes)
    ax.plot(
        [r.peak_bytes / GB for r in pts], [r.step_time_s for r in pts], "o-", color="#d32f2f",
        label="Pareto front",
    )  # fmt: skip
    if ranked:
        best = ranked[0]
        ax.annotate(best.layout, (best.peak_bytes / GB, best.step_time_s), fontsize="small")
    ax.set_xlabel("peak memory per GPU (GB)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title(f"{len(ranked):,} layouts that fit")
    ax.legend()
    save_figure(fig, path)
