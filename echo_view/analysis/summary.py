"""Whole-job summary: per-rank step breakdowns, the slowest rank, top kernels and collectives.

:meth:`JobSummary.to_json` gives the stable object ``echo-view info --json`` prints
(``"schema": "echo-view.info/1"``; keys are only ever added, never renamed). All times are
integer nanoseconds.

```
schema          "echo-view.info/1"
source          the job's source (paths as given)
job             ranks [int], world_size int|null, predicted bool, events int,
                devices [{rank, index, name}] (GPUs that ran work),
                clock_alignment {method, uncertainty_ns, offsets_ns [int], note},
                collectives {total int, by_kind {kind: count}}
ranks           one object per (rank, device) -- device is null for a rank without GPU work:
                {rank, device, steps, step_rule, steps_detected, cpu_step_ns, step_ns,
                 compute_ns, comm_ns, exposed_comm_ns, memory_ns, idle_ns,   <- means per step
                 total {step_ns, compute_ns, comm_ns, exposed_comm_ns, memory_ns, idle_ns},
                 per_step [{step, cpu_start_ns, cpu_ns, gpu_end_ns, gpu_span_ns,
                            window_start_ns, step_ns,
                            compute_ns, comm_ns, exposed_comm_ns, memory_ns, idle_ns}]}
slowest_rank    {rank, device, step_ns} | null   (largest mean step time)
top_kernels     [{name, count, total_ns, ranks}]  by total_ns, descending
top_collectives [{kind, count, total_ns, bytes}]  by total_ns; bytes -1 when unknown
```

``cpu_ns`` is the CPU step span (``ProfilerStep`` duration); ``gpu_span_ns`` runs from the step's
CPU start to the end of the last GPU work it launched (``null`` when it launched none);
``step_ns`` is the step window the categories partition. Category times of a rank without GPU
work are ``null``. For every other row and step,
``compute_ns + exposed_comm_ns + memory_ns + idle_ns == step_ns`` (see
:mod:`echo_view.analysis.breakdown` for the definitions). Means are rounded to whole ns.
Top kernels and collectives cover the whole trace, not only its steps; a collective's time is
its GPU kernel's duration.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.analysis.breakdown import StepBreakdown, breakdown, step_windows
from echo_view.analysis.steps import StepDetection, find_steps
from echo_view.model import (
    GPU_KINDS,
    NONE,
    CollectiveKind,
    EventKind,
    Job,
    JobHead,
    StepTable,
    Trace,
    parse_comm_kernel_name,
)
from echo_view.model.columns import groups
from echo_view.model.schema import json_schema

I64 = npt.NDArray[np.int64]

SCHEMA = json_schema("info")
CATEGORIES = ("compute_ns", "comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")
#: The keys of each ``per_step`` object, in order.
STEP_FIELDS = (
    "step", "cpu_start_ns", "cpu_ns", "gpu_end_ns", "gpu_span_ns", "window_start_ns", "step_ns",
    *CATEGORIES,
)  # fmt: skip


@dataclass(frozen=True)
class RankRow:
    """Totals over the steps of one (rank, device); ``device`` is None without GPU work."""

    rank: int
    device: int | None
    steps: int
    step_rule: str
    steps_detected: bool
    cpu_step_ns: int
    step_ns: int
    categories: dict[str, int] | None
    per_step: list[dict[str, int | None]]

    def mean(self, total: int) -> int:
        return round(total / self.steps) if self.steps else 0

    @property
    def mean_step_ns(self) -> int:
        return self.mean(self.step_ns)


@dataclass(frozen=True)
class TopItem:
    """One line of a top-N list."""

    name: str
    count: int
    total_ns: int
    extra: int


@dataclass(frozen=True)
class JobSummary:
    """Everything ``echo-view info`` shows about a job."""

    job: JobHead
    rows: list[RankRow]
    device_list: list[dict[str, Any]]
    top_kernels: list[TopItem]
    top_collectives: list[TopItem]
    collectives_by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def slowest(self) -> RankRow | None:
        """The (rank, device) with the largest mean step time (first rank on ties)."""
        timed = [r for r in self.rows if r.steps]
        return max(timed, key=lambda r: r.mean_step_ns) if timed else None

    def devices(self) -> list[dict[str, Any]]:
        """The GPUs that ran work, with their names where the trace gives them."""
        return self.device_list

    def to_json(self) -> dict[str, Any]:
        """The stable JSON object described in the module docstring."""
        job = self.job
        al = job.alignment
        slowest = self.slowest
        return {
            "schema": SCHEMA,
            "source": job.source,
            "job": {
                "ranks": list(job.ranks),
                "world_size": job.world_size,
                "predicted": job.predicted,
                "events": job.events,
                "devices": self.devices(),
                "clock_alignment": {
                    "method": al.method,
                    "uncertainty_ns": al.uncertainty_ns,
                    "offsets_ns": list(al.offsets_ns),
                    "note": al.note,
                },
                "collectives": {
                    "total": sum(self.collectives_by_kind.values()),
                    "by_kind": dict(self.collectives_by_kind),
                },
            },
            "ranks": [_row_json(r) for r in self.rows],
            "slowest_rank": None
            if slowest is None
            else {"rank": slowest.rank, "device": slowest.device, "step_ns": slowest.mean_step_ns},
            "top_kernels": [
                {"name": k.name, "count": k.count, "total_ns": k.total_ns, "ranks": k.extra}
                for k in self.top_kernels
            ],
            "top_collectives": [
                {"kind": c.name, "count": c.count, "total_ns": c.total_ns, "bytes": c.extra}
                for c in self.top_collectives
            ],
        }


def _row_json(r: RankRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rank": r.rank,
        "device": r.device,
        "steps": r.steps,
        "step_rule": r.step_rule,
        "steps_detected": r.steps_detected,
        "cpu_step_ns": r.mean(r.cpu_step_ns),
        "step_ns": r.mean_step_ns,
    }
    for name in CATEGORIES:
        out[name] = None if r.categories is None else r.mean(r.categories[name])
    total: dict[str, int | None] = {"step_ns": r.step_ns}
    for name in CATEGORIES:
        total[name] = None if r.categories is None else r.categories[name]
    out["total"] = total
    out["per_step"] = r.per_step
    return out


def rank_rows(bd: StepBreakdown, steps: StepDetection | None = None) -> list[RankRow]:
    """One :class:`RankRow` per device of a breakdown.

    A trace without GPU work has no breakdown rows; it gets one device-less row whose step
    times come from ``steps`` (its steps, found again when not given) and whose categories
    are ``None``.
    """
    if not len(bd):
        return [_cpu_only_row(bd, steps)]
    rows = []
    cpu_ns, window_ns = bd.cpu_ns, bd.window_ns  # (computed columns: once, not per step)
    for dev, sel in groups(bd.device):
        per_step: list[dict[str, int | None]] = []
        for i in sel.tolist():
            step: dict[str, int | None] = {
                "step": int(bd.step[i]),
                "cpu_start_ns": int(bd.cpu_start_ns[i]),
                "cpu_ns": int(cpu_ns[i]),
                "gpu_end_ns": int(bd.gpu_end_ns[i]),
                "gpu_span_ns": _span(int(bd.cpu_start_ns[i]), int(bd.gpu_end_ns[i])),
                "window_start_ns": int(bd.window_start_ns[i]),
                "step_ns": int(window_ns[i]),
            }
            step.update({name: int(getattr(bd, name)[i]) for name in CATEGORIES})
            per_step.append(step)
        rows.append(
            RankRow(
                rank=bd.rank,
                device=dev,
                steps=len(sel),
                step_rule=bd.rule,
                steps_detected=bd.detected,
                cpu_step_ns=int(cpu_ns[sel].sum()),
                step_ns=int(window_ns[sel].sum()),
                categories={name: int(getattr(bd, name)[sel].sum()) for name in CATEGORIES},
                per_step=per_step,
            )
        )
    return rows


def _span(cpu_start: int, gpu_end: int) -> int | None:
    return gpu_end - cpu_start if gpu_end != NONE else None


def _cpu_only_row(bd: StepBreakdown, steps: StepDetection | None) -> RankRow:
    table = steps.table if steps is not None else StepTable.empty()
    order = np.argsort(table.start_ns, kind="stable")
    cpu_start = np.asarray(table.start_ns, dtype=np.int64)[order]
    cpu_end = np.asarray(table.end_ns, dtype=np.int64)[order]
    gpu_end = np.asarray(table.gpu_end_ns, dtype=np.int64)[order]
    win_start, win_end = step_windows(cpu_start, cpu_end, gpu_end)
    per_step: list[dict[str, int | None]] = [
        {
            "step": int(n),
            "cpu_start_ns": int(cs),
            "cpu_ns": int(ce - cs),
            "gpu_end_ns": int(ge),
            "gpu_span_ns": _span(int(cs), int(ge)),
            "window_start_ns": int(ws),
            "step_ns": int(we - ws),
            **dict.fromkeys(CATEGORIES),
        }
        for n, cs, ce, ge, ws, we in zip(
            np.asarray(table.number)[order],
            cpu_start,
            cpu_end,
            gpu_end,
            win_start,
            win_end,
            strict=True,
        )
    ]
    return RankRow(
        rank=bd.rank,
        device=None,
        steps=len(order),
        step_rule=bd.rule,
        steps_detected=bd.detected,
        cpu_step_ns=int((cpu_end - cpu_start).sum()),
        step_ns=int((win_end - win_start).sum()),
        categories=None,
        per_step=per_step,
    )


def _kernel_totals(trace: Trace) -> tuple[I64, I64, I64]:
    """(name ids, counts, total durations) of the trace's kernels."""
    k = trace.mask(EventKind.KERNEL)
    names = trace.events.name[k]
    uniq, inv = np.unique(names, return_inverse=True)
    counts = np.bincount(inv, minlength=len(uniq))
    totals = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(totals, inv, trace.events.dur_ns[k])
    return uniq.astype(np.int64), counts.astype(np.int64), totals


@dataclass(frozen=True, eq=False)
class CollectiveEvents:
    """Every collective of a trace: the collective table's rows, then the communication kernels
    (NCCL, DeepEP) the table does not list (kind from the kernel name, bytes unknown,
    ``table_row`` -1)."""

    event: I64
    kind: I64
    gpu_ns: I64
    bytes: I64
    table_row: I64


def collective_events(trace: Trace) -> CollectiveEvents:
    """The collectives of ``trace``; ``gpu_ns`` is the kernel's duration (0 for a CPU-only op)."""
    ct = trace.collectives
    ev = trace.events
    on_gpu = np.isin(ev.kind[ct.event], [int(k) for k in GPU_KINDS])
    times = np.where(on_gpu, ev.dur_ns[ct.event], 0).astype(np.int64)
    kernels = np.flatnonzero(trace.mask(EventKind.KERNEL))
    kernels = kernels[~np.isin(kernels, ct.event)]
    uniq, inv = np.unique(ev.name[kernels], return_inverse=True)
    code = np.array([_nccl_kind(trace.strings[int(i)]) for i in uniq], dtype=np.int64)
    kind_of = code[inv] if len(kernels) else np.empty(0, dtype=np.int64)
    extra = kind_of >= 0
    rows = kernels[extra]
    return CollectiveEvents(
        event=np.concatenate([np.asarray(ct.event, dtype=np.int64), rows]),
        kind=np.concatenate([np.asarray(ct.kind, dtype=np.int64), kind_of[extra]]),
        gpu_ns=np.concatenate([times, ev.dur_ns[rows]]),
        bytes=np.concatenate([np.asarray(ct.bytes, dtype=np.int64), np.full(len(rows), -1)]),
        table_row=np.concatenate([np.arange(len(ct), dtype=np.int64), np.full(len(rows), -1)]),
    )


def _nccl_kind(name: str) -> int:
    info = parse_comm_kernel_name(name)
    return -1 if info is None else int(info.collective)


@dataclass(frozen=True, eq=False)
class RankSummary:
    """One rank's share of the :class:`JobSummary`, without its events (O(steps + distinct
    kernel names)): computed where the rank is read, joined by :func:`summarize_ranks`."""

    rank: int
    rows: list[RankRow]
    devices: list[dict[str, Any]]
    #: kernel name -> (count, total ns, how many of the rank's string ids carry the name)
    kernels: dict[str, tuple[int, int, int]]
    #: per :class:`CollectiveKind`: count, GPU ns, known bytes, whether some size is unknown
    coll_count: I64
    coll_total: I64
    coll_bytes: I64
    coll_unknown: npt.NDArray[np.bool_]


def rank_summary(trace: Trace) -> RankSummary:
    """The :class:`RankSummary` of ``trace``."""
    found = find_steps(trace)
    bd = breakdown(trace, found)
    names = {d.index: d.name for d in trace.devices}
    kernels: dict[str, tuple[int, int, int]] = {}
    uniq, counts, totals = _kernel_totals(trace)
    for i, c, t in zip(uniq.tolist(), counts.tolist(), totals.tolist(), strict=True):
        name = trace.strings[i]
        c0, t0, n0 = kernels.get(name, (0, 0, 0))
        kernels[name] = (c0 + c, t0 + t, n0 + 1)
    n_kinds = len(CollectiveKind)
    colls = collective_events(trace)
    kinds, times, nbytes = colls.kind, colls.gpu_ns, colls.bytes
    coll_total = np.zeros(n_kinds, dtype=np.int64)
    coll_bytes = np.zeros(n_kinds, dtype=np.int64)
    coll_unknown = np.zeros(n_kinds, dtype=bool)
    np.add.at(coll_total, kinds, times)
    np.add.at(coll_bytes, kinds, np.maximum(nbytes, 0))
    # One unknown size makes the kind's byte total unknown: -1, never a partial sum.
    coll_unknown[kinds[nbytes < 0]] = True
    return RankSummary(
        rank=trace.rank,
        rows=rank_rows(bd, found),
        devices=[{"rank": trace.rank, "index": d, "name": names.get(d)} for d in bd.devices],
        kernels=kernels,
        coll_count=np.bincount(kinds, minlength=n_kinds).astype(np.int64),
        coll_total=coll_total,
        coll_bytes=coll_bytes,
        coll_unknown=coll_unknown,
    )


def summarize(job: Job, top: int = 10) -> JobSummary:
    """Breakdowns of every rank and the job-wide summary."""
    return summarize_ranks(job.head, [rank_summary(t) for t in job.traces], top)


def summarize_ranks(head: JobHead, ranks: list[RankSummary], top: int = 10) -> JobSummary:
    """The job-wide summary from its ranks' :class:`RankSummary` (in rank order) and ``head``:
    what :func:`summarize` gives for the whole job."""
    kernel_count: Counter[str] = Counter()
    kernel_total: Counter[str] = Counter()
    kernel_ranks: Counter[str] = Counter()
    n_kinds = len(CollectiveKind)
    coll_count = np.zeros(n_kinds, dtype=np.int64)
    coll_total = np.zeros(n_kinds, dtype=np.int64)
    coll_bytes = np.zeros(n_kinds, dtype=np.int64)
    coll_unknown = np.zeros(n_kinds, dtype=bool)
    for rs in ranks:
        for name, (count, total, ids) in rs.kernels.items():
            kernel_count[name] += count
            kernel_total[name] += total
            kernel_ranks[name] += ids
        coll_count += rs.coll_count
        coll_total += rs.coll_total
        coll_bytes += rs.coll_bytes
        coll_unknown |= rs.coll_unknown

    names = sorted(kernel_total, key=lambda n: (-kernel_total[n], n))[:top]
    top_kernels = [TopItem(n, kernel_count[n], kernel_total[n], kernel_ranks[n]) for n in names]
    present = [CollectiveKind(int(k)) for k in np.flatnonzero(coll_count)]
    present.sort(key=lambda k: (-int(coll_total[k]), k.label))
    top_colls = [
        TopItem(
            k.label,
            int(coll_count[k]),
            int(coll_total[k]),
            -1 if coll_unknown[k] else int(coll_bytes[k]),
        )
        for k in present[:top]
    ]
    by_kind = {k.label: int(coll_count[k]) for k in sorted(present, key=lambda k: k.label)}
    rows = [row for rs in ranks for row in rs.rows]
    devices = [d for rs in ranks for d in rs.devices]
    return JobSummary(head, rows, devices, top_kernels, top_colls, by_kind)
