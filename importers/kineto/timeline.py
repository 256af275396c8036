"""File columns -> event table, lanes and flows, by the trace-event format's own rules.

Nothing here is Kineto-specific: it is how Perfetto reads any Chrome JSON (formats.md §1).

- Kinds come from ``cat`` (Kineto's current and 2021 vocabularies, and echo-view's own labels),
  then from the phase: ``i``/``I``/``R``/``n`` are instants, ``C`` counters.
- ``B``/``E`` pairs become one slice per thread stack (the ``E``'s args merged into the ``B``'s),
  ``b``/``e`` async pairs one slice per (pid, cat, id) on the process's ``cat (async)`` lane.
- Lanes: GPU work (kernel, memcpy, memset, GPU annotation, sync) lives on ``GPU_STREAM`` lanes
  (device = the process's ``GPU n`` label or the pid, stream = the ``stream n`` thread name or the
  tid); CPU-side kinds on ``CPU_THREAD`` lanes; instants/counters/other events on the lane kind
  their thread already has, else ``CPU_THREAD`` for numeric pid/tid, else ``OTHER``.
- Flows: :mod:`importers.kineto.flows`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
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
from importers.kineto.flows import resolve_flows
from importers.kineto.rows import (
    I32,
    I64,
    PH_AB,
    PH_AN,
    PH_B,
    PH_C,
    PH_E,
    PH_I,
    FileColumns,
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
    # Walk begins and ends together in time order (file order among equal times), stacks per
    # thread / per async key: Perfetto sorts a JSON trace's events by time before it pairs
    # them, so an end written before a begin that precedes it in time still closes it.
    items: list[tuple[int, int, int, int]] = [
        (int(fc.start_ns[r]), int(fc.index[r]), 0, int(r)) for r in begins
    ]
    items += [(int(fc.ends.ts[j]), int(fc.ends.index[j]), 1, j) for j in range(len(fc.ends))]
    items.sort()
    stacks: dict[tuple[int | str, ...], list[int]] = {}
    merges: dict[int, dict[str, Any]] = {}  # B row -> its E's args
    unmatched = 0
    for _, _, is_end, k in items:
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
        end_args = fc.end_args.get(int(e.index[k])) if fc.end_args else None
        if end_args is not None and e.phase[k] == PH_E:
            merges[row] = end_args
    open_begins = sum(len(s) for s in stacks.values())
    if unmatched:
        notes["unmatched_end_events"] = unmatched
    if open_begins:
        notes["unclosed_begin_events"] = open_begins
    if merges:
        _merge_end_args(fc, merges)


def _merge_end_args(fc: FileColumns, merges: dict[int, dict[str, Any]]) -> None:
    """Merge each ``E``'s args into its ``B`` row's args, the end's value winning on a shared
    key (the format's rule, as the legacy viewer applies it); the args blob is rebuilt once."""
    blob, offsets = fc.args_blob, fc.args_offsets
    parts: list[bytes] = []
    lengths = np.diff(offsets)
    last = 0
    for row in sorted(merges):
        lo, hi = int(offsets[row]), int(offsets[row + 1])
        begin = msgspec.json.decode(blob[lo:hi]) if hi > lo else {}
        end = merges[row]
        # Args that are no object are not shown by Perfetto: the end's replace them.
        text = msgspec.json.encode({**begin, **end} if isinstance(begin, dict) else end)
        parts += (blob[last:lo], text)
        last = hi
        lengths[row] = len(text)
    parts.append(blob[last:])
    fc.args_blob = b"".join(parts)
    new = np.zeros_like(offsets)
    np.cumsum(lengths, out=new[1:])
    fc.args_offsets = new


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
    names = _names(fc)
    if (fc.phase == PH_AB).any() or (fc.phase == PH_AN).any():
        thread = thread.copy()
        _async_lanes(fc, thread, threads, names)
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


def _async_lanes(
    fc: FileColumns, thread: I32, threads: list[tuple[int | str, int | str]], names: _Names
) -> None:
    """Move async (``b``/``n``) rows to one lane per (process, category), named ``cat (async)``."""
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
            names.threads[tid] = str(key[1])
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


def _number(m: re.Match[str] | None) -> int | None:
    """The matched number when it fits int64 (18 digits; a longer one is no device or stream
    number: it would overflow the int64 columns, or, past 4,300 digits, Python's ``int``)."""
    if m is None or len(m.group(1).lstrip("-")) > 18:
        return None
    return int(m.group(1))


def _device(pid: int | str, names: _Names) -> int:
    for text in (names.labels.get(pid, ""), names.processes.get(pid, "")):
        n = _number(_GPU_LABEL.search(text))
        if n is not None:
            return n
    return pid if isinstance(pid, int) else NONE


def _stream(tid: int | str, name: str) -> int:
    n = _number(_STREAM.match(name))
    if n is not None:
        return n
    if isinstance(tid, int):
        return tid
    # Only the end can hold the number (_number takes at most 18 digits): searched from every
    # position, a 40,000-character tid took 27 s.
    tail = tid.rstrip()[-24:]
    n = _number(_TRAILING_INT.search(tail))
    return NONE if n is None else n


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
