"""EV4xx: flow arrows.

Perfetto's v1 flows (``s``/``t``/``f``) are keyed by (id, cat, name) across the whole file; a
string id is read as hex; ``s`` and ``t`` bind to the slice open on their thread at their ts, an
``f`` with ``"bp": "e"`` to the enclosing slice and without it to the next slice that begins; a
second ``s`` with a key in use is dropped. v2 flows put ``bind_id`` plus
``flow_out``/``flow_in`` on the slice itself. The id and binding rules are
:mod:`echo_view.model.trace_rules`, shared with the importers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.trace_rules import parse_flow_id
from echo_view.validate.context import FileContext
from echo_view.validate.events import PH, T_BIG_FLOAT, T_FLOAT, T_INT, T_STRING, UNSET, EventChunk
from echo_view.validate.findings import Finding, Severity, define
from echo_view.validate.nesting import _Cols

define(
    "EV401",
    Severity.WARNING,
    "flow start without an end",
    "no f (or t) event shares this start's (id, cat, name): the arrow is not drawn",
)
define(
    "EV402",
    Severity.WARNING,
    "flow end without a start",
    "no s event shares this end's (id, cat, name): the arrow is not drawn (often the start "
    "fell outside the profiling window)",
)
define(
    "EV403",
    Severity.WARNING,
    "flow id reused",
    "several s events share one (id, cat, name); Perfetto keeps the first and drops the others "
    "(flow_duplicate_id): make ids unique per file, e.g. when merging ranks",
)
define(
    "EV404",
    Severity.WARNING,
    "duplicate flow start",
    "an s event repeats an earlier one exactly (id, cat, name, ts, thread); `check --fix` "
    "drops the copy",
    fixable=True,
)
define(
    "EV405",
    Severity.WARNING,
    "flow event outside any slice",
    's/t events and f events with "bp":"e" bind to the slice open on their thread at their '
    "ts; there is none, so Perfetto drops the arrow (flow_no_enclosing_slice)",
)
define(
    "EV406",
    Severity.INFO,
    "flow end without binding point",
    'an f event without "bp":"e" binds to the next slice that begins on its thread, not to '
    'the one enclosing it; add "bp":"e" unless that is intended',
)
define(
    "EV407",
    Severity.ERROR,
    "invalid flow id",
    'flow ids are integers or hex strings ("0x1f"); Perfetto drops others (flow_invalid_id)',
)
define(
    "EV408",
    Severity.WARNING,
    "flow ends before it starts",
    "the f event is earlier than its s event: the arrow points back in time (clock or "
    "correlation mix-up)",
)
define(
    "EV409",
    Severity.WARNING,
    "bind_id without direction",
    "a v2 flow needs flow_out (source), flow_in (sink) or both next to bind_id "
    "(flow_without_direction)",
)

_GOOD = np.array([T_INT, T_FLOAT, T_BIG_FLOAT, T_STRING], dtype=np.uint8)
_S, _T, _F = PH["s"], PH["t"], PH["f"]
_V2 = -2  # cat/name id used for v2 flow keys


def _ids(values: list[Any]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
    if set(map(type, values)) == {int}:
        try:
            arr = np.array(values, dtype=np.int64)
            return arr.view(np.uint64), np.ones(len(values), dtype=bool)
        except OverflowError:
            pass
    parsed = [parse_flow_id(v) for v in values]
    ok = np.array([p is not None for p in parsed], dtype=bool)
    return np.array([p or 0 for p in parsed], dtype=np.uint64), ok


class FlowRule:
    """Collects flow events as columns and matches them by key at the end."""

    def __init__(self) -> None:
        self.cols = _Cols(
            id="u8",
            cat="i4",
            name="i4",
            ph="u1",
            thread="i4",
            ts="i8",
            index="i8",
            bp_e="?",
            v2="?",
        )

    def visit(self, chunk: EventChunk, ctx: FileContext) -> None:
        ev = chunk.events
        rows = np.flatnonzero(np.isin(chunk.ph, [_S, _T, _F]) & np.isin(chunk.ts_kind, _GOOD))
        if len(rows):
            raw = [ev[r].id if ev[r].id is not UNSET else ev[r].id2 for r in rows.tolist()]
            present = np.array([v is not UNSET for v in raw], dtype=bool)
            ids, ok = _ids(raw)
            bad = rows[present & ~ok]
            ctx.emit_rows(
                "EV407",
                chunk,
                bad,
                lambda r: f"id={(ev[r].id if ev[r].id is not UNSET else ev[r].id2)!r}",
            )
            keep = present & ok
            rows, ids = rows[keep], ids[keep]
            bp = [ev[r].bp for r in rows.tolist()]
            self.cols.add(
                id=ids,
                cat=chunk.cat[rows],
                name=chunk.name[rows],
                ph=chunk.ph[rows],
                thread=chunk.thread[rows],
                ts=chunk.ts_ns[rows],
                index=rows + chunk.first,
                bp_e=np.array([b == "e" for b in bp], dtype=bool),
                v2=np.zeros(len(rows), dtype=bool),
            )
        self._v2(chunk, ctx)

    def _v2(self, chunk: EventChunk, ctx: FileContext) -> None:
        ev = chunk.events
        bind = [e.bind_id for e in ev]
        if all(b is UNSET for b in bind):
            return
        rows = np.array([r for r, b in enumerate(bind) if b is not UNSET], dtype=np.intp)
        rows = rows[np.isin(chunk.ts_kind[rows], _GOOD)]
        out_rows, in_rows, none = [], [], []
        for r in rows.tolist():
            fo, fi = ev[r].flow_out is True, ev[r].flow_in is True
            if not (fo or fi):
                none.append(r)
            if fo:
                out_rows.append(r)
            if fi:
                in_rows.append(r)
        ctx.emit_rows(
            "EV409",
            chunk,
            np.array(none, dtype=np.intp),
            lambda r: f"bind_id={ev[r].bind_id!r} without flow_in/flow_out",
        )
        for sel, ph in ((out_rows, _S), (in_rows, _F)):
            if not sel:
                continue
            srows = np.array(sel, dtype=np.intp)
            ids, ok = _ids([ev[r].bind_id for r in sel])
            ctx.emit_rows("EV407", chunk, srows[~ok], lambda r: f"bind_id={ev[r].bind_id!r}")
            srows, ids = srows[ok], ids[ok]
            n = len(srows)
            self.cols.add(
                id=ids,
                cat=np.full(n, _V2),
                name=np.full(n, _V2),
                ph=np.full(n, ph),
                thread=chunk.thread[srows],
                ts=chunk.ts_ns[srows],
                index=srows + chunk.first,
                bp_e=np.ones(n, dtype=bool),
                v2=np.ones(n, dtype=bool),
            )

    def finish(self, ctx: FileContext) -> None:
        c = {k: self.cols.get(k) for k in self.cols.dtypes}
        n = len(c["index"])
        if not n:
            return
        key = np.empty(n, dtype=[("id", "u8"), ("cat", "i4"), ("name", "i4")])
        key["id"], key["cat"], key["name"] = c["id"], c["cat"], c["name"]
        _, kid = np.unique(key, return_inverse=True)
        kid = kid.ravel()
        ph, ts, thread, index = c["ph"], c["ts"], c["thread"], c["index"]
        is_s, is_t, is_f = ph == _S, ph == _T, ph == _F
        nk = int(kid.max()) + 1
        n_s = np.bincount(kid, weights=is_s, minlength=nk)
        n_end = np.bincount(kid, weights=is_f | is_t, minlength=nk)

        def emit(code: str, rows: npt.NDArray[np.intp], msg: Any) -> None:
            rows = rows[np.argsort(index[rows], kind="stable")]
            ctx.emit(
                code,
                len(rows),
                (
                    Finding(code, msg(r), ctx.at(int(index[r]), int(ts[r]), int(thread[r])))
                    for r in rows.tolist()
                ),
            )

        def label(r: int) -> str:
            if c["v2"][r]:
                return f"bind_id {int(c['id'][r])}"
            return (
                f"id {int(c['id'][r])} cat {ctx.name(int(c['cat'][r]))!r} "
                f"name {ctx.name(int(c['name'][r]))!r}"
            )

        emit(
            "EV401",
            np.flatnonzero(is_s & (n_end[kid] == 0)),
            lambda r: f"flow {label(r)} has no end",
        )
        emit(
            "EV402",
            np.flatnonzero((is_f | is_t) & (n_s[kid] == 0)),
            lambda r: f"flow {label(r)} has no start",
        )
        # Duplicate starts: Perfetto keeps the earliest (it sorts by ts) and drops the rest.
        s_rows = np.flatnonzero(is_s)
        if len(s_rows):
            o = s_rows[np.lexsort((index[s_rows], ts[s_rows], kid[s_rows]))]
            later = np.flatnonzero(kid[o][1:] == kid[o][:-1]) + 1
            dup = o[later]
            first_of: dict[int, int] = {}
            for r in o.tolist():
                first_of.setdefault(int(kid[r]), r)
            exact_mask = np.zeros(len(dup), dtype=bool)
            if len(dup):
                sig = np.empty(len(o), dtype=[("k", "i8"), ("ts", "i8"), ("th", "i4")])
                sig["k"], sig["ts"], sig["th"] = kid[o], ts[o], thread[o]
                exact_all = np.zeros(len(o), dtype=bool)
                exact_all[1:] = sig[1:] == sig[:-1]
                exact_mask = exact_all[later]
            emit("EV404", dup[exact_mask], lambda r: f"flow {label(r)} repeats an earlier start")
            emit(
                "EV403",
                dup[~exact_mask],
                lambda r: (
                    f"flow {label(r)} already started at "
                    f"traceEvents[{int(index[first_of[int(kid[r])]])}]"
                ),
            )
            min_s = np.full(nk, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(min_s, kid[s_rows], ts[s_rows])
            back = np.flatnonzero(is_f & (n_s[kid] > 0) & (ts < min_s[kid]))
            emit("EV408", back, lambda r: f"flow {label(r)} ends before its start")
        v1 = ~c["v2"]
        emit(
            "EV406",
            np.flatnonzero(is_f & v1 & ~c["bp_e"]),
            lambda r: f'flow {label(r)} ends without "bp":"e"',
        )
        if ctx.slices is not None and ctx.wants("EV405"):
            check = np.flatnonzero(v1 & (is_s | is_t | (is_f & c["bp_e"])))
            inside = ctx.slices.enclosed(thread[check], ts[check])
            emit(
                "EV405",
                check[~inside],
                lambda r: (
                    f"{'s' if is_s[r] else 't' if is_t[r] else 'f'} event of flow {label(r)} "
                    "is not inside a slice on its thread"
                ),
            )
