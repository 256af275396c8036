"""``echo-view plan CONFIG.toml --gpus N``: search the parallel layouts of a config's model on N
GPUs, drop those that do not fit in memory, simulate the rest and rank them by step time.

The search runs on a Dask cluster (:func:`echo_view.workers.dask_client`): a local one of
``--workers`` processes by default, an existing one with ``--scheduler``, or none with
``--serial``. Each group of layouts sharing a chunk key has its model chunks traced once per
process (the base layout's graph may be found beside the config or in the cache instead) and
each layout's graph built from them, so neither chunks nor graphs travel. First one task per
few layouts of a group computes their compute floors (:func:`~echo_view.sim.plan.compute_floor_ns`);
then one task per layout, in ascending floor order, a few per worker at a time, skipping the
layouts the results so far rule out of the ``--top`` fastest and of the Pareto front
(:class:`~echo_view.sim.plan.Frontier`; the text table needs only the ``--top`` fastest, whose
Pareto marks follow from them; ``--json`` reports the whole Pareto front too). ``--all``
(implied by ``--plot``) simulates every layout that fits instead, one task per group. Results
stream back as tasks finish. Nothing is printed or written until every task has finished, so
Ctrl-C (which stops the workers) leaves no partial output.

``--json`` prints ``counts`` (``enumerated``, ``invalid``, ``out_of_memory``, ``simulated``,
``pruned``: fitting layouts whose compute floor rules them out of the ``--top`` fastest and of
the Pareto front, left out even when simulated on the way so that every run reports the same
layouts; 0 with ``--all``; ``too_large``: fitting layouts whose step holds more ops than the
simulator takes; ``unsearched``: fitting layouts left when the search stopped at
``--max-passes``), ``stopped`` (``null``, or ``max_passes``, ``unsearched`` and
``exact_up_to_s``: no layout left can be faster, so the ranking up to it is exact),
``ranked`` (every reported layout, fastest first: ``layout``,
``step_time_s``, ``tokens_per_s_per_gpu``, ``mfu``, ``peak_bytes``, ``needed_bytes``, ``parallel``),
``pareto`` (the layout names on the step-time / peak-memory Pareto front), ``gpus``, ``gpu``,
``search``, ``seconds``.

Exit code 0 when a layout is ranked, 1 when none is (the report is printed either way), 2 on bad
input.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from echo_view.cli.numargs import int_arg
from echo_view.cli.pathargs import output_arg, path_arg
from echo_view.cli.plotting import new_figure, plot_format, save_figure
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.errors import UsageError
from echo_view.formats import Registry, json_text
from echo_view.loading import graph_for_config, load_config
from echo_view.model.config import WorkloadConfig
from echo_view.model.config_keys import tracing_key
from echo_view.model.graph import TracedGraph
from echo_view.model.schema import json_schema
from echo_view.sim.compose import MAX_STEP_OPS
from echo_view.sim.plan import (
    DIMENSIONS,
    MAX_PLAN_PASSES,
    Counts,
    Frontier,
    Group,
    Ranked,
    SearchEnd,
    SerialReplay,
    check_memory,
    enumerate_layouts,
    floor_layouts,
    floor_order,
    group_by_chunks,
    layout_name,
    pareto_front,
    parse_dimensions,
    passes,
    rank,
    retarget,
    simulate_group,
    simulate_one,
)
from echo_view.text import printable
from echo_view.workers import dask_client, first_done

GB = 1e9


def register(subparsers: Any) -> None:
    """Add the ``plan`` sub-command."""
    p = subparsers.add_parser(
        "plan",
        description="Enumerate the tensor/pipeline/virtual/context-parallel layouts, "
        "micro-batch sizes, recomputation and optimizer sharding of CONFIG's model on N GPUs, "
        "drop those that do not fit in the GPU's memory, simulate the rest (on a Dask "
        "cluster) and rank them by step time. Exit code: 0 when at least one layout is "
        "ranked, 1 when none is (none valid, none fits, or none small enough to simulate), "
        "2 on bad input.",
    )
    p.add_argument("config", type=path_arg, metavar="CONFIG.toml")
    p.add_argument("--gpus", type=int_arg, required=True, metavar="N", help="GPUs to plan for")
    p.add_argument("--gpu", metavar="G", help="GPU preset (default: the config's)")
    p.add_argument(
        "--search",
        action="append",
        metavar="DIMS",
        help=f"dimensions to vary, comma-separated or repeated (default: {','.join(DIMENSIONS)}); "
        "others stay as in CONFIG",
    )
    p.add_argument("--top", type=int_arg, default=10, metavar="K", help="rows in the table (10)")
    p.add_argument(
        "--all",
        action="store_true",
        help="simulate every layout that fits (default: skip those whose compute or kernel "
        "dispatch alone rules them out of the --top fastest and of the Pareto front; implied "
        "by --plot)",
    )
    p.add_argument(
        "--max-passes",
        type=int_arg,
        default=MAX_PLAN_PASSES,
        metavar="N",
        help="stop after simulating layouts of N forward and backward chunk passes in all "
        f"(default {MAX_PLAN_PASSES:,}: about 15 minutes on one core); the layouts left are "
        "counted, with the step below which the ranking is still exact; --all and --plot "
        "refuse a search above it",
    )
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.add_argument("--plot", type=output_arg, metavar="OUT.png", help="step time vs memory, Pareto")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int_arg, metavar="N", help="local Dask worker processes")
    where.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler")
    where.add_argument("--serial", action="store_true", help="run in this process, no cluster")
    add_progress_option(p)
    p.set_defaults(func=run)


#: The chunk cache of the search this process last worked for, by (config path, base key):
#: a worker keeps it across the tasks of one search (one search's chunks: a few MB).
_CHUNKS: dict[tuple[str, str], Any] = {}


class PlanGraphs:
    """The traced graph of each candidate layout of one config.

    The base layout's graph, and every layout's of a config whose ``[model]`` names a script,
    is found as ``simulate`` finds it (beside the config, in the cache, or traced); every other
    layout's is built from chunks traced once per chunk key in
    this process (:class:`~echo_view.tracing.chunks.ChunkCache`, kept for the search's later
    tasks in the same process), not written to the cache (without torch, a cached graph is
    used or the one-line error says what to install). Pickled (sent to a worker), it carries
    only the config's path and key.
    """

    def __init__(self, config_path: Path, base: WorkloadConfig) -> None:
        self.config_path = config_path
        self.base_key = _key_text(base)

    def __call__(self, cfg: WorkloadConfig) -> TracedGraph:
        # A config whose [model] names a script: the script traced at each layout (the
        # built-in model's chunks stood in for it, so the search ranked another model).
        if _key_text(cfg) == self.base_key or cfg.model.script is not None:
            return graph_for_config(cfg, self.config_path)[0]
        try:
            from echo_view.tracing.chunks import ChunkCache
            from echo_view.tracing.roles import trace_workload
        except ImportError:  # no torch: a cached graph, or the error naming the extra
            return graph_for_config(cfg, self.config_path)[0]
        key = (str(self.config_path), self.base_key)
        if key not in _CHUNKS:
            _CHUNKS.clear()  # another search's chunks
            _CHUNKS[key] = ChunkCache()
        return trace_workload(cfg, _CHUNKS[key])


def _key_text(cfg: WorkloadConfig) -> str:
    return json.dumps(tracing_key(cfg), sort_keys=True)


def run_serial(
    groups: list[Group], graph_for: Callable[[WorkloadConfig], TracedGraph]
) -> Iterator[list[Ranked | None]]:
    """Each group's results (``None``: too large to simulate), simulated in this process."""
    for g in groups:
        yield simulate_group(g, graph_for)


def run_on_dask(
    client: Any, groups: list[Group], graph_for: Callable[[WorkloadConfig], TracedGraph]
) -> Iterator[list[Ranked | None]]:
    """Each group's results (``None``: too large to simulate) as its task finishes on
    ``client``'s workers (one task per group: its chunks are traced where its layouts are
    simulated; the largest submitted first, so that the last tasks to finish are short);
    leaving early cancels the rest."""
    executor = client.get_executor(pure=False)
    largest_first = sorted(groups, key=lambda g: g.work(), reverse=True)
    futures = [executor.submit(simulate_group, g, graph_for) for g in largest_first]
    try:
        pending = set(futures)
        while pending:
            done, pending = first_done(pending)
            for fut in done:
                yield fut.result()
    finally:
        for fut in futures:
            fut.cancel()


class _InProcess:
    """An executor that runs each call when it is submitted (``--serial``)."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        fut.set_result(fn(*args))
        return fut


def _completed(
    executor: Any,
    fn: Callable[..., Any],
    calls: list[tuple[Any, tuple[Any, ...]]],
    running: set[concurrent.futures.Future[Any]],
) -> Iterator[tuple[Any, Any]]:
    """``(key, fn(*args))`` for each ``(key, args)`` of ``calls``, as each finishes on
    ``executor``; ``running`` holds the futures in flight (the caller cancels them when it
    leaves). In this process (:class:`_InProcess`) each call runs when its result is
    wanted, so that progress moves call by call."""
    if isinstance(executor, _InProcess):
        for key, args in calls:
            yield key, fn(*args)
        return
    keys = {executor.submit(fn, *args): key for key, args in calls}
    running.update(keys)
    pending = set(keys)
    while pending:
        done, pending = first_done(pending)
        for fut in done:
            running.discard(fut)
            yield keys[fut], fut.result()


#: Layouts per compute-floor task on workers: a group can hold hundreds of layouts of seconds
#: each, so progress and the workers' share move a part of a group at a time; larger parts
#: keep most groups whole, as each worker that gets a part of a group traces its chunks.
FLOOR_TASK_LAYOUTS = 32


def run_pruned(
    executor: Any,
    slots: int,
    groups: list[Group],
    graph_for: Callable[[WorkloadConfig], TracedGraph],
    top: int,
    keep_front: bool = True,
    budget: int = MAX_PLAN_PASSES,
) -> Iterator[tuple[list[Ranked], int, int | SearchEnd]]:
    """The layouts that can be among the ``top`` fastest or (``keep_front``) on the Pareto
    front, simulated on ``executor`` (``submit`` returning
    :class:`concurrent.futures.Future`) with at most ``slots`` layouts in flight, taken in
    floor order until the passes (:func:`~echo_view.sim.plan.passes`) of those a serial search
    simulates reach ``budget`` (:class:`~echo_view.sim.plan.SerialReplay`). Yields
    ``(results, ruled out, floors)``: an empty batch as each task's floors arrive (the layouts
    whose floors are known so far), then each batch of results with the layouts ruled out
    since the last one (and every layout's floor known); the last item is every result to
    report (those the final frontier does not rule out), ``-1`` and a
    :class:`~echo_view.sim.plan.SearchEnd`: the same whatever the order results came in.
    Leaving early cancels the rest."""
    largest_first = sorted(range(len(groups)), key=lambda i: groups[i].work(), reverse=True)
    fitting = sum(len(g.candidates) for g in groups)
    floors: list[list[int | None]] = [[None] * len(g.candidates) for g in groups]
    running: set[concurrent.futures.Future[Any]] = set()
    try:
        # In this process every part shares one chunk cache: a layout a part.
        size = 1 if isinstance(executor, _InProcess) else FLOOR_TASK_LAYOUTS
        tasks = [
            ((i, lo), (groups[i].candidates[lo : lo + size], graph_for))
            for i in largest_first
            for lo in range(0, len(groups[i].candidates), size)
        ]
        known = 0
        for (i, lo), part in _completed(executor, floor_layouts, tasks, running):
            floors[i][lo : lo + len(part)] = part
            known += len(part)
            yield [], 0, known
        pending = deque(floor_order(groups, floors))
        too_large = fitting - len(pending)
        floor_of = {layout_name(cfg): f for f, _, cfg in pending}
        frontier = Frontier(top, keep_front)  # every result: what a taken layout may skip
        replay = SerialReplay(top, keep_front, budget)  # what the serial search decides
        index: dict[concurrent.futures.Future[Any], int] = {}
        results: list[Ranked] = []
        while (pending and replay.may_take()) or running:
            skipped = 0
            while pending and len(running) < slots and replay.may_take():
                floor, peak, cfg = pending.popleft()
                if frontier.excludes(floor, peak):
                    skipped += 1
                    replay.take(floor, peak, passes(cfg), False)
                else:
                    i = replay.take(floor, peak, passes(cfg), True)
                    fut = executor.submit(simulate_one, cfg, graph_for)
                    index[fut] = i
                    running.add(fut)
            done, running = first_done(running)
            batch = []
            for f in done:
                replay.done(index[f], r := f.result())
                if r is not None:
                    frontier.add(r)
                    batch.append(r)
            results += batch
            yield batch, skipped, fitting
        final = replay.frontier
        reported = [r for r in results if not final.excludes(floor_of[r.layout], r.peak_bytes)]
        left = [f for f, peak, _ in pending if not final.excludes(f, peak)]  # floor order
        yield reported, -1, SearchEnd(too_large, len(left), left[0] if left else None)
    finally:
        for fut in running:
            fut.cancel()


def run(args: argparse.Namespace, registry: Registry) -> int:
    del registry
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, got {args.top}")
    if args.max_passes < 1:
        raise UsageError(f"--max-passes must be at least 1, got {args.max_passes}")
    # Repeated --search options add up (the last one alone counted).
    dims = parse_dimensions(",".join(args.search) if args.search else ",".join(DIMENSIONS))
    if args.plot is not None:
        plot_format(args.plot)  # before the search, which takes minutes
    t0 = time.perf_counter()
    base = retarget(load_config(args.config), args.gpus, args.gpu)
    refusals: dict[str, list[Any]] = {}
    valid, total, invalid = enumerate_layouts(base, dims, refusals)
    candidates = check_memory(valid)
    groups = group_by_chunks(candidates)
    fitting = sum(len(g.candidates) for g in groups)
    graph_for = PlanGraphs(args.config, base)
    exhaustive = args.all or args.plot is not None
    if exhaustive and (work := sum(g.work() for g in groups)) > args.max_passes:
        raise UsageError(
            f"{'--plot' if args.plot is not None else '--all'} would simulate {work:,} "
            f"forward and backward chunk passes (of {fitting:,} layouts that fit), more than "
            f"--max-passes {args.max_passes:,}",
            hint="leave out --all and --plot (the search then skips what cannot rank and "
            "stops at the budget), narrow --search, or raise --max-passes",
        )
    results: list[Ranked] = []
    too_large = 0
    end = SearchEnd()
    with stderr_progress(args) as progress:

        def collect(stream: Iterator[list[Ranked | None]]) -> None:
            nonlocal too_large
            done = 0
            for part in stream:
                results.extend(r for r in part if r is not None)
                too_large += sum(r is None for r in part)
                done += len(part)
                progress(f"simulated {done:,} of {fitting:,} layouts", done / fitting)

        def collect_pruned(stream: Iterator[tuple[list[Ranked], int, int | SearchEnd]]) -> None:
            nonlocal too_large, end
            simulated = ruled_out = 0
            for part, skipped, floored in stream:
                if isinstance(floored, SearchEnd):  # the end: what is reported, and the rest
                    results.extend(part)
                    too_large, end = floored.too_large, floored
                    break
                if floored < fitting:
                    progress(
                        f"timed the compute of {floored:,} of {fitting:,} layouts",
                        floored / fitting,
                    )
                    continue
                simulated += len(part)
                ruled_out += skipped
                done = simulated + ruled_out
                progress(
                    f"simulated {simulated:,} of {fitting:,} layouts, {ruled_out:,} ruled out",
                    done / fitting,
                )

        if not groups:
            pass
        elif args.serial:
            if exhaustive:
                collect(run_serial(groups, graph_for))
            else:
                collect_pruned(
                    run_pruned(
                        _InProcess(), 1, groups, graph_for, args.top, args.json, args.max_passes
                    )
                )
        else:
            with dask_client(args.scheduler, args.workers) as client:
                if exhaustive:
                    collect(run_on_dask(client, groups, graph_for))
                else:
                    slots = 2 * max(1, len(client.scheduler_info()["workers"]))
                    executor = client.get_executor(pure=False)
                    stream = run_pruned(
                        executor, slots, groups, graph_for, args.top, args.json, args.max_passes
                    )
                    collect_pruned(stream)
    ranked = rank(results)
    counts = Counts(
        total,
        invalid,
        len(candidates) - fitting,
        len(ranked),
        fitting - len(ranked) - too_large - end.unsearched,
        too_large,
        end.unsearched,
    )
    front = pareto_front(ranked)
    if args.plot is not None:
        write_plot(ranked, front, args.plot)
    report = {
        "input": str(args.config),
        "gpus": args.gpus,
        "gpu": base.cluster.gpu,
        "search": list(dims),
        "counts": counts.to_json(),
        # Why the config rules refused layouts: per key, how many and the first message.
        "refused": {k: {"count": n, "first": text} for k, (n, text) in refusals.items()},
        "ranked": [r.to_json() for r in ranked],
        "pareto": [r.layout for r in front],
        # Where the search stopped at its budget: no layout left can be faster than
        # exact_up_to_s, so the ranking and the front up to that step are exact.
        "stopped": None
        if end.least_floor_ns is None
        else {
            "max_passes": args.max_passes,
            "unsearched": end.unsearched,
            "exact_up_to_s": end.least_floor_ns / 1e9,
        },
        "seconds": round(time.perf_counter() - t0, 3),
    }
    if args.json:
        sys.stdout.write(json_text({"schema": json_schema("plan"), **report}))
    else:
        sys.stdout.write(_render(report, ranked, args.top))
    # A search that ranks nothing is an answer, not an error, but scripts looping over GPU
    # counts need to tell it from a ranking without parsing the table.
    return 0 if ranked else 1


def _render(report: dict[str, Any], ranked: list[Ranked], top: int) -> str:
    c = report["counts"]
    lines = [
        f"{printable(report['gpu'])} x {report['gpus']:,}: {c['enumerated']:,} layouts "
        f"enumerated, {c['invalid']:,} invalid, {c['out_of_memory']:,} out of memory, "
        f"{c['simulated']:,} simulated ({report['seconds']:.1f} s)",
    ]
    if c["pruned"]:
        lines.append(
            f"{c['pruned']:,} more fit but their compute or kernel dispatch alone rules them "
            f"out of the "
            f"{top:,} fastest (--all simulates them)"
        )
    if c["too_large"]:
        lines.append(
            f"{c['too_large']:,} more fit but one step of each would simulate more than "
            f"{MAX_STEP_OPS:,} ops (fewer layers per stage or micro-batches: a larger "
            "micro-batch, more data parallelism)"
        )
    stopped = report["stopped"]
    if stopped is not None:
        limit = stopped["exact_up_to_s"]
        exact = sum(r.step_time_s <= limit for r in ranked[:top])
        lines.append(
            f"{stopped['unsearched']:,} more fit but were not simulated: the search stopped at "
            f"--max-passes {stopped['max_passes']:,}; none of them can be faster than "
            f"{limit:.3f} s, so "
            + (f"rows 1-{exact} are exact" if exact else "no row below is sure of its rank")
            + " (a larger --max-passes searches further)"
        )
    if not ranked:
        if c["invalid"] == c["enumerated"]:
            # Nothing passed the config rules (a GPU count no tp x pp x cp divides, say).
            why = sorted(report["refused"].items(), key=lambda kv: -kv[1]["count"])
            lines.append(
                "no valid layout: the config's rules refuse every one: "
                + "; ".join(
                    f"{printable(r['first'])} ({r['count']:,} layout(s), {printable(k)})"
                    for k, r in why[:3]
                )
            )
        elif c["too_large"]:
            lines.append("no layout that fits is small enough to simulate")
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
