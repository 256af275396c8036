"""Measured kernels with the work that launched them: the data the kernel cost model is fitted on.

Each GPU kernel is traced back to the CPU op that launched it — by the op's ``External id``
where the kernel carries it (PyTorch >= 2.x), otherwise kernel -> runtime launch (same
``correlation``) -> innermost CPU op on the launching thread that encloses the launch. The op's
recorded ``Input Dims`` and ``Input type`` (:attr:`Trace.op_inputs`) give its FLOPs, bytes and dtype
(:mod:`echo_view.analysis.kernel_ops`); an fp32 matrix product that ran on a tensor-core kernel
computed in TF32 and gets dtype ``tf32``. One sample is one op: the summed duration of the
kernels it launched, which is what the cost model predicts for one op of a traced graph. Ops
that also launched a memcpy, collectives and ops whose shapes cannot be counted are
left out, and :class:`ExtractStats` says how many.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.analysis.kernel_ops import SUPPORTED, op_work
from echo_view.model import EventKind, Job, LaneKind, Trace
from echo_view.model.graph import OpClass

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ExtractStats:
    """Counts along the extraction, for messages and reports."""

    kernels: int = 0
    #: Kernels traced back to a CPU op.
    linked: int = 0
    #: Distinct ops those kernels belong to, and how many of them recorded ``Input Dims``.
    ops: int = 0
    ops_with_shapes: int = 0
    #: Ops kept as samples (counted op kind, readable shapes, no memcpy).
    samples: int = 0

    def __add__(self, other: ExtractStats) -> ExtractStats:
        return ExtractStats(
            self.kernels + other.kernels,
            self.linked + other.linked,
            self.ops + other.ops,
            self.ops_with_shapes + other.ops_with_shapes,
            self.samples + other.samples,
        )


@dataclass(frozen=True, eq=False)
class KernelSamples:
    """One row per profiled op: its work and the measured time of its kernels.

    ``trace`` indexes :attr:`sources` (one per trace read), ``shape`` indexes :attr:`shapes`
    (op name, input sizes and types: ops with one shape key do the same work), ``dtype``
    indexes :attr:`dtypes`, ``device`` indexes :attr:`devices` (``(name, total memory bytes or
    -1)`` as the trace reports its GPU; -1 when the trace names none).
    """

    trace: npt.NDArray[np.int32]
    op_class: npt.NDArray[np.uint8]
    flops: F64
    nbytes: F64
    dtype: npt.NDArray[np.int32]
    measured_ns: I64
    kernels: npt.NDArray[np.int32]
    shape: npt.NDArray[np.int32]
    device: npt.NDArray[np.int32]
    sources: tuple[str, ...]
    shapes: tuple[str, ...]
    dtypes: tuple[str, ...]
    devices: tuple[tuple[str, int], ...]
    stats: ExtractStats

    def __len__(self) -> int:
        return len(self.trace)

    def select(self, mask: npt.NDArray[np.bool_]) -> KernelSamples:
        """The rows where ``mask`` holds (the string tables are kept whole)."""
        return KernelSamples(
            trace=self.trace[mask],
            op_class=self.op_class[mask],
            flops=self.flops[mask],
            nbytes=self.nbytes[mask],
            dtype=self.dtype[mask],
            measured_ns=self.measured_ns[mask],
            kernels=self.kernels[mask],
            shape=self.shape[mask],
            device=self.device[mask],
            sources=self.sources,
            shapes=self.shapes,
            dtypes=self.dtypes,
            devices=self.devices,
            stats=self.stats,
        )


def _innermost(op_rows: I64, op_start: I64, op_end: I64, q_t: I64) -> npt.NDArray[np.int64]:
    """For each time in ``q_t``, the row of the innermost op (of one thread) open at that time,
    or -1. Ops on one thread nest, so the open ops form a chain; its innermost member is the
    latest-starting op at depth ``open count - 1``."""
    out = np.full(len(q_t), -1, dtype=np.int64)
    if not len(op_rows) or not len(q_t):
        return out
    order = np.lexsort((-op_end, op_start))
    rows, starts, ends = op_rows[order], op_start[order], op_end[order]
    ends_sorted = np.sort(ends)
    depth = np.arange(len(rows)) - np.searchsorted(ends_sorted, starts, side="right")
    open_at = np.searchsorted(starts, q_t, side="right") - np.searchsorted(
        ends_sorted, q_t, side="right"
    )
    want = open_at - 1
    for d in np.unique(want[want >= 0]):
        at_d = np.flatnonzero(depth == d)
        q = np.flatnonzero(want == d)
        pos = np.searchsorted(starts[at_d], q_t[q], side="right") - 1
        ok = pos >= 0
        cand = at_d[pos[ok]]
        inside = (starts[cand] <= q_t[q[ok]]) & (ends[cand] > q_t[q[ok]])
        out[q[ok][inside]] = rows[cand[inside]]
    return out


def launching_ops(trace: Trace, work: I64, *, use_external_id: bool = True) -> I64:
    """The CPU op row that launched each GPU work row of ``work`` (-1 when none);
    ``use_external_id=False`` links through the launch's thread only."""
    ev = trace.events
    kind = ev.kind
    cpu = np.flatnonzero(kind == EventKind.CPU_OP)
    out = np.full(len(work), -1, dtype=np.int64)
    # The launch of each work item: the runtime event with its correlation id.
    rt = np.flatnonzero((kind == EventKind.RUNTIME) & (ev.correlation >= 0))
    rt = rt[np.argsort(ev.correlation[rt], kind="stable")]
    corr = ev.correlation[work]
    pos = np.clip(np.searchsorted(ev.correlation[rt], corr), 0, max(len(rt) - 1, 0))
    has_launch = (corr >= 0) & (len(rt) > 0)
    if len(rt):
        has_launch &= ev.correlation[rt[pos]] == corr
    launch = np.where(has_launch, rt[pos] if len(rt) else -1, -1)
    # 1. External id shared with a CPU op (newer PyTorch tags kernels with their op's id);
    #    accepted only when that op encloses the launch, since older traces reuse the
    #    correlation id there and it can collide with an unrelated op's id.
    ext_ops = cpu[ev.external_id[cpu] >= 0] if use_external_id else cpu[:0]
    ext_ops = ext_ops[np.argsort(ev.external_id[ext_ops], kind="stable")]
    ext = ev.external_id[work]
    if len(ext_ops):
        p = np.clip(np.searchsorted(ev.external_id[ext_ops], ext), 0, len(ext_ops) - 1)
        hit = (ext >= 0) & (ev.external_id[ext_ops[p]] == ext)
        cand = ext_ops[p]
        t = ev.start_ns[np.maximum(launch, 0)]
        encloses = (
            (ev.lane[cand] == ev.lane[np.maximum(launch, 0)])
            & (ev.start_ns[cand] <= t)
            & (ev.end_ns[cand] >= t)
        )
        ok = hit & (~has_launch | encloses)
        out[ok] = cand[ok]
    # 2. The innermost op enclosing the launch on its thread.
    todo = np.flatnonzero((out < 0) & has_launch)
    if not len(todo):
        return out
    cpu = cpu[ev.dur_ns[cpu] > 0]
    lanes = ev.lane[launch[todo]]
    for lane in np.unique(lanes):
        if trace.lanes[int(lane)].kind != LaneKind.CPU_THREAD:
            continue
        ops = cpu[ev.lane[cpu] == lane]
        q = todo[lanes == lane]
        t = ev.start_ns[launch[q]]
        out[q] = _innermost(ops, ev.start_ns[ops], ev.end_ns[ops], t)
    return out


class _Tables:
    """String tables shared by the traces of one extraction."""

    def __init__(self) -> None:
        self.ids: dict[str, dict[Any, int]] = {"shape": {}, "dtype": {}, "device": {}}

    def intern(self, table: str, key: Any) -> int:
        ids = self.ids[table]
        i = ids.get(key)
        if i is None:
            i = ids[key] = len(ids)
        return i

    def strings(self, table: str) -> tuple[Any, ...]:
        return tuple(self.ids[table])


def _trace_samples(
    trace: Trace, index: int, tables: _Tables
) -> tuple[dict[str, npt.NDArray[Any]], ExtractStats]:
    ev = trace.events
    kind = ev.kind
    is_work = np.isin(kind, [EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET])
    if len(trace.collectives):
        is_work[trace.collectives.event] = False
    work = np.flatnonzero(is_work)
    n_kernels = int(np.count_nonzero(kind[work] == EventKind.KERNEL))
    op = launching_ops(trace, work)
    linked = op >= 0
    work, op = work[linked], op[linked]
    if not len(work):
        return {}, ExtractStats(kernels=n_kernels)
    ops, inv = np.unique(op, return_inverse=True)
    measured = np.bincount(inv, weights=ev.dur_ns[work].astype(np.float64), minlength=len(ops))
    count = np.bincount(inv, minlength=len(ops))
    # A memset is part of an op's GPU work (cuBLAS clears its split-K workspace); a memcpy
    # moves data over PCIe, which the cost model does not describe.
    copies = np.bincount(inv, weights=kind[work] == EventKind.MEMCPY, minlength=len(ops))
    tensor_core = np.bincount(inv, weights=_tensor_core(trace, work), minlength=len(ops)) > 0
    first_lane = np.full(len(ops), -1, dtype=np.int64)
    first_lane[inv[::-1]] = ev.lane[work][::-1]
    # Only op kinds whose work can be counted, and only ops whose GPU work was all kernels.
    names = trace.strings.strings
    name_ids = np.unique(ev.name[ops])
    counted = np.array([names[i].removeprefix("aten::") in SUPPORTED for i in name_ids])
    keep = np.isin(ev.name[ops], name_ids[counted]) & (copies == 0) & (measured > 0)
    device_of = {d.index: d for d in trace.devices}
    rows: dict[str, list[Any]] = {
        k: [] for k in ("op_class", "flops", "nbytes", "dtype", "ns", "kernels", "shape", "dev")
    }
    inputs = trace.op_inputs
    at = inputs.row_of(ops)
    for j in np.flatnonzero(keep & (at >= 0)):
        i = int(at[j])
        dims, types = inputs.value(int(inputs.dims[i])), inputs.value(int(inputs.types[i]))
        if dims is None or types is None:
            continue
        name = names[int(ev.name[ops[j]])]
        w = op_work(name, dims, types, inputs.value(int(inputs.concrete[i])))
        if w is None:
            continue
        dtype = w.dtype
        if dtype == "fp32" and w.op_class == OpClass.GEMM and tensor_core[j]:
            dtype = "tf32"
        lane = trace.lanes[int(first_lane[j])]
        dev = device_of.get(lane.device)
        dev_key = (dev.name, dev.total_memory_bytes or -1) if dev is not None else ("", -1)
        rows["op_class"].append(w.op_class)
        rows["flops"].append(w.flops)
        rows["nbytes"].append(w.nbytes)
        rows["dtype"].append(tables.intern("dtype", dtype))
        rows["ns"].append(int(measured[j]))
        rows["kernels"].append(int(count[j]))
        rows["shape"].append(tables.intern("shape", f"{name} {_listed(dims)} {_listed(types)}"))
        rows["dev"].append(tables.intern("device", dev_key))
    stats = ExtractStats(
        kernels=n_kernels,
        linked=int(np.count_nonzero(kind[work] == EventKind.KERNEL)),
        ops=len(ops),
        ops_with_shapes=int(np.count_nonzero(at >= 0)),
        samples=len(rows["ns"]),
    )
    cols: dict[str, npt.NDArray[Any]] = {
        "trace": np.full(len(rows["ns"]), index, dtype=np.int32),
        "op_class": np.array(rows["op_class"], dtype=np.uint8),
        "flops": np.array(rows["flops"], dtype=np.float64),
        "nbytes": np.array(rows["nbytes"], dtype=np.float64),
        "dtype": np.array(rows["dtype"], dtype=np.int32),
        "measured_ns": np.array(rows["ns"], dtype=np.int64),
        "kernels": np.array(rows["kernels"], dtype=np.int32),
        "shape": np.array(rows["shape"], dtype=np.int32),
        "device": np.array(rows["dev"], dtype=np.int32),
    }
    return cols, stats


# Kernel names of tensor-core GEMMs; fed fp32 data, they compute in TF32 (PyTorch's
# allow_tf32), whose peak is 8x the fp32 one on Ampere.
_TENSOR_CORE_MARKERS = ("tf32", "tensorop", "s1688")


def _tensor_core(trace: Trace, work: I64) -> npt.NDArray[np.bool_]:
    """Whether each work row is a tensor-core GEMM kernel, by its name."""
    ids, inv = np.unique(trace.events.name[work], return_inverse=True)
    names = trace.strings.strings
    flag = np.array(
        [any(m in names[int(i)].lower() for m in _TENSOR_CORE_MARKERS) for i in ids], dtype=bool
    )
    return flag[inv] if len(ids) else np.zeros(0, dtype=bool)


def _listed(value: Any) -> Any:
    """``value`` with its tuples as lists: shape keys are written as the profiler lists them."""
    return [_listed(v) for v in value] if isinstance(value, tuple) else value


def kernel_samples(job: Job, sources: tuple[str, ...] | None = None) -> KernelSamples:
    """Every countable op of every trace of ``job`` with its measured kernel time.
    ``sources`` names the traces (default: ``rank N``)."""
    names = sources if sources is not None else tuple(f"rank {t.rank}" for t in job.traces)
    if len(names) != len(job.traces):
        raise ValueError("sources must name each trace of the job")
    return _combine([job], [names])


def samples_of_jobs(jobs: list[Job], sources: list[tuple[str, ...]]) -> KernelSamples:
    """:func:`kernel_samples` over several jobs at once (one table, shared shape ids)."""
    return _combine(jobs, sources)


def _combine(jobs: list[Job], sources: list[tuple[str, ...]]) -> KernelSamples:
    tables = _Tables()
    parts: list[dict[str, npt.NDArray[Any]]] = []
    stats = ExtractStats()
    all_sources: list[str] = []
    for job, names in zip(jobs, sources, strict=True):
        for trace, name in zip(job.traces, names, strict=True):
            cols, st = _trace_samples(trace, len(all_sources), tables)
            all_sources.append(name)
            stats = stats + st
            if cols:
                parts.append(cols)
    keys = (
        "trace", "op_class", "flops", "nbytes", "dtype", "measured_ns", "kernels", "shape",
        "device",
    )  # fmt: skip
    dtypes = ("i4", "u1", "f8", "f8", "i4", "i8", "i4", "i4", "i4")
    merged = {
        k: np.concatenate([p[k] for p in parts]) if parts else np.empty(0, dtype=dt)
        for k, dt in zip(keys, dtypes, strict=True)
    }
    return KernelSamples(
        **merged,
        sources=tuple(all_sources),
        shapes=tables.strings("shape"),
        dtypes=tables.strings("dtype"),
        devices=tables.strings("device"),
        stats=stats,
    )
