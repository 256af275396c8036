"""The events of a pftrace export as global columns, in the order they are written.

Every slice becomes a begin and an end packet, every instant and counter sample one packet.
They are written in one global order so that Perfetto rebuilds exactly the nesting the layout
checked: by time; at equal times ends first (inner before outer), then begins (outer before
inner), then zero-length slices and instants (begin right before end). Begins at equal times
go rank by rank with CPU threads before GPU streams, so a flow's source packet precedes its
end even when both start at the same nanosecond.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.errors import InputError
from echo_view.model import EventKind
from echo_view.units import parse_number
from exporters.layout import STEP_CATEGORY, ExportLayout

I64 = npt.NDArray[np.int64]

SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
FROM_EVENT, FROM_STEP, FROM_COUNTER = 0, 1, 2
_MAX_RANKS = 1 << 20


@dataclass(frozen=True, eq=False)
class Interned:
    """Interned event names and categories (iids from 1), and per-event global columns."""

    names: tuple[str, ...]
    cats: tuple[str, ...]
    rank_first: I64  # global index of each rank's first event
    name_iid: I64
    cat_iid: I64
    uuid: I64
    step_first: I64
    step_name_iid: I64
    step_uuid: I64
    step_cat_iid: int


def intern(layout: ExportLayout) -> Interned:
    """Intern every name/category the export writes; global per-event name/cat/track columns."""
    names: dict[str, int] = {}
    cats: dict[str, int] = {}
    tids = np.array([t.tid for t in layout.threads] or [0], dtype=np.int64)
    name_cols: list[I64] = []
    cat_cols: list[I64] = []
    uuid_cols: list[I64] = []
    firsts, step_firsts = [0], [0]
    step_names: list[int] = []
    step_uuids: list[I64] = []
    for rl in layout.ranks:
        tr = rl.trace
        ev = tr.events
        for col, table, out in ((ev.name, names, name_cols), (ev.cat, cats, cat_cols)):
            local = np.zeros(len(tr.strings), dtype=np.int64)
            for sid in np.unique(col).tolist():
                local[sid] = table.setdefault(tr.strings[sid], len(table) + 1)
            out.append(local[col])
        uuid_cols.append(tids[rl.thread] if len(ev) else np.zeros(0, np.int64))
        firsts.append(firsts[-1] + len(ev))
        for i in range(len(tr.steps)):
            label = f"step {int(tr.steps.number[i])}"
            step_names.append(names.setdefault(label, len(names) + 1))
        step_uuids.append(tids[rl.step_thread] if len(rl.step_thread) else np.zeros(0, np.int64))
        step_firsts.append(step_firsts[-1] + len(tr.steps))
    step_cat = cats.setdefault(STEP_CATEGORY, len(cats) + 1)

    def cat64(cols: list[I64]) -> I64:
        return np.concatenate(cols).astype(np.int64) if cols else np.zeros(0, np.int64)

    return Interned(
        names=tuple(names),
        cats=tuple(cats),
        rank_first=np.array(firsts, dtype=np.int64),
        name_iid=cat64(name_cols),
        cat_iid=cat64(cat_cols),
        uuid=cat64(uuid_cols),
        step_first=np.array(step_firsts, dtype=np.int64),
        step_name_iid=np.array(step_names, dtype=np.int64),
        step_uuid=cat64(step_uuids),
        step_cat_iid=step_cat,
    )


@dataclass(frozen=True, eq=False)
class Counters:
    """Counter samples: one per numeric arg of each counter event; tracks per (pid, name, key)."""

    ts: I64
    uuid: I64
    value: npt.NDArray[np.float64]
    rank: I64
    tracks: tuple[tuple[int, int, str], ...]  # (uuid, parent pid, name)
    dropped: int = 0
    """Args that are no number (nor a string of one), left out."""


def counters(layout: ExportLayout, first_uuid: int) -> Counters:
    """Decode the args of counter events (few in practice) into samples."""
    ts: list[int] = []
    uuid: list[int] = []
    value: list[float] = []
    rank: list[int] = []
    tracks: dict[tuple[int, str], int] = {}
    dropped = 0
    for rl in layout.ranks:
        ev = rl.trace.events
        for i in np.flatnonzero(ev.kind == int(EventKind.COUNTER)).tolist():
            pid = layout.threads[int(rl.thread[i])].pid
            name = rl.trace.name(i)
            try:
                args = msgspec.json.decode(ev.raw_args(i)) if ev.raw_args(i) else {}
            except msgspec.DecodeError as exc:
                raise InputError(
                    f"counter args are not JSON ({exc})",
                    path=rl.trace.source or None,
                    where=f"rank {rl.trace.rank} events[{i}]",
                ) from None
            if not isinstance(args, dict):
                args = {"value": args}
            for key, v in args.items():
                if isinstance(v, str):
                    # Perfetto's JSON importer reads a counter given as a string of a number.
                    try:
                        v = parse_number(v)
                    except ValueError:
                        dropped += 1
                        continue
                elif isinstance(v, bool) or not isinstance(v, int | float):
                    dropped += 1
                    continue
                track = (pid, f"{name} {key}")
                u = tracks.setdefault(track, first_uuid + len(tracks))
                ts.append(int(rl.start_ns[i]))
                uuid.append(u)
                value.append(float(v))
                rank.append(rl.index)
    return Counters(
        ts=np.array(ts, dtype=np.int64),
        uuid=np.array(uuid, dtype=np.int64),
        value=np.array(value, dtype=np.float64),
        rank=np.array(rank, dtype=np.int64),
        tracks=tuple((u, pid, name) for (pid, name), u in tracks.items()),
        dropped=dropped,
    )


@dataclass(frozen=True, eq=False)
class Packets:
    """One row per packet to write, sorted: time, type, source and a reference into it."""

    ts: I64
    type: npt.NDArray[np.int8]
    source: npt.NDArray[np.int8]
    ref: I64

    def __len__(self) -> int:
        return len(self.ts)


def _key(cls: int, rank: int, gpu: I64, sub: I64, half: I64) -> I64:
    return (((((cls << 20) | rank) << 1 | gpu) << 32 | sub) << 1 | half).astype(np.int64)


def packet_order(layout: ExportLayout, interned: Interned, ctrs: Counters) -> Packets:
    """All packets of events, steps and counters, in write order (see the module docstring)."""
    if len(layout.ranks) >= _MAX_RANKS:
        raise InputError(f"cannot export {len(layout.ranks)} ranks to pftrace (limit 2**20)")
    gpu_of = np.array([t.gpu for t in layout.threads] or [False], dtype=np.int64)
    ts_p, key_p, type_p, src_p, ref_p = [], [], [], [], []

    def emit(ts: I64, key: I64, typ: int, src: int, ref: I64) -> None:
        ts_p.append(ts)
        key_p.append(key)
        type_p.append(np.full(len(ts), typ, dtype=np.int8))
        src_p.append(np.full(len(ts), src, dtype=np.int8))
        ref_p.append(ref)

    for rl in layout.ranks:
        ev = rl.trace.events
        ri = rl.index
        for src, start, dur, thread, first, kinds in (
            (
                FROM_EVENT,
                rl.start_ns,
                ev.dur_ns,
                rl.thread,
                interned.rank_first[ri],
                ev.kind,
            ),
            (
                FROM_STEP,
                rl.step_start_ns,
                rl.step_dur_ns,
                rl.step_thread,
                interned.step_first[ri],
                None,
            ),
        ):
            n = len(start)
            if not n:
                continue
            rows = np.arange(n)
            rank = np.empty(n, dtype=np.int64)
            rank[np.lexsort((rows, -dur, start))] = rows
            gpu = gpu_of[thread]
            ref = rows + first
            if kinds is None:
                is_slice = np.ones(n, dtype=bool)
                instant = np.zeros(n, dtype=bool)
            else:
                is_slice = rl.is_slice
                instant = kinds == int(EventKind.INSTANT)
            zero = np.zeros(n, dtype=np.int64)
            long = is_slice & (dur > 0)
            point = is_slice & (dur == 0)
            for m, cls, sub, half, typ, t in (
                (long, 1, rank, zero, SLICE_BEGIN, start),
                (long, 0, (1 << 32) - 1 - rank, zero, SLICE_END, start + dur),
                (point, 2, rank, zero, SLICE_BEGIN, start),
                (point, 2, rank, zero + 1, SLICE_END, start),
                (instant, 2, rank, zero, INSTANT, start),
            ):
                if m.any():
                    emit(t[m], _key(cls, ri, gpu[m], sub[m], half[m]), typ, src, ref[m])
    if len(ctrs.ts):
        idx = np.arange(len(ctrs.ts), dtype=np.int64)
        emit(ctrs.ts, _key(2, 0, idx * 0, idx, idx * 0), COUNTER, FROM_COUNTER, idx)
    if not ts_p:
        z = np.zeros(0, dtype=np.int64)
        return Packets(z, z.astype(np.int8), z.astype(np.int8), z)
    ts = np.concatenate(ts_p)
    order = np.lexsort((np.concatenate(key_p), ts))
    return Packets(
        ts=ts[order],
        type=np.concatenate(type_p)[order],
        source=np.concatenate(src_p)[order],
        ref=np.concatenate(ref_p)[order],
    )
