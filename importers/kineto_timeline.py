"""File columns -> event table, lanes and flows, by the trace-event format's own rules.

Nothing here is Kineto-specific: it is how Perfetto reads any Chrome JSON (formats.md §1).

- Kinds come from ``cat`` (Kineto's current and 2021 vocabularies, and echo-view's own labels),
  then from the phase: ``i``/``I``/``R``/``n`` are instants, ``C`` counters.
- ``B``/``E`` pairs become one slice per thread stack, ``b``/``e`` async pairs one slice per
  (pid, cat, id) on an async lane of the process.
- Lanes: GPU work (kernel, memcpy, memset, GPU annotation, sync) lives on ``GPU_STREAM`` lanes
  (device = the process's ``GPU n`` label or the pid, stream = the ``stream n`` thread name or the
  tid); CPU-side kinds on ``CPU_THREAD`` lanes; instants/counters/other events on the lane kind
  their thread already has, else ``CPU_THREAD`` for numeric pid/tid, else ``OTHER``.
- Flows (v1 ``s``/``t``/``f``, keyed by id, cat and name): the source binds to the deepest slice
  open on its thread at its ts, an end with ``"bp": "e"`` likewise, an end without it to the next
  slice that begins on its thread. The first ``s`` of a key is its source (Perfetto keeps the
  first); every ``t`` and ``f`` of the key becomes an arrow from it. Points that bind to nothing
  are counted, not guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from echo_view.model import (
    GPU_KINDS,
    NONE,
    EventKind,
    FlowTable,
    Lane,
    LaneKind,
)
from importers.kineto_rows import (
    I32,
    I64,
    PH_AB,
    PH_AN,
    PH_B,
    PH_C,
    PH_E,
    PH_I,
    PH_S,
    FileColumns,
    unique,
)

_K = EventKind
#: ``cat`` (lower case) -> kind.
CAT_KINDS: dict[str, EventKind] = {
    "cpu_op": _K.CPU_OP,
    "operator": _K.CPU_OP,
    "python_function": _K.PYTHON_FUNCTION,
    "user_annotation": _K.USER_ANNOTATION,
    "gpu_user_annotation": _K.GPU_ANNOTATION,
    "gpu_annotation": _K.GPU_ANNOTATION,
    "cuda_runtime": _K.RUNTIME,
    "runtime": _K.RUNTIME,
    "xpu_runtime": _K.RUNTIME,
    "mtia_runtime": _K.RUNTIME,
    "privateuse1_runtime": _K.RUNTIME,
    "cuda_driver": _K.DRIVER,
    "driver": _K.DRIVER,
    "xpu_driver": _K.DRIVER,
    "privateuse1_driver": _K.DRIVER,
    "kernel": _K.KERNEL,
    "gpu_memcpy": _K.MEMCPY,
    "memcpy": _K.MEMCPY,
    "gpu_memset": _K.MEMSET,
    "memset": _K.MEMSET,
    "cuda_sync": _K.SYNC,
    "sync": _K.SYNC,
    "xpu_sync": _K.SYNC,
    "cpu_instant_event": _K.INSTANT,
    "instant": _K.INSTANT,
    "counter": _K.COUNTER,
}
CPU_KINDS = frozenset({_K.CPU_OP, _K.PYTHON_FUNCTION, _K.USER_ANNOTATION, _K.RUNTIME, _K.DRIVER})
_GPU_LANE_KINDS = GPU_KINDS | {_K.SYNC}
_CPU, _GPU, _OTHER, _UNDECIDED = 0, 1, 2, 3
_TRAILING_INT = re.compile(r"(-?\d+)\s*$")
_GPU_LABEL = re.compile(r"\bGPU\s*(\d+)\s*$")
_STREAM = re.compile(r"^\s*stream\s+(-?\d+)\b")


@dataclass
class Timeline:
    """Event columns ready for an :class:`~echo_view.model.EventTable`, plus lanes and flows."""

    kind: npt.NDArray[np.uint8]
    start_ns: I64
    dur_ns: I64
    lane: I32
    lanes: tuple[Lane, ...]
    flows: FlowTable
    process_names: dict[str, str]
    notes: dict[str, int] = field(default_factory=dict)


def event_kinds(fc: FileColumns) -> npt.NDArray[np.uint8]:
    """Kind of each row, from its category and phase."""
    by_cat = np.array(
        [int(CAT_KINDS.get(s.lower(), _K.OTHER)) for s in fc.strings] or [int(_K.OTHER)],
        dtype=np.uint8,
    )
    kind = by_cat[fc.cat] if len(fc) else np.zeros(0, dtype=np.uint8)
    kind[(fc.phase == PH_I) | (fc.phase == PH_AN)] = int(_K.INSTANT)
    kind[fc.phase == PH_C] = int(_K.COUNTER)
    return kind


def match_ends(fc: FileColumns, dur: I64, notes: dict[str, int]) -> None:
    """Give ``B`` and ``b`` rows the duration up to their matching ``E`` / ``e``."""
    begins = np.flatnonzero((fc.phase == PH_B) | (fc.phase == PH_AB))
    if not len(begins) and not len(fc.ends):
        return
    # Walk begins and ends together in file order; stacks per thread / per async key.
    items: list[tuple[int, int, int]] = [(int(fc.index[r]), 0, int(r)) for r in begins]
    items += [(int(fc.ends.index[j]), 1, j) for j in range(len(fc.ends))]
    items.sort()
    stacks: dict[tuple[int | str, ...], list[int]] = {}
    unmatched = 0
    for _, is_end, k in items:
        if not is_end:
            if fc.phase[k] == PH_B:
                key: tuple[int | str, ...] = (0, int(fc.thread[k]))
            else:
                pid = fc.threads[int(fc.thread[k])][0]
                key = (1, pid, int(fc.cat[k]), fc.async_id.get(k, NONE))
            stacks.setdefault(key, []).append(k)
            continue
        e = fc.ends
        if e.phase[k] == PH_E:
            key = (0, int(e.thread[k]))
        else:
            key = (1, fc.threads[int(e.thread[k])][0], int(e.cat[k]), int(e.id[k]))
        stack = stacks.get(key)
        if not stack:
            unmatched += 1
            continue
        row = stack.pop()
        dur[row] = max(0, int(e.ts[k]) - int(fc.start_ns[row]))
    open_begins = sum(len(s) for s in stacks.values())
    if unmatched:
        notes["unmatched_end_events"] = unmatched
    if open_begins:
        notes["unclosed_begin_events"] = open_begins


def build_timeline(fc: FileColumns) -> Timeline:
    """Kinds, durations, lanes and flows of one file's rows (times still on the file clock)."""
    notes: dict[str, int] = {}
    kind = event_kinds(fc)
    dur = fc.dur_ns
    if len(fc.ends) or (fc.phase == PH_B).any() or (fc.phase == PH_AB).any():
        dur = dur.copy()
        match_ends(fc, dur, notes)
    negative = dur < 0
    if negative.any():
        # Perfetto drops such slices; keeping them at zero length keeps their args and links.
        notes["negative_durations_set_to_zero"] = int(negative.sum())
        dur = np.where(negative, 0, dur)
    thread = fc.thread
    threads = list(fc.threads)
    if (fc.phase == PH_AB).any() or (fc.phase == PH_AN).any():
        thread = thread.copy()
        _async_lanes(fc, thread, threads)
    names = _names(fc)
    lane, lanes = _lanes(fc, kind, thread, threads, names)
    # Nothing reads the rows' traceEvents indices after this (ends are matched, exports were
    # split before): freed here, their 4 bytes a row are room for flow binding's temporaries.
    fc.index = fc.index[:0]
    flows = resolve_flows(fc, thread, dur, notes)
    return Timeline(
        kind=kind,
        start_ns=fc.start_ns,
        dur_ns=dur,
        lane=lane,
        lanes=lanes,
        flows=flows,
        process_names={str(pid): name for pid, name in names.processes.items()},
        notes=notes,
    )


def _async_lanes(fc: FileColumns, thread: I32, threads: list[tuple[int | str, int | str]]) -> None:
    """Move async (``b``/``n``) rows to one lane per (process, category)."""
    rows = np.flatnonzero((fc.phase == PH_AB) | (fc.phase == PH_AN))
    if not len(rows):
        return
    ids: dict[tuple[int | str, int | str], int] = {}
    for r in rows.tolist():
        pid = fc.threads[int(fc.thread[r])][0]
        key = (pid, f"{fc.strings[int(fc.cat[r])] or 'async'} (async)")
        tid = ids.get(key)
        if tid is None:
            tid = ids[key] = len(threads)
            threads.append(key)
        thread[r] = tid


@dataclass
class _Names:
    processes: dict[int | str, str] = field(default_factory=dict)
    labels: dict[int | str, str] = field(default_factory=dict)
    threads: dict[int, str] = field(default_factory=dict)


def _names(fc: FileColumns) -> _Names:
    out = _Names()
    for name, thread, args in fc.metadata:
        value = args.get("name")
        pid = fc.threads[thread][0]
        if name == "process_name" and isinstance(value, str):
            out.processes[pid] = value
        elif name == "process_labels" and isinstance(args.get("labels"), str):
            out.labels[pid] = args["labels"]
        elif name == "thread_name" and isinstance(value, str):
            out.threads[thread] = value.strip()
    return out


def _device(pid: int | str, names: _Names) -> int:
    for text in (names.labels.get(pid, ""), names.processes.get(pid, "")):
        m = _GPU_LABEL.search(text)
        if m:
            return int(m.group(1))
    return pid if isinstance(pid, int) else NONE


def _stream(tid: int | str, name: str) -> int:
    m = _STREAM.match(name)
    if m:
        return int(m.group(1))
    if isinstance(tid, int):
        return tid
    m = _TRAILING_INT.search(tid)
    return int(m.group(1)) if m else NONE


def _lanes(
    fc: FileColumns,
    kind: npt.NDArray[np.uint8],
    thread: I32,
    threads: list[tuple[int | str, int | str]],
    names: _Names,
) -> tuple[I32, tuple[Lane, ...]]:
    klass_of_kind = np.full(len(_K), _UNDECIDED, dtype=np.int8)
    for k in CPU_KINDS:
        klass_of_kind[int(k)] = _CPU
    for k in _GPU_LANE_KINDS:
        klass_of_kind[int(k)] = _GPU
    klass = klass_of_kind[kind]
    has_gpu = np.zeros(len(threads), dtype=np.bool_)
    has_gpu[thread[klass == _GPU]] = True
    numeric = np.array([isinstance(p, int) and isinstance(t, int) for p, t in threads], bool)
    fallback = np.where(has_gpu, _GPU, np.where(numeric, _CPU, _OTHER)).astype(np.int8)
    undecided = klass == _UNDECIDED
    klass[undecided] = fallback[thread[undecided]]
    # Lane key thread*4 + class over a small domain: mark the keys used, number them densely.
    row_key = thread.astype(np.int32) * 4 + klass
    used = np.zeros(len(threads) * 4, dtype=np.bool_)
    used[row_key] = True
    dense = np.cumsum(used, dtype=np.int32) - 1
    lane = dense[row_key]
    del row_key, klass, undecided
    lanes: list[Lane] = []
    for key in np.flatnonzero(used).tolist():
        t, c = divmod(key, 4)
        pid, tid = threads[t]
        name = names.threads.get(t, "")
        if c == _GPU:
            stream = _stream(tid, name)
            lanes.append(
                Lane(
                    LaneKind.GPU_STREAM,
                    pid,
                    tid,
                    name or f"stream {stream}",
                    device=_device(pid, names),
                    stream=stream,
                )
            )
        elif c == _CPU:
            lanes.append(Lane(LaneKind.CPU_THREAD, pid, tid, name or f"thread {tid}"))
        else:
            label = name or " ".join(str(x) for x in (pid, tid) if x != "") or "global"
            lanes.append(Lane(LaneKind.OTHER, pid, tid, label))
    return lane, tuple(lanes)


def resolve_flows(fc: FileColumns, thread: I32, dur: I64, notes: dict[str, int]) -> FlowTable:
    """Bind flow points to rows and pair each source with its ends."""
    pts = fc.flows
    if not len(pts):
        return FlowTable.empty()
    bound = _bind(fc, thread, dur, pts.thread, pts.ts, pts.bind_enclosing | (pts.phase == PH_S))
    # Group points by key (name, cat, id); within a key the sources come first, in file order.
    is_src = pts.phase == PH_S
    order = np.lexsort((pts.index, ~is_src, pts.id, pts.cat, pts.name))
    # A key changes where any of its fields does; one field at a time (no stacked copy of the
    # three: these temporaries count towards the importer's peak memory).
    new_group = np.ones(len(order), dtype=np.bool_)
    changed = new_group[1:]
    changed[:] = False
    for col in (pts.name, pts.cat, pts.id):
        sorted_col = col[order]
        changed |= sorted_col[1:] != sorted_col[:-1]
        del sorted_col
    group = np.cumsum(new_group, dtype=np.int32)
    group -= 1
    first = order[new_group]
    del new_group
    src_of_group = np.where(is_src[first], bound[first], -2)
    del first
    is_end = ~is_src[order]
    ends = order[is_end]
    src = src_of_group[group[is_end]]
    duplicated = int(is_src.sum()) - int(unique(group[~is_end]).size)
    del src_of_group, group, order, is_end
    dst = bound[ends]
    del bound
    ok = (src >= 0) & (dst >= 0) & (pts.id[ends] != NONE)
    notes_of = {
        # Kineto writes an "f" on launches whose GPU side was not recorded: no source exists.
        "flow_ends_without_source": int((src == -2).sum()),
        "flow_points_unbound": int(((src == -1) | ((src >= 0) & (dst < 0))).sum()),
        "flow_sources_duplicated": duplicated,
    }
    notes.update({k: v for k, v in notes_of.items() if v})
    ends = ends[ok]
    return FlowTable(src=src[ok], dst=dst[ok], flow_id=pts.id[ends], cat=pts.cat[ends])


def _bind(
    fc: FileColumns,
    thread: I32,
    dur: I64,
    q_thread: I32,
    q_ts: I64,
    enclosing: npt.NDArray[np.bool_],
) -> I32 | I64:
    """Row each point binds to (-1 when none): the deepest slice open at its time on its
    thread, or (``enclosing`` False) the next slice that begins there."""
    n = len(q_ts)
    # Row numbers as int32 while they fit (FlowTable keeps int32 anyway).
    out: I32 | I64 = (
        np.full(n, -1, dtype=np.int32) if len(thread) < 2**31 else np.full(n, -1, dtype=np.int64)
    )
    q_order = np.argsort(q_thread, kind="stable")
    q_sorted = q_thread[q_order]
    q_threads = unique(q_sorted)
    q_bounds = np.append(np.searchsorted(q_sorted, q_threads), len(q_sorted)).tolist()
    del q_sorted
    slices = fc.phase != PH_C
    # One thread's rows at a time, found by a scan per thread (flow points sit on a handful of
    # threads), int32 row numbers, no column of slice ends, points in blocks: these
    # temporaries set the importer's peak memory (docs/performance.md).
    for i, t in enumerate(q_threads.tolist()):
        on_thread = thread == t
        on_thread &= slices
        seg = np.flatnonzero(on_thread).astype(np.int32)  # file order
        del on_thread
        if not len(seg):
            continue
        seg, starts = _by_start(seg, fc.start_ns, dur)
        points = q_order[q_bounds[i] : q_bounds[i + 1]]
        for lo in range(0, len(points), _POINT_BLOCK):
            q = points[lo : lo + _POINT_BLOCK]
            out[q] = _bind_points(seg, starts, dur, q_ts[q], enclosing[q])
    return out


#: Flow points bound at a time (bounds the per-point temporaries of :func:`_bind`).
_POINT_BLOCK = 8192


def _by_start(seg: I32, start_ns: I64, dur: I64) -> tuple[I32, I64]:
    """``seg`` (rows in file order) sorted by (start, longest first, file order), and their
    starts: the deepest slice open at t is then the last one starting at or before t that
    still runs, or one of its enclosing slices.

    A stable argsort of the starts gives (start, file order); only runs of equal starts are
    then re-sorted, longest first (one lexsort of all keys held ~1 MB more per 90k rows).
    """
    starts = start_ns[seg]
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    tie = starts[1:] == starts[:-1]
    if tie.any():
        # Positions in a run of equal starts, and which run each is in.
        in_run = np.zeros(len(starts), dtype=np.bool_)
        in_run[1:] = tie
        in_run[:-1] |= tie
        pos = np.flatnonzero(in_run)
        run = np.cumsum(~tie[pos[1:] - 1]) if len(pos) > 1 else np.zeros(0, np.intp)
        run_of = np.concatenate(([0], run))
        sub = np.lexsort((-dur[seg[order[pos]]], run_of))  # stable: file order within ties
        order[pos] = order[pos[sub]]
    del tie
    return seg[order], starts


def _bind_points(seg: I32, starts: I64, dur: I64, ts: I64, enc: npt.NDArray[np.bool_]) -> I64:
    """Rows that points at ``ts`` on one thread bind to (see :func:`_bind`)."""
    j = np.searchsorted(starts, ts, side="right") - 1
    jj = np.maximum(j, 0)
    row = seg[jj]
    hit = (j >= 0) & ((ts < starts[jj] + dur[row]) | (ts == starts[jj]))
    res = np.where(hit, jj, -1)
    for m in np.flatnonzero(enc & ~hit & (j >= 0)).tolist():
        res[m] = _walk_back(seg, starts, dur, int(j[m]), int(ts[m]))
    # Next slice: first starting at or after ts.
    nxt = np.searchsorted(starts, ts, side="left")
    res = np.where(enc, res, np.where(nxt < len(starts), nxt, -1))
    return np.where(res >= 0, seg[np.maximum(res, 0)], -1)


def _walk_back(seg: I32, starts: I64, dur: I64, j: int, ts: int, limit: int = 4096) -> int:
    """The nearest earlier slice still open at ``ts`` (an ancestor of slice ``j``), or -1."""
    for k in range(j - 1, max(-1, j - 1 - limit), -1):
        if starts[k] <= ts < starts[k] + dur[seg[k]]:
            return k
    return -1
