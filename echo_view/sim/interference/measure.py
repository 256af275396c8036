"""Measure interference: how much slower compute kernels run while communication kernels run
beside them on the same GPU.

Per trace and GPU device:

- **Communication** is every NCCL/RCCL and DeepEP kernel (the labelling of
  :func:`~echo_view.analysis.breakdown.gpu_work`); their union is the time the device
  communicates.
- **Compute** is every other kernel, plus copies and sets (class ``copy``). A compute kernel's
  *overlap* ``O`` is the part of its span during which communication is active, ``N = D - O``
  the rest (``D`` its measured duration); its overlap fraction is ``O / D``.
- **Solo time**: the same kernel running alone — same name and launch configuration (grid and
  block from the args; bytes for copies) on the same device, with no communication during
  any of its span. The solo time is the median of those instances. A kernel whose args give
  no launch configuration (ROCm Kineto traces) has none: the name alone does not tell two
  shapes apart.
- An **overlapped sample** is a compute kernel with ``O > 0`` and a solo time. Its observed
  slowdown is ``D / solo``. Under the rate model (:mod:`echo_view.sim.interference.fit`)
  it did ``N`` of solo work alone and the rest, ``solo - N``, in ``O`` of overlapped time.

Kernel classes come from a classifier the caller passes (the simulator's
:func:`echo_view.sim.compute.classify_kernel`: this layer does not import the simulator).
Everything is vectorised per device: interval unions, coverage by cumulative sums and
``searchsorted``, the dominant communication kernel of each sample by a sweep over sorted
starts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.analysis.breakdown import COMM, MEMORY, gpu_work
from echo_view.analysis.intervals import union
from echo_view.analysis.steps import find_steps, step_of_gpu_work
from echo_view.model import NONE, Job, Trace
from echo_view.model.columns import groups
from echo_view.model.workload import CLASS_COPY, OP_CLASS_NAMES
from echo_view.sim.interference.features import (
    comm_features,
    launch_config,
    launch_shapes,
    trace_generation,
)

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Classifier = Callable[[str], int]

#: Sample columns, in :class:`OverlapSamples` order (all numpy, one row per sample).
_INT_COLS = (
    "trace", "rank", "device", "row", "step", "op_class", "start_ns", "dur_ns", "solo_ns",
    "solo_count", "overlap_ns", "grid_blocks", "block_threads", "sm_count", "comm_kind",
    "comm_protocol", "comm_channels", "generation",
)  # fmt: skip
_FLOAT_COLS = ("blocks_per_sm", "occupancy", "solo_spread")


@dataclass(frozen=True, eq=False)
class OverlapSamples:
    """Overlapped compute kernels with a solo time, as columns (see the module docstring).

    ``trace`` indexes the measured jobs' traces in the order given to :func:`measure`
    (``sources[trace]`` names the file); ``step`` is the step index within the trace (-1 when
    the kernel belongs to none). ``solo_spread`` is the solo instances' median absolute
    deviation over their median (their noise). ``comm_*`` describe the communication kernel
    that overlaps the sample longest. ``comm`` holds each (trace, device)'s communication
    union as ``(starts, ends)``, for replaying samples under the rate model.
    ``alone_count[c]`` counts the kernels of class ``c`` that ran with no overlap at all.
    """

    cols: dict[str, npt.NDArray[Any]]
    sources: tuple[str, ...] = ()
    comm: dict[tuple[int, int], tuple[I64, I64]] = field(default_factory=dict)
    comm_kernels: dict[int, int] = field(default_factory=dict)
    alone_count: I64 = field(default_factory=lambda: np.zeros(len(OP_CLASS_NAMES), np.int64))

    def __len__(self) -> int:
        return len(self.cols["row"])

    @property
    def fraction(self) -> F64:
        """Overlap fraction ``O / D``."""
        d = np.maximum(self.cols["dur_ns"], 1).astype(np.float64)
        out: F64 = self.cols["overlap_ns"] / d
        return out

    @property
    def slowdown(self) -> F64:
        """Observed slowdown ``D / solo``."""
        out: F64 = self.cols["dur_ns"] / np.maximum(self.cols["solo_ns"], 1).astype(np.float64)
        return out

    def select(self, mask: npt.NDArray[np.bool_]) -> OverlapSamples:
        """The samples where ``mask`` holds (side tables shared)."""
        return OverlapSamples(
            {k: v[mask] for k, v in self.cols.items()},
            self.sources,
            self.comm,
            self.comm_kernels,
            self.alone_count,
        )

    @staticmethod
    def concat(parts: Sequence[OverlapSamples]) -> OverlapSamples:
        """Samples of several measurements, trace indices renumbered to stay distinct."""
        cols: dict[str, list[npt.NDArray[Any]]] = {k: [] for k in (*_INT_COLS, *_FLOAT_COLS)}
        sources: list[str] = []
        comm: dict[tuple[int, int], tuple[I64, I64]] = {}
        comm_kernels: dict[int, int] = {}
        alone = np.zeros(len(OP_CLASS_NAMES), dtype=np.int64)
        for p in parts:
            base = len(sources)
            for k in cols:
                v = p.cols[k]
                cols[k].append(v + base if k == "trace" else v)
            sources.extend(p.sources)
            comm.update({(t + base, d): iv for (t, d), iv in p.comm.items()})
            comm_kernels.update({t + base: c for t, c in p.comm_kernels.items()})
            alone += p.alone_count
        return OverlapSamples(
            {k: np.concatenate(v) if v else _empty(k) for k, v in cols.items()},
            tuple(sources),
            comm,
            comm_kernels,
            alone,
        )


def _empty(col: str) -> npt.NDArray[Any]:
    return np.empty(0, dtype=np.float64 if col in _FLOAT_COLS else np.int64)


def coverage(starts: I64, ends: I64, t: I64) -> I64:
    """Time in ``(-inf, t]`` covered by sorted disjoint intervals ``[starts, ends)``."""
    if not len(starts):
        return np.zeros(len(t), dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(ends - starts)])
    k = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
    full = before[np.maximum(k - 1, 0)]
    last = np.where(
        k > 0, np.minimum(t, ends[np.maximum(k - 1, 0)]) - starts[np.maximum(k - 1, 0)], 0
    )
    out: I64 = np.where(k > 0, full + np.maximum(last, 0), 0)
    return out


def measure(job: Job, classify: Classifier, source: str = "") -> OverlapSamples:
    """The overlapped samples of every trace of ``job`` (see the module docstring); trace
    ``i`` of the samples is ``job.traces[i]``."""
    name = source or job.source
    return OverlapSamples.concat([measure_trace(t, classify, name) for t in job.traces])


def measure_trace(trace: Trace, classify: Classifier, job_name: str) -> OverlapSamples:
    """The overlapped samples of one trace of the job named ``job_name`` (its only trace,
    index 0, named ``job_name#rankR``): a trace's samples need no other rank, so they can be
    measured where its file is read; :meth:`OverlapSamples.concat` joins them in rank order
    as :func:`measure` does."""
    return _measure_trace(trace, classify, f"{job_name}#rank{trace.rank}")


def _kernel_keys(trace: Trace, rows: I64, cfg: dict[str, Any], shapes: I64) -> I64:
    """One int id per distinct (name, grid, block, bytes, launching operator's shapes) among
    ``rows`` (``shapes`` aligned with them)."""
    if not len(rows):
        return np.empty(0, dtype=np.int64)
    table = np.stack(
        [
            trace.events.name[rows].astype(np.int64),
            cfg["grid_blocks"][rows],
            cfg["grid_x"][rows],
            cfg["block_threads"][rows],
            cfg["bytes"][rows],
            shapes,
        ],
        axis=1,
    )
    _, inv = np.unique(table, axis=0, return_inverse=True)
    return np.asarray(inv, dtype=np.int64).reshape(-1)


def _group_median(keys: I64, values: I64, n_keys: int) -> tuple[F64, I64, F64]:
    """Median, count and relative median absolute deviation of ``values`` per key."""
    med = np.full(n_keys, np.nan)
    count = np.bincount(keys, minlength=n_keys).astype(np.int64)
    spread = np.full(n_keys, np.nan)
    if not len(keys):
        return med, count, spread
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order].astype(np.float64)
    first = np.searchsorted(k, np.arange(n_keys), side="left")
    has = count > 0
    lo = first + (count - 1) // 2
    hi = first + count // 2
    med[has] = (v[lo[has]] + v[hi[has]]) / 2.0
    dev = np.abs(v - med[k])
    order2 = np.lexsort((dev, k))
    d = dev[order2]
    spread[has] = (d[lo[has]] + d[hi[has]]) / 2.0 / np.maximum(med[has], 1.0)
    return med, count, spread


def _measure_trace(trace: Trace, classify: Classifier, source: str) -> OverlapSamples:
    index = 0  # renumbered by OverlapSamples.concat
    ev = trace.events
    work = gpu_work(trace)
    cfg = launch_config(trace)
    gen = trace_generation(trace)
    sm_count = next((d.sm_count for d in trace.devices if d.sm_count), None) or NONE
    step_idx = np.full(len(ev), NONE, dtype=np.int64)
    if len(ev):
        srows, sidx = step_of_gpu_work(trace, find_steps(trace).table)
        step_idx[srows] = sidx
    # Classes: one classifier call per distinct kernel name; copies and sets are "copy".
    name_ids = ev.name[work.rows]
    uniq = np.unique(name_ids)
    cls_of = np.array([classify(trace.strings[int(i)]) for i in uniq], dtype=np.int64)
    cls = cls_of[np.searchsorted(uniq, name_ids)] if len(uniq) else np.empty(0, np.int64)
    cls[work.labels == MEMORY] = CLASS_COPY
    parts: dict[str, list[npt.NDArray[Any]]] = {k: [] for k in (*_INT_COLS, *_FLOAT_COLS)}
    comm: dict[tuple[int, int], tuple[I64, I64]] = {}
    alone = np.zeros(len(OP_CLASS_NAMES), dtype=np.int64)
    n_comm = 0
    starts, ends = ev.start_ns, ev.end_ns  # (end_ns is computed: once, not per device)
    for dev, on in groups(work.device):
        is_comm = work.labels[on] == COMM
        c_rows = work.rows[on[is_comm]]
        k_sel = on[~is_comm]
        k_rows = work.rows[k_sel]
        k_cls = cls[k_sel]
        if not len(k_rows):
            continue
        n_comm += len(c_rows)
        cs, ce = starts[c_rows], ends[c_rows]
        us, ue = union(cs, ce)
        ks, ke = starts[k_rows], ends[k_rows]
        overlap = coverage(us, ue, ke) - coverage(us, ue, ks)
        shapes = launch_shapes(trace, k_rows)
        keys = _kernel_keys(trace, k_rows, cfg, shapes)
        n_keys = int(keys.max()) + 1 if len(keys) else 0
        solo = overlap == 0
        alone += np.bincount(k_cls[solo], minlength=len(OP_CLASS_NAMES))
        med, count, spread = _group_median(keys[solo], ev.dur_ns[k_rows][solo], n_keys)
        if not len(c_rows):
            continue
        comm[(index, int(dev))] = (us, ue)
        # Without a launch configuration, shapes (or bytes, for copies) "the same kernel"
        # cannot be told from the name alone: such kernels have no solo time.
        known = (cfg["grid_blocks"][k_rows] > 0) | (cfg["bytes"][k_rows] >= 0) | (shapes >= 0)
        pick = (overlap > 0) & (count[keys] > 0) & (ev.dur_ns[k_rows] > 0) & known
        if not pick.any():
            continue
        rows = k_rows[pick]
        best = longest_overlap(ks[pick], ke[pick], cs, ce)
        ckind, cproto, cchan = comm_features(trace, c_rows[best], cfg["grid_x"])
        n = len(rows)
        cols = {
            "trace": np.full(n, index),
            "rank": np.full(n, trace.rank),
            "device": np.full(n, int(dev)),
            "row": rows,
            "step": step_idx[rows],
            "op_class": k_cls[pick],
            "start_ns": ev.start_ns[rows],
            "dur_ns": ev.dur_ns[rows],
            "solo_ns": np.rint(med[keys[pick]]),
            "solo_count": count[keys[pick]],
            "overlap_ns": overlap[pick],
            "grid_blocks": cfg["grid_blocks"][rows],
            "block_threads": cfg["block_threads"][rows],
            "sm_count": np.full(n, sm_count),
            "comm_kind": ckind,
            "comm_protocol": cproto,
            "comm_channels": cchan,
            "generation": np.full(n, gen),
            "blocks_per_sm": cfg["blocks_per_sm"][rows],
            "occupancy": cfg["occupancy"][rows],
            "solo_spread": spread[keys[pick]],
        }
        for k, v in cols.items():
            parts[k].append(np.asarray(v, dtype=np.float64 if k in _FLOAT_COLS else np.int64))
    return OverlapSamples(
        {k: np.concatenate(v) if v else _empty(k) for k, v in parts.items()},
        (source,),
        comm,
        {index: n_comm},
        alone,
    )


def longest_overlap(ks: I64, ke: I64, cs: I64, ce: I64) -> I64:
    """For each interval ``[ks, ke)``, the index of the interval of ``[cs, ce)`` that overlaps
    it longest (every ``[ks, ke)`` overlaps at least one)."""
    order = np.argsort(cs, kind="stable")
    s, e = cs[order], ce[order]
    reach = np.maximum.accumulate(e)
    lo = np.searchsorted(reach, ks, side="right")  # before lo every interval ended by ks
    hi = np.searchsorted(s, ke, side="left")  # from hi on every interval starts after ke
    span = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(len(ks)), span)
    heads = np.cumsum(span) - span
    cand = np.repeat(lo, span) + (np.arange(int(span.sum())) - np.repeat(heads, span))
    ov = np.minimum(ke[owner], e[cand]) - np.maximum(ks[owner], s[cand])
    pick = np.lexsort((-ov, owner))
    first = np.ones(len(pick), dtype=bool)
    first[1:] = owner[pick][1:] != owner[pick][:-1]
    best = np.zeros(len(ks), dtype=np.int64)
    best[owner[pick][first]] = cand[pick][first]
    out: I64 = order[best]
    return out


@dataclass(frozen=True, slots=True)
class ClassRow:
    """One row of the slowdown table."""

    op_class: str
    samples: int
    alone: int
    median_slowdown: float
    p90_slowdown: float
    median_fraction: float
    mostly_samples: int
    mostly_median_slowdown: float
    mostly_p90_slowdown: float
    comm_kinds: dict[str, int]


def class_table(samples: OverlapSamples, mostly: float = 0.5) -> list[ClassRow]:
    """Per class: the observed slowdown (median, p90) of all samples and of those overlapped
    for at least ``mostly`` of their duration, the median overlap fraction, kernels that ran
    alone, and which collectives overlapped them (counts by kind)."""
    from echo_view.model.kinds import CollectiveKind

    out: list[ClassRow] = []
    cls = samples.cols["op_class"]
    slow = samples.slowdown
    frac = samples.fraction
    for c, name in enumerate(OP_CLASS_NAMES):
        if name == "collective":
            continue
        sel = cls == c
        if not sel.any() and not samples.alone_count[c]:
            continue
        big = sel & (frac >= mostly)
        kinds, counts = np.unique(samples.cols["comm_kind"][sel], return_counts=True)
        out.append(
            ClassRow(
                op_class=name,
                samples=int(sel.sum()),
                alone=int(samples.alone_count[c]),
                median_slowdown=_q(slow[sel], 50),
                p90_slowdown=_q(slow[sel], 90),
                median_fraction=_q(frac[sel], 50),
                mostly_samples=int(big.sum()),
                mostly_median_slowdown=_q(slow[big], 50),
                mostly_p90_slowdown=_q(slow[big], 90),
                comm_kinds={
                    CollectiveKind(int(k)).label: int(n)
                    for k, n in zip(kinds.tolist(), counts.tolist(), strict=True)
                },
            )
        )
    return out


def _q(x: F64, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


__all__ = [
    "ClassRow",
    "OverlapSamples",
    "class_table",
    "coverage",
    "longest_overlap",
    "measure",
    "measure_trace",
]
