"""Layout search: every tensor / pipeline / virtual / context parallel layout, micro-batch,
recomputation and optimizer sharding of a model on N GPUs that is valid and fits in memory,
simulated and ranked by step time.

Enumeration changes only the searched dimensions (:data:`DIMENSIONS`) of a base config; the
data-parallel size follows (``N / (tp * pp * cp)``). A candidate is valid when the config parser
accepts it (the same rules as a hand-written config: divisibility of layers, heads, batch and
sequence, interleaving's micro-batch rule, fused attention for context parallelism), and it is
simulated only when :mod:`echo_view.sim.memory` says it fits. Candidates whose model chunks run
the same ops (same :func:`~echo_view.model.config_keys.chunk_key`: they differ only in the pipeline
layout and optimizer sharding) form one :class:`Group`: a group is simulated in one place, where
its chunks are traced once and every candidate's graph is built from them, so neither chunks nor
graphs travel between processes.

Pruning (:class:`Frontier`): a layout's step is at least its *compute floor*
(:func:`compute_floor_ns`), the op time its busiest pipeline stage runs on its compute stream
(every forward and backward pass of every micro-batch, and the optimizer), because that stream
runs one op at a time from the step's start and interference only slows ops down; at least
the host path of those kernels (:mod:`echo_view.sim.host`): issued one after another in the
stage's order, each run between two pipeline syncs ending no earlier than its issue span; and
at least the pipeline's fill and drain around a stage's passes (:func:`pipeline_floor_ns`).
A layout whose floor is above the step of ``K`` simulated layouts cannot be among the ``K``
fastest, and one whose floor is above the step of a simulated layout that needs no more memory
cannot be on the step-time / memory Pareto front; one excluded both ways (or, when only the
``K`` fastest are wanted, the first way) is not simulated. Simulating in ascending floor order,
the ``K`` fastest layouts (and the Pareto front) are those of the exhaustive search, with the
same numbers.

Budget: simulation time grows with a layout's pipeline passes (:func:`passes`), and a model of
thousands of thin layers holds thousands of layouts of up to millions of passes, a few seconds
to minutes each, whose floors can lie within a fraction of a percent of each other, so that
little is ruled out. So that a search ends in bounded time whatever the model, it stops once
the layouts it simulates hold a budget of passes
(:data:`MAX_PLAN_PASSES` by default; :class:`SerialReplay` makes a parallel search stop where a
serial one does) and reports how (:class:`SearchEnd`): the layouts left are
reported by count with the least of their floors, below which the ranking is still exact (no
layout left can be faster than its floor).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from echo_view.errors import ConfigError, UsageError
from echo_view.model.config import LIMITS, WorkloadConfig
from echo_view.model.config_keys import chunk_key, config_to_mapping
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.gpus import gpu_preset
from echo_view.model.graph import TracedGraph
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compose import role_costs, too_large_to_simulate
from echo_view.sim.compose_costs import CollectiveCache, TableCost
from echo_view.sim.compute_presets import compute_params_for
from echo_view.sim.host import HostParams, folded_spans_ns, issue_span_ns, pipe_syncs_before
from echo_view.sim.memory import memory_report
from echo_view.sim.runs import simulate_workload
from echo_view.sim.schedule import schedule_arrays
from echo_view.sim.throughput import throughput

DIMENSIONS = ("tp", "pp", "vp", "cp", "micro", "recompute", "dist_opt")
#: Values tried per dimension (filtered by the model's shape and the GPU count).
CP_SIZES = (1, 2, 4, 8)
MICRO_SIZES = tuple(range(1, 9))  # (those that divide a data-parallel rank's batch)
RECOMPUTE = ("none", "selective", "full")
#: The pipeline passes (:func:`passes`) a search simulates by default before it stops: about
#: 15 minutes of simulation on one core at the 20-50 us a pass of thin layers' layouts, and
#: above every layout of 77 of the 80 configs in ``samples/configs`` together (GPT-175B on
#: 96 H800: 22 M passes, 519 layouts; three MegaScale runs on 3,072-12,288 GPUs exceed it).
MAX_PLAN_PASSES = 40_000_000


def passes(cfg: WorkloadConfig) -> int:
    """The forward and backward passes of a model chunk that one step of ``cfg`` runs over its
    pipeline stages (2 x stages x virtual stages x micro-batches): what a layout's simulation
    time grows with."""
    return 2 * cfg.parallel.pp * cfg.parallel.virtual_stages * cfg.micro_batches


def parse_dimensions(text: str) -> tuple[str, ...]:
    """``tp,pp,...`` into a tuple of known dimensions (a UsageError names an unknown one)."""
    dims = tuple(dict.fromkeys(d.strip() for d in text.split(",") if d.strip()))
    for d in dims:
        if d not in DIMENSIONS:
            raise UsageError(
                f"--search: unknown dimension {d!r}", hint=f"choose from {','.join(DIMENSIONS)}"
            )
    if not dims:
        raise UsageError("--search: no dimension given", hint=f"e.g. {','.join(DIMENSIONS)}")
    return dims


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layout_name(cfg: WorkloadConfig) -> str:
    """A short, stable description of a candidate's layout."""
    p = cfg.parallel
    return (
        f"tp{p.tp} pp{p.pp} vp{p.virtual_stages} cp{p.cp} dp{p.dp} mb{cfg.batch.micro} "
        f"{p.recompute} {'distopt' if p.distributed_optimizer else 'ddp'}"
    )


@dataclass(frozen=True)
class Counts:
    """What happened to the enumerated layouts."""

    enumerated: int = 0
    invalid: int = 0
    out_of_memory: int = 0
    simulated: int = 0
    #: Fitting layouts not simulated: neither among the fastest nor on the Pareto front.
    pruned: int = 0
    #: Fitting layouts whose step holds more ops than the simulator takes
    #: (:data:`~echo_view.sim.compose.MAX_STEP_OPS`).
    too_large: int = 0
    #: Fitting layouts neither simulated nor ruled out: the search stopped at its budget.
    unsearched: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "enumerated": self.enumerated,
            "invalid": self.invalid,
            "out_of_memory": self.out_of_memory,
            "simulated": self.simulated,
            "pruned": self.pruned,
            "too_large": self.too_large,
            "unsearched": self.unsearched,
        }


@dataclass(frozen=True)
class SearchEnd:
    """How a pruned search ended."""

    #: Layouts whose step holds more ops than the simulator takes.
    too_large: int = 0
    #: Layouts the search stopped before (its pass budget spent) that the results do not rule
    #: out, and the least of their floors (ns): no reported step up to it can be beaten.
    unsearched: int = 0
    least_floor_ns: int | None = None


@dataclass(frozen=True)
class Candidate:
    """A valid layout and its memory verdict."""

    cfg: WorkloadConfig
    peak_bytes: int
    needed_bytes: int
    fits: bool


@dataclass(frozen=True)
class Group:
    """Fitting candidates that share a chunk key (their graphs share traced chunks)."""

    candidates: tuple[WorkloadConfig, ...]
    #: Each candidate's peak memory (bytes), in the same order.
    peaks: tuple[int, ...] = ()

    def work(self) -> int:
        """A measure of the group's simulation time: its layouts' :func:`passes`, summed."""
        return sum(passes(c) for c in self.candidates)


@dataclass(frozen=True)
class Ranked:
    """One simulated layout."""

    layout: str
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    peak_bytes: int
    needed_bytes: int
    parallel: dict[str, Any] = field(hash=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "peak_bytes": self.peak_bytes,
            "needed_bytes": self.needed_bytes,
            "parallel": self.parallel,
        }


def retarget(base: WorkloadConfig, gpus: int, gpu: str | None) -> WorkloadConfig:
    """``base`` on ``gpus`` GPUs (of type ``gpu``): nodes follow, layout left to the search."""
    if not 1 <= gpus <= LIMITS["gpus"]:
        raise UsageError(f"--gpus must be between 1 and {LIMITS['gpus']:,}, got {gpus}")
    per_node = min(base.cluster.gpus_per_node, gpus)
    if gpus % per_node:
        raise UsageError(
            f"--gpus {gpus} is not a whole number of {per_node}-GPU nodes",
            hint=f"give a multiple of {per_node}",
        )
    if gpu is not None:
        try:
            gpu_preset(gpu)
        except ConfigError as exc:  # the name came from --gpu, not from the config file
            raise UsageError(f"--gpu: {exc.message}", hint=exc.hint) from None
    cluster = replace(
        base.cluster, gpu=gpu or base.cluster.gpu, gpus_per_node=per_node, nodes=gpus // per_node
    )
    # An unknown GPU in the config, or a dtype it cannot train in, fails here, once.
    spec = cluster_from_config(cluster, base.source).gpu
    try:
        spec.check_training_dtype(base.dtype, base.source or None)
    except ConfigError as exc:
        if gpu is None:
            raise
        raise UsageError(f"--gpu: {exc.message}", hint=exc.hint) from None
    return replace(base, cluster=cluster)


def _choices(base: WorkloadConfig, dims: Sequence[str]) -> dict[str, list[Any]]:
    """Values per dimension: the searched ones' candidates, always with the base config's own
    value (an uneven pipeline's stage count need not divide the layers), else the base's."""
    m, p, b = base.model, base.parallel, base.batch
    gpus = base.cluster.gpus
    per_node = base.cluster.gpus_per_node
    searched: dict[str, tuple[list[Any], Any]] = {
        "tp": ([t for t in (1, 2, 4, 8, 16, 32, 64) if t <= per_node and gpus % t == 0], p.tp),
        "pp": ([d for d in _divisors(m.layers) if gpus % d == 0], p.pp),
        "cp": ([c for c in CP_SIZES if gpus % c == 0], p.cp),
        "micro": (list(MICRO_SIZES), b.micro),
        "recompute": (list(RECOMPUTE), p.recompute),
        "dist_opt": ([False, True], p.distributed_optimizer),
    }
    out: dict[str, list[Any]] = {}
    for dim, (values, own) in searched.items():
        out[dim] = (values if own in values else [*values, own]) if dim in dims else [own]
    return out


def _vps(base: WorkloadConfig, pp: int, dims: Sequence[str]) -> list[int]:
    if "vp" not in dims:
        return [base.parallel.virtual_stages]
    if pp == 1:
        return [1]
    if base.model.layers % pp == 0:
        return _divisors(base.model.layers // pp)
    # Uneven stages: V must divide every stage's layers; the config rules refuse the rest.
    return list(range(1, base.model.layers // pp + 2))


def enumerate_layouts(
    base: WorkloadConfig, dims: Sequence[str], refusals: dict[str, list[Any]] | None = None
) -> tuple[list[WorkloadConfig], int, int]:
    """Every combination of the searched dimensions' values: the valid configs, how many
    combinations there were, and how many the config rules refused. ``refusals``, when given,
    gets per rule (the key it names: ``model.heads``...) ``[count, first message]``."""
    ch = _choices(base, dims)
    mapping = config_to_mapping(base)
    mapping.pop("reference", None)  # a measured step time belongs to the base layout only
    valid: list[WorkloadConfig] = []
    total = invalid = 0
    gpus = base.cluster.gpus
    # An FSDP config without pipeline stages stands for a framework that has none (llm-foundry,
    # Composer): its candidates keep pp = 1.
    pipelines = base.parallel.fsdp == "none" or base.parallel.pp > 1
    for tp, pp, cp in itertools.product(ch["tp"], ch["pp"], ch["cp"]):
        for vp, micro, rec, dist in itertools.product(
            _vps(base, pp, dims), ch["micro"], ch["recompute"], ch["dist_opt"]
        ):
            model_parallel = tp * pp * cp
            if dist != base.parallel.distributed_optimizer and gpus == model_parallel:
                continue  # one data-parallel rank: the same layout as without it
            dp = max(gpus // model_parallel, 1)
            if micro != base.batch.micro and base.batch.global_batch % (micro * dp):
                continue  # not a size a data-parallel rank's batch splits into
            total += 1
            uneven = gpus % model_parallel != 0
            if uneven or (pp > 1 and not pipelines):
                invalid += 1
                if refusals is not None:
                    key, text = (
                        ("cluster", f"{gpus:,} GPUs are no multiple of tp x pp x cp = "
                                    f"{tp} x {pp} x {cp}")
                        if uneven
                        else ("parallel.pp", "an FSDP config without pipeline stages keeps pp = 1")
                    )  # fmt: skip
                    refusals.setdefault(key, [0, text])[0] += 1
                continue
            par = dict(mapping["parallel"])
            par.update(
                tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), virtual_stages=vp,
                recompute=rec, distributed_optimizer=dist,
            )  # fmt: skip
            if tp == 1:  # sequence parallelism and its overlap need tensor parallelism
                par["sequence_parallel"] = False
                par.pop("tp_comm_overlap", None)
            if not dist:
                par.pop("overlap_param_gather", None)
            if pp == 1:
                par.pop("first_stage_layers", None)
                par.pop("last_stage_layers", None)
            if vp == 1:
                par.pop("overlap_p2p_comm", None)
            data = {**mapping, "parallel": par, "batch": {**mapping["batch"], "micro": micro}}
            try:
                valid.append(parse_workload_config(data, base.source))
            except ConfigError as exc:
                invalid += 1
                if refusals is not None:
                    refusals.setdefault(exc.where or "", [0, exc.message])[0] += 1
    return valid, total, invalid


def check_memory(cfgs: Iterable[WorkloadConfig]) -> list[Candidate]:
    """Each config's memory verdict on its GPU."""
    out = []
    for cfg in cfgs:
        gpu_bytes = cluster_from_config(cfg.cluster, cfg.source).gpu.memory_bytes
        rep = memory_report(cfg, gpu_bytes)
        out.append(Candidate(cfg, rep.peak.peak, rep.needed_bytes, rep.fits))
    return out


def group_by_chunks(candidates: Iterable[Candidate]) -> list[Group]:
    """Fitting candidates grouped by chunk key, in enumeration order."""
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.fits:
            groups.setdefault(chunk_key(c.cfg), []).append(c)
    return [Group(tuple(c.cfg for c in v), tuple(c.peak_bytes for c in v)) for v in groups.values()]


def simulate_one(
    cfg: WorkloadConfig, graph_for: Callable[[WorkloadConfig], TracedGraph]
) -> Ranked | None:
    """Simulate one candidate on its graph from ``graph_for``; ``None`` when its step is too
    large to simulate (:func:`~echo_view.sim.compose.too_large_to_simulate`)."""
    graph = graph_for(cfg)
    if too_large_to_simulate(graph, cfg):
        return None
    sim = simulate_workload(cfg, graph)
    step_s = sim.step_ns / 1e9
    tp = throughput(cfg, step_s, sim.cluster.gpu.peak(cfg.dtype))
    if tp.tokens_per_s_per_gpu is None or tp.mfu is None:  # (no layout's step is free)
        raise ConfigError(f"layout {layout_name(cfg)} is predicted to take no time")
    rep = memory_report(cfg, sim.cluster.gpu.memory_bytes)
    layout = config_to_mapping(cfg)["parallel"] | {"micro": cfg.batch.micro}
    return Ranked(
        layout_name(cfg),
        step_s,
        tp.tokens_per_s_per_gpu,
        tp.mfu,
        rep.peak.peak,
        rep.needed_bytes,
        layout,
    )


def simulate_group(
    group: Group, graph_for: Callable[[WorkloadConfig], TracedGraph]
) -> list[Ranked | None]:
    """:func:`simulate_one` of each candidate of the group, in its order."""
    return [simulate_one(cfg, graph_for) for cfg in group.candidates]


def compute_floor_ns(cfg: WorkloadConfig, graph: TracedGraph) -> int:
    """A lower bound on ``cfg``'s simulated step (see the module docstring): the largest, over
    the graph's roles, of every micro-batch's forward and backward passes of every model chunk
    and the optimizer, timed as :func:`~echo_view.sim.runs.simulate_workload` times them, their
    host path (:func:`host_floor_ns`) or the pipeline's fill and drain around them
    (:func:`pipeline_floor_ns`), whichever is longest."""
    cluster = cluster_from_config(cfg.cluster, cfg.source)
    colls = CollectiveCache(default_comm_model(), cluster)
    costs = role_costs(graph, cfg, colls, compute_params_for(cluster.gpu))
    per_role: dict[int, int] = {}
    for (role, phase, _), tc in costs.items():
        times = 1 if phase == "optimizer" else cfg.micro_batches
        per_role[role] = per_role.get(role, 0) + times * tc.total_ns
    compute = max(per_role.values(), default=0)
    return max(compute, host_floor_ns(cfg, graph, costs), pipeline_floor_ns(cfg, graph, costs))


def pipeline_floor_ns(
    cfg: WorkloadConfig, graph: TracedGraph, costs: dict[tuple[int, str, int], TableCost]
) -> int:
    """A lower bound from the pipeline's dependencies: stage ``s`` starts no pass before each
    earlier stage has run its first forward (chunk 0 of the first micro-batch, whose output
    the next stage waits for), then runs all of its passes on its compute stream, and after its
    last pass (in every schedule a backward of chunk 0: ``tests/sim/test_schedule.py``) each
    earlier stage still runs that backward, while stage ``s`` runs its optimizer. The largest
    such chain over the stages: the pipeline's fill and drain, which the per-stage sum leaves
    out. Transfers and everything else on the chains only lengthen them, so leaving them out
    keeps a bound."""
    p = cfg.parallel
    if p.pp < 2:
        return 0
    role_of = {s: ri for ri, role in enumerate(graph.roles) for s in role.stages}
    m, v = cfg.micro_batches, p.virtual_stages

    def total(stage: int, phase: str, chunk: int) -> int:
        return costs[(role_of[stage], phase, chunk)].total_ns

    best = head = tail = 0  # the earlier stages' first forward and last backward
    for s in range(p.pp):
        passes = m * sum(total(s, ph, c) for ph in ("forward", "backward") for c in range(v))
        best = max(best, head + passes + max(total(s, "optimizer", 0), tail))
        head += total(s, "forward", 0)
        tail += total(s, "backward", 0)
    return best


def host_floor_ns(
    cfg: WorkloadConfig, graph: TracedGraph, costs: dict[tuple[int, str, int], TableCost]
) -> int:
    """A lower bound from the host path with the default :class:`HostParams`: per role, its
    first stage's passes in schedule order and then the optimizer, folded into issue spans
    (:class:`~echo_view.sim.host.IssueFold`) and cut where a pipeline transfer or the
    optimizer's gradient statistics sync the host with the GPU (a sync only delays what
    follows it, so leaving one out keeps a bound)."""
    p = cfg.parallel
    host = HostParams()
    c = host.kernel_ns
    if not c:
        return 0
    spans: dict[tuple[int, str, int], tuple[int, int, int]] = {}
    for key, tc in costs.items():
        issue = host.issue_ns(tc.fills, tc.waits)
        spans[key] = (issue_span_ns(tc.dur_ns, issue), tc.total_ns, int(issue.sum()))
    cut_optimizer = cfg.training.optimizer_sync and p.fsdp == "none"
    best = 0
    for ri, role in enumerate(graph.roles):
        for stage in role.stages[:1]:  # any one stage bounds the step; the first is enough
            # Whole arrays, not a loop over passes: a step can hold millions of them.
            forward, chunk, _ = schedule_arrays(
                stage, p.pp, cfg.micro_batches, p.virtual_stages, p.microbatch_group
            )
            table = np.array(
                [
                    [spans[(ri, phase, c)] for c in range(p.virtual_stages)]
                    for phase in ("backward", "forward")
                ],
                dtype=np.int64,
            )  # [phase, chunk, (span, gpu, issued)]
            runs = np.concatenate(
                [table[forward.astype(np.int64), chunk], [spans[(ri, "optimizer", 0)]]]
            )
            cuts = np.append(pipe_syncs_before(p, stage, forward, chunk), cut_optimizer)
            best = max(best, folded_spans_ns(runs[:, 0], runs[:, 1], runs[:, 2], cuts))
    return best


def floor_layouts(
    cfgs: Sequence[WorkloadConfig], graph_for: Callable[[WorkloadConfig], TracedGraph]
) -> list[int | None]:
    """:func:`compute_floor_ns` of each layout, in order; ``None`` for one too large to
    simulate (:func:`~echo_view.sim.compose.too_large_to_simulate`)."""
    out: list[int | None] = []
    for cfg in cfgs:
        graph = graph_for(cfg)
        out.append(None if too_large_to_simulate(graph, cfg) else compute_floor_ns(cfg, graph))
    return out


def floor_order(
    groups: Sequence[Group], floors: Sequence[Sequence[int | None]]
) -> list[tuple[int, int, WorkloadConfig]]:
    """Every candidate with a floor as ``(compute floor, peak bytes, config)``, ascending floor
    (ties by layout name); ``floors`` holds :func:`floor_layouts` of each group's candidates."""
    rows = [
        (f, peak, cfg)
        for g, fl in zip(groups, floors, strict=True)
        for f, peak, cfg in zip(fl, g.peaks, g.candidates, strict=True)
        if f is not None
    ]
    return sorted(rows, key=lambda r: (r[0], layout_name(r[2])))


class Frontier:
    """What the layouts simulated so far rule out (see the module docstring): the ``top``
    fastest steps, and the step-time / memory Pareto front (ascending step, descending
    peak). With ``keep_front`` false only the ``top`` fastest are kept exact: the Pareto
    marks of those (the layouts faster than one of them are among them) stay exact too,
    the rest of the front does not."""

    def __init__(self, top: int, keep_front: bool = True) -> None:
        if top < 1:
            raise ValueError(f"top must be at least 1, got {top}")
        self.top = top
        self.keep_front = keep_front
        self._fastest: list[float] = []
        self._front: list[tuple[float, int]] = []

    def add(self, r: Ranked) -> None:
        """Count a simulated layout."""
        bisect.insort(self._fastest, r.step_time_s)
        del self._fastest[self.top :]
        # Keep the front: drop the points the new one dominates, add it unless dominated.
        if any(s <= r.step_time_s and m <= r.peak_bytes for s, m in self._front):
            return
        kept = [(s, m) for s, m in self._front if not (r.step_time_s <= s and r.peak_bytes <= m)]
        bisect.insort(kept, (r.step_time_s, r.peak_bytes))
        self._front = kept

    def excludes(self, floor_ns: int, peak_bytes: int) -> bool:
        """Whether a layout with this compute floor and peak can be neither among the ``top``
        fastest nor on the Pareto front, whatever its simulated step."""
        floor_s = floor_ns / 1e9
        if len(self._fastest) < self.top or self._fastest[-1] >= floor_s:
            return False
        if not self.keep_front:
            return True
        # Front points faster than the floor: the last of them is the lightest.
        i = bisect.bisect_left(self._front, (floor_s, -1))
        return i > 0 and self._front[i - 1][1] <= peak_bytes


class SerialReplay:
    """The decisions of a serial search with a pass budget, replayed in floor order while the
    results of a parallel one come back in any order.

    Serially, layouts are taken in floor order; one the frontier of the results before it
    rules out is skipped, every other (a *needed* one) is simulated and its passes charged,
    until the charge reaches the budget. A parallel search decides with fewer results at hand,
    so it simulates every needed layout and maybe a few more; a result the frontier of the
    needed ones before it rules out leaves that frontier as it was (it is neither among the
    fastest nor off the front), so replaying the layouts in order finds the needed ones, the
    serial charge and the serial stop whatever the order. :meth:`may_take` lets the parallel
    search take a layout only when the serial one surely would: the charge so far plus every
    undecided taken layout's passes is under the budget.
    """

    def __init__(self, top: int, keep_front: bool, budget: int) -> None:
        self.frontier = Frontier(top, keep_front)
        self.budget = budget
        #: Passes of the needed layouts replayed so far, and of the taken ones not yet decided.
        self.charge = 0
        self.undecided = 0
        self._rows: list[tuple[int, int, int, bool]] = []  # floor, peak, passes, submitted
        self._results: dict[int, Ranked | None] = {}
        self._next = 0

    def may_take(self) -> bool:
        """Whether the serial search surely takes the next layout in floor order."""
        return self.charge + self.undecided < self.budget

    def take(self, floor_ns: int, peak_bytes: int, n_passes: int, submitted: bool) -> int:
        """Record the next layout in floor order (``submitted``: simulated, not skipped);
        returns its index for :meth:`done`."""
        self._rows.append((floor_ns, peak_bytes, n_passes, submitted))
        self.undecided += n_passes if submitted else 0
        self._advance()
        return len(self._rows) - 1

    def done(self, index: int, result: Ranked | None) -> None:
        """The result of the layout :meth:`take` returned ``index`` for (``None``: too large
        to simulate, which the serial search skips too)."""
        self._results[index] = result
        self._advance()

    def stopped(self) -> bool:
        """Whether the serial search has spent its budget."""
        return self.charge >= self.budget

    def _advance(self) -> None:
        while self._next < len(self._rows) and not self.stopped():
            floor, peak, n, submitted = self._rows[self._next]
            # A layout skipped when taken was ruled out by results this frontier also holds.
            if not submitted or self.frontier.excludes(floor, peak):
                self.undecided -= n if submitted else 0
            elif self._next in self._results:
                if (result := self._results[self._next]) is not None:
                    self.frontier.add(result)
                    self.charge += n
                self.undecided -= n
            else:
                return  # a needed layout whose result is still to come
            self._next += 1


def rank(results: Iterable[Ranked]) -> list[Ranked]:
    """Fastest first; ties by layout name, so every run orders them the same way."""
    return sorted(results, key=lambda r: (r.step_time_s, r.layout))


def pareto_front(results: Sequence[Ranked]) -> list[Ranked]:
    """The results no other is both faster and lighter than (by peak memory)."""
    front: list[Ranked] = []
    best_mem: int | None = None
    for r in sorted(results, key=lambda r: (r.step_time_s, r.peak_bytes, r.layout)):
        if best_mem is None or r.peak_bytes < best_mem:
            front.append(r)
            best_mem = r.peak_bytes
    return front
