"""Flow arrows for the Perfetto exporters.

Three sources, in this order:

1. the trace's own flows (:attr:`Trace.flows`: Kineto ``ac2g`` launch -> kernel, ``fwdbwd``),
2. launch -> GPU work by CUPTI correlation id, for GPU work that (1) does not reach,
3. one chain per collective instance across ranks: the instances are matched by (process group,
   sequence number) from :class:`CollectiveTable` (by order within the group where the sequence
   number is unknown) and linked in start order, one arrow per consecutive pair.

An arrow is kept only when both ends are slices and its end does not start before its source
(Perfetto drops a flow whose end comes first). Flow ids are 1..F, unique across the file.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import GPU_WORK_KINDS, NONE, EventKind, Trace

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Mask = npt.NDArray[np.bool_]

#: Category (and name) of the correlation-derived launch -> GPU arrows, as Kineto names them.
LAUNCH_CATEGORY = "ac2g"
#: Category (and name) of the arrows between the ranks of one collective.
COLLECTIVE_CATEGORY = "collective"

_GPU_WORK = np.array([int(k) for k in GPU_WORK_KINDS], dtype=np.uint8)
_LAUNCH = np.array([int(EventKind.RUNTIME), int(EventKind.DRIVER)], dtype=np.uint8)


@dataclass(frozen=True, eq=False)
class FlowLinks:
    """Arrows from (rank index, event row) to (rank index, event row)."""

    src_rank: I32
    src_event: I32
    dst_rank: I32
    dst_event: I32
    cat: I32
    flow_id: I64
    cats: tuple[str, ...]
    from_trace: int
    from_correlation: int
    collective: int
    skipped: int

    def __len__(self) -> int:
        return len(self.flow_id)


def _correlation_links(trace: Trace) -> tuple[I64, I64]:
    """(launch row, GPU row) pairs for GPU work no trace flow reaches."""
    ev = trace.events
    reached = np.zeros(len(ev), dtype=bool)
    reached[trace.flows.dst] = True
    need = np.flatnonzero(np.isin(ev.kind, _GPU_WORK) & (ev.correlation != NONE) & ~reached)
    launch = np.flatnonzero(np.isin(ev.kind, _LAUNCH) & (ev.correlation != NONE))
    if not len(need) or not len(launch):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # Runtime before driver, then earliest, for the same correlation id.
    launch = launch[np.lexsort((ev.start_ns[launch], ev.kind[launch], ev.correlation[launch]))]
    keys = ev.correlation[launch]
    pos = np.searchsorted(keys, ev.correlation[need])
    pos_c = np.minimum(pos, len(keys) - 1)
    ok = (pos < len(keys)) & (keys[pos_c] == ev.correlation[need])
    return launch[pos_c[ok]].astype(np.int64), need[ok].astype(np.int64)


def _collective_instances(
    traces: Sequence[tuple[Trace, I64, Mask]],
) -> dict[tuple[Any, ...], list[tuple[int, int, int]]]:
    """(group, seq) -> [(aligned start, rank index, event row)], first event per rank."""
    out: dict[tuple[Any, ...], list[tuple[int, int, int]]] = {}
    for ri, (trace, start, _) in enumerate(traces):
        coll = trace.collectives
        if not len(coll):
            continue
        rows = np.flatnonzero(coll.group >= 0)
        rows = rows[np.argsort(start[coll.event[rows]], kind="stable")]
        ordinal: dict[int, int] = {}
        seen: set[tuple[Any, ...]] = set()
        for r in rows.tolist():
            g = int(coll.group[r])
            pg = trace.groups[g]
            seq = int(coll.seq[r])
            if seq >= 0:
                key: tuple[Any, ...] = (pg.name, pg.ranks, "seq", seq)
            else:
                k = ordinal.get(g, 0)
                ordinal[g] = k + 1
                key = (pg.name, pg.ranks, "order", k)
            if key in seen:
                continue
            seen.add(key)
            ev = int(coll.event[r])
            out.setdefault(key, []).append((int(start[ev]), ri, ev))
    return out


def build_links(traces: Sequence[tuple[Trace, I64, Mask]]) -> FlowLinks:
    """Flows for ranks given as (trace, start relative to the base, slice mask) per rank."""
    cats: dict[str, int] = {}
    parts: list[tuple[I64, I64, I64, I64, I64]] = []
    sources: list[I64] = []

    def add(src_r: Any, src: Any, dst_r: Any, dst: Any, cat: Any, which: int) -> None:
        arrays = [np.asarray(a, dtype=np.int64) for a in (src_r, src, dst_r, dst, cat)]
        parts.append((arrays[0], arrays[1], arrays[2], arrays[3], arrays[4]))
        sources.append(np.full(len(arrays[1]), which, dtype=np.int64))

    for ri, (trace, _, _) in enumerate(traces):
        fl = trace.flows
        if len(fl):
            local = {c: cats.setdefault(trace.strings[c], len(cats)) for c in np.unique(fl.cat)}
            cat = np.array([local[c] for c in fl.cat.tolist()], dtype=np.int64)
            add(np.full(len(fl), ri), fl.src, np.full(len(fl), ri), fl.dst, cat, 0)
        src, dst = _correlation_links(trace)
        if len(src):
            c = cats.setdefault(LAUNCH_CATEGORY, len(cats))
            add(np.full(len(src), ri), src, np.full(len(src), ri), dst, np.full(len(src), c), 1)
    chain: list[tuple[int, int, int, int]] = []
    for members in _collective_instances(traces).values():
        members.sort()
        chain.extend((a[1], a[2], b[1], b[2]) for a, b in itertools.pairwise(members))
    if chain:
        arr = np.array(chain, dtype=np.int64)
        c = cats.setdefault(COLLECTIVE_CATEGORY, len(cats))
        add(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], np.full(len(arr), c), 2)

    if parts:
        src_r, src_e, dst_r, dst_e, cat = (np.concatenate(col) for col in zip(*parts, strict=True))
    else:
        src_r = src_e = dst_r = dst_e = cat = np.zeros(0, dtype=np.int64)
    source = np.concatenate(sources) if sources else np.zeros(0, dtype=np.int64)
    keep = np.ones(len(src_e), dtype=bool)
    src_start = np.zeros(len(src_e), dtype=np.int64)
    dst_start = np.zeros(len(src_e), dtype=np.int64)
    for ri, (_, start, is_slice) in enumerate(traces):
        m = src_r == ri
        keep[m] &= is_slice[src_e[m]]
        src_start[m] = start[src_e[m]]
        m = dst_r == ri
        keep[m] &= is_slice[dst_e[m]]
        dst_start[m] = start[dst_e[m]]
    keep &= (dst_start >= src_start) & ~((src_r == dst_r) & (src_e == dst_e))
    n = int(np.count_nonzero(keep))
    counts = np.bincount(source[keep], minlength=3).tolist()
    return FlowLinks(
        src_rank=src_r[keep].astype(np.int32),
        src_event=src_e[keep].astype(np.int32),
        dst_rank=dst_r[keep].astype(np.int32),
        dst_event=dst_e[keep].astype(np.int32),
        cat=cat[keep].astype(np.int32),
        flow_id=np.arange(1, n + 1, dtype=np.int64),
        cats=tuple(cats),
        from_trace=counts[0],
        from_correlation=counts[1],
        collective=counts[2],
        skipped=len(keep) - n,
    )
