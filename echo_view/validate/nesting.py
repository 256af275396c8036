"""EV3xx: slices on one thread must nest.

Perfetto sorts all events (``E`` first at equal ts, then ``X`` longest first, then the rest),
keeps one stack per thread, pops slices whose end is at or before the new start, and moves an
``X`` that ends after the slice on top of the stack to an overflow track (dropped before v57).
This rule replays exactly that, per thread, on compact columns kept across chunks; ``B``/``E``
pairs are matched first and then take part as ordinary slices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.trace_rules import open_at, partial_overlaps
from echo_view.units import format_duration
from echo_view.validate.context import FileContext
from echo_view.validate.events import (
    PH,
    T_BIG_FLOAT,
    T_FLOAT,
    T_INT,
    T_STRING,
    EventChunk,
)
from echo_view.validate.findings import Finding, Location, Severity, define

define(
    "EV301",
    Severity.ERROR,
    "partly overlapping slices on one thread",
    "a slice ends after the slice that encloses its start: Perfetto moves it to an overflow "
    "track (v57+) or drops it (older); `check --fix` moves such slices to named lanes",
    fixable=True,
)
define(
    "EV302",
    Severity.ERROR,
    "end without a matching begin",
    "an E event has no open B on its thread (E before B, or unbalanced B/E); remove it or "
    "add the B",
)
define(
    "EV303",
    Severity.WARNING,
    "begin never ended",
    "a B event has no E on its thread; Perfetto shows it as not finished",
)
define(
    "EV304",
    Severity.WARNING,
    "end name differs from its begin",
    "an E closes the innermost open B whatever its name; check the B/E order",
)
define(
    "EV305",
    Severity.INFO,
    "B/E timestamps go backwards on a thread",
    "catapult warns 'Timestamps are moving backward'; Perfetto sorts; `check --fix` sorts "
    "the events",
    fixable=True,
)

_GOOD = np.array([T_INT, T_FLOAT, T_BIG_FLOAT, T_STRING], dtype=np.uint8)
_END_OPEN = np.iinfo(np.int64).max
_X, _B = 0, 1


@dataclass(frozen=True)
class SliceIndex:
    """All slices of a file sorted by (thread, start): answers "is ts inside a slice?"."""

    thread: npt.NDArray[np.int32]
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    index: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]  # slices of thread t are offsets[t]:offsets[t+1]

    def enclosed(
        self, thread: npt.NDArray[np.int32], ts: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """For each (thread, ts): whether a slice on that thread holds it
        (:func:`echo_view.model.trace_rules.open_at`)."""
        out = np.zeros(len(ts), dtype=bool)
        if not len(ts):
            return out
        nthreads = len(self.offsets) - 1
        for t in np.unique(thread).tolist():
            if t < 0 or t >= nthreads:
                continue
            lo, hi = int(self.offsets[t]), int(self.offsets[t + 1])
            q = np.flatnonzero(thread == t)
            out[q] = open_at(self.start[lo:hi], self.end[lo:hi], ts[q])
        return out


class _Cols:
    """Append-only typed columns kept across chunks."""

    def __init__(self, **dtypes: str) -> None:
        self.parts: dict[str, list[npt.NDArray[Any]]] = {k: [] for k in dtypes}
        self.dtypes = dtypes

    def add(self, **cols: npt.ArrayLike) -> None:
        for k, v in cols.items():
            self.parts[k].append(np.asarray(v, dtype=self.dtypes[k]))

    def get(self, key: str) -> npt.NDArray[Any]:
        parts = self.parts[key]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtypes[key])


class NestingRule:
    """Collects slices per thread and replays Perfetto's slice stacks at the end."""

    def __init__(self) -> None:
        self.x = _Cols(thread="i4", start="i8", dur="i8", index="i8", name="i4")
        self.be = _Cols(thread="i4", ts="i8", end="?", index="i8", name="i4")

    def visit(self, chunk: EventChunk, ctx: FileContext) -> None:
        ts_ok = np.isin(chunk.ts_kind, _GOOD)
        rows = np.flatnonzero(
            (chunk.ph == PH["X"]) & ts_ok & np.isin(chunk.dur_kind, _GOOD) & (chunk.dur_ns >= 0)
        )
        if len(rows):
            self.x.add(
                thread=chunk.thread[rows],
                start=chunk.ts_ns[rows],
                dur=chunk.dur_ns[rows],
                index=rows + chunk.first,
                name=chunk.name[rows],
            )
        rows = np.flatnonzero(((chunk.ph == PH["B"]) | (chunk.ph == PH["E"])) & ts_ok)
        if len(rows):
            self.be.add(
                thread=chunk.thread[rows],
                ts=chunk.ts_ns[rows],
                end=chunk.ph[rows] == PH["E"],
                index=rows + chunk.first,
                name=chunk.name[rows],
            )

    def finish(self, ctx: FileContext) -> None:
        b_thread, b_start, b_end, b_index, b_name, open_b = self._pair_begin_end(ctx)
        x = self.x
        thread = np.concatenate([x.get("thread"), b_thread]).astype(np.int32)
        start = np.concatenate([x.get("start"), b_start]).astype(np.int64)
        dur = np.concatenate([x.get("dur"), b_end - b_start]).astype(np.int64)
        index = np.concatenate([x.get("index"), b_index]).astype(np.int64)
        name = np.concatenate([x.get("name"), b_name]).astype(np.int32)
        group = np.concatenate(
            [np.zeros(len(x.get("index")), np.int8), np.ones(len(b_index), np.int8)]
        )
        self.x = _Cols(thread="i4", start="i8", dur="i8", index="i8", name="i4")  # free
        # Perfetto's order: start, X before B, longest first, then input order.
        order = np.lexsort((index, -dur, group, start, thread))
        thread, start, index, name = thread[order], start[order], index[order], name[order]
        end = start + dur[order]
        nthreads = len(ctx.threads.resolved.keys_)
        offsets = np.searchsorted(thread, np.arange(nthreads + 1)).astype(np.int64)
        self._overlaps(ctx, thread, start, end, index, name, offsets)
        # Unclosed B slices enclose everything after their start (for flow binding).
        if len(open_b[0]):
            thread = np.concatenate([thread, open_b[0]])
            start = np.concatenate([start, open_b[1]])
            end = np.concatenate([end, np.full(len(open_b[0]), _END_OPEN, np.int64)])
            index = np.concatenate([index, open_b[2]])
            order = np.lexsort((start, thread))
            thread, start, end, index = thread[order], start[order], end[order], index[order]
            offsets = np.searchsorted(thread, np.arange(nthreads + 1)).astype(np.int64)
        ctx.slices = SliceIndex(thread, start, end, index, offsets)

    def _overlaps(
        self,
        ctx: FileContext,
        thread: npt.NDArray[np.int32],
        start: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
        index: npt.NDArray[np.int64],
        name: npt.NDArray[np.int32],
        offsets: npt.NDArray[np.int64],
    ) -> None:
        if not ctx.wants("EV301"):
            return
        hits: list[tuple[int, int]] = []
        for t in range(len(offsets) - 1):
            lo, hi = int(offsets[t]), int(offsets[t + 1])
            if hi - lo < 2:
                continue
            # A thread whose slices never overlap at all (a typical GPU stream) is clean.
            if bool(np.all(end[lo : hi - 1] <= start[lo + 1 : hi])):
                continue
            found = partial_overlaps(start[lo:hi].tolist(), end[lo:hi].tolist())
            hits.extend((lo + k, lo + p) for k, p in found)
        if not hits:
            return
        hits.sort(key=lambda kp: int(index[kp[0]]))

        def gen() -> list[Finding]:
            out = []
            for k, p in hits[: ctx.report.keep]:
                over = int(end[k] - end[p])
                msg = (
                    f"{ctx.name(int(name[k]))!r} ends {format_duration(over)} after "
                    f"{ctx.name(int(name[p]))!r} (traceEvents[{int(index[p])}]) that encloses "
                    "its start"
                )
                out.append(
                    Finding("EV301", msg, ctx.at(int(index[k]), int(start[k]), int(thread[k])))
                )
            return out

        ctx.emit("EV301", len(hits), gen())

    def _pair_begin_end(
        self, ctx: FileContext
    ) -> tuple[
        npt.NDArray[np.int32],
        npt.NDArray[np.int64],
        npt.NDArray[np.int64],
        npt.NDArray[np.int64],
        npt.NDArray[np.int32],
        tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.int64]],
    ]:
        be = self.be
        thread = be.get("thread").astype(np.int32)
        ts = be.get("ts").astype(np.int64)
        is_end = be.get("end").astype(bool)
        index = be.get("index").astype(np.int64)
        name = be.get("name").astype(np.int32)
        empty32 = np.zeros(0, np.int32)
        empty64 = np.zeros(0, np.int64)
        if not len(ts):
            return empty32, empty64, empty64, empty64, empty32, (empty32, empty64, empty64)
        # Out-of-order B/E in file order (catapult's warning).
        by_file = np.lexsort((index, thread))
        back = np.flatnonzero((np.diff(thread[by_file]) == 0) & (np.diff(ts[by_file]) < 0))
        if len(back):
            rows = by_file[back + 1]
            ctx.emit(
                "EV305",
                len(rows),
                (
                    Finding(
                        "EV305",
                        "this B/E event is earlier than the previous one on its thread",
                        ctx.at(int(index[r]), int(ts[r]), int(thread[r])),
                    )
                    for r in rows[np.argsort(index[rows])].tolist()
                ),
            )
        # Perfetto's order: by ts, E before B at equal ts, then input order.
        order = np.lexsort((index, is_end.astype(np.int8) * -1, ts, thread))
        pairs_s, pairs_e, pairs_i, pairs_t, pairs_n = [], [], [], [], []
        unmatched_e: list[int] = []
        mismatch: list[tuple[int, int]] = []
        open_rows: list[int] = []
        th_l, ts_l, end_l, name_l = (
            thread[order].tolist(),
            ts[order].tolist(),
            is_end[order].tolist(),
            name[order].tolist(),
        )
        stack: list[int] = []
        current = None
        for j, row in enumerate(order.tolist()):
            if th_l[j] != current:
                open_rows.extend(stack)
                stack = []
                current = th_l[j]
            if not end_l[j]:
                stack.append(row)
                continue
            if not stack:
                unmatched_e.append(row)
                continue
            b = stack.pop()
            if name_l[j] >= 0 and name[b] >= 0 and name_l[j] != int(name[b]):
                mismatch.append((row, b))
            pairs_s.append(int(ts[b]))
            pairs_e.append(ts_l[j])
            pairs_i.append(int(index[b]))
            pairs_t.append(th_l[j])
            pairs_n.append(int(name[b]))
        open_rows.extend(stack)

        def loc(r: int) -> Location:
            return ctx.at(int(index[r]), int(ts[r]), int(thread[r]))

        unmatched_e.sort(key=lambda r: int(index[r]))
        ctx.emit(
            "EV302",
            len(unmatched_e),
            (Finding("EV302", "E event with no open B on its thread", loc(r)) for r in unmatched_e),
        )
        open_rows.sort(key=lambda r: int(index[r]))
        ctx.emit(
            "EV303",
            len(open_rows),
            (
                Finding("EV303", f"B {ctx.name(int(name[r]))!r} is never ended", loc(r))
                for r in open_rows
            ),
        )
        ctx.emit(
            "EV304",
            len(mismatch),
            (
                Finding(
                    "EV304",
                    f"E {ctx.name(int(name[e]))!r} closes B {ctx.name(int(name[b]))!r} "
                    f"(traceEvents[{int(index[b])}])",
                    loc(e),
                )
                for e, b in mismatch
            ),
        )
        ob = np.array(open_rows, dtype=np.intp)
        return (
            np.array(pairs_t, np.int32),
            np.array(pairs_s, np.int64),
            np.array(pairs_e, np.int64),
            np.array(pairs_i, np.int64),
            np.array(pairs_n, np.int32),
            (thread[ob], ts[ob], index[ob]),
        )
