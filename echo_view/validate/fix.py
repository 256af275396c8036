"""Repairs for what can be fixed without inventing data (``echo-view check --fix``).

- EV104 a truncated array is written complete;
- EV503 pid/tid values Perfetto would turn into 0 are remapped to free ids, and the original
  value is kept as the process/thread name;
- EV301 complete (X) slices that partly overlap the slice enclosing their start move to extra
  thread lanes named "<thread> (overlap lane k)"; flow events bound to a moved slice move with it;
- EV404 exact copies of a flow start are dropped;
- EV212 timestamps are rebased by a whole number of µs so they fit a double exactly; the offset
  goes to ``metadata.ts_offset_us`` and ``baseTimeNanoseconds`` is moved by the same amount;
- EV305 events are sorted by timestamp (stable; metadata first) when B/E go backwards;
- EV207 a ts or dur written as a numeric string is written as that number (its text kept
  digit for digit), which readers other than Perfetto need (echo-view's own importer too).

Only the events that change are decoded; the others are copied byte for byte. The output is
always the object form ``{"traceEvents": [...], <other top-level keys>}``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.model.trace_rules import first_fit_lanes, parse_flow_id
from echo_view.units import EXACT_FLOAT_US_LIMIT, ns_to_us_text
from echo_view.validate.events import (
    PH,
    T_BIG_FLOAT,
    T_FLOAT,
    T_INT,
    T_STRING,
    UNSET,
    EventChunk,
    Interner,
    RawEvent,
    Strings,
    Threads,
    args_of,
    build_chunk,
    decode_events,
    id_in_range,
    resolve_thread,
)

#: Codes ``--fix`` repairs.
FIXABLE = ("EV104", "EV207", "EV212", "EV301", "EV305", "EV404", "EV503")

_GOOD = np.array([T_INT, T_FLOAT, T_BIG_FLOAT, T_STRING], dtype=np.uint8)
_ANY = msgspec.json.Decoder(float_hook=Decimal)
_ENC = msgspec.json.Encoder(decimal_format="number")
_ROWS = 65_536


@dataclass
class FixResult:
    """The repaired events (encoded JSON objects, in output order), top-level keys, and what
    changed, one line per code."""

    events: list[bytes | msgspec.Raw]
    top: dict[str, Any]
    changes: list[str] = field(default_factory=list)

    def json_parts(self) -> list[bytes]:
        """The output file as byte pieces (object form)."""
        parts: list[bytes] = [b'{"traceEvents":[']
        for i, e in enumerate(self.events):
            parts.append(b"," if i else b"")
            parts.append(bytes(e))
        parts.append(b"]")
        for k, v in self.top.items():
            if k != "traceEvents":
                parts.append(b"," + _ENC.encode(k) + b":" + _ENC.encode(v))
        parts.append(b"}\n")
        return parts


class _Events:
    """The input as raw texts plus the columns of the rules, and lazily decoded edits."""

    def __init__(self, raws: Sequence[msgspec.Raw]) -> None:
        self.raws = raws
        self.threads = Threads()
        self.strings = Strings()
        self.evs: list[RawEvent] = []
        cols: list[EventChunk] = []
        for lo in range(0, len(raws), _ROWS):
            part = raws[lo : lo + _ROWS]
            evs = decode_events(b"[" + b",".join(part) + b"]")
            self.evs.extend(evs)
            cols.append(build_chunk(evs, lo, self.threads, self.strings))

        def cat(name: str) -> npt.NDArray[Any]:
            return np.concatenate([getattr(c, name) for c in cols]) if cols else np.zeros(0)

        self.ph = cat("ph").astype(np.uint8)
        self.ts = cat("ts_ns").astype(np.int64)
        self.ts_kind = cat("ts_kind").astype(np.uint8)
        self.dur_kind = cat("dur_kind").astype(np.uint8)
        self.ts_ok = np.isin(self.ts_kind, _GOOD)
        self.big = (cat("ts_kind") == T_BIG_FLOAT) & (self.ts % 1000 != 0)
        self.dur = cat("dur_ns").astype(np.int64)
        self.dur_ok = np.isin(cat("dur_kind"), _GOOD)
        self.raw_thread = cat("raw_thread").astype(np.int32)
        self.name = cat("name").astype(np.int32)
        self.cat = cat("cat").astype(np.int32)
        self.edits: dict[int, dict[str, Any]] = {}
        self.drop: set[int] = set()

    def __len__(self) -> int:
        return len(self.raws)

    def edit(self, i: int) -> dict[str, Any]:
        d = self.edits.get(i)
        if d is None:
            d = self.edits[i] = _ANY.decode(self.raws[i])
        return d


def _meta(kind: str, pid: Any, tid: Any, label: str) -> bytes:
    ev: dict[str, Any] = {"name": kind, "ph": "M", "pid": pid, "args": {"name": label}}
    if tid is not UNSET:
        ev["tid"] = tid
    return _ENC.encode(ev)


class _Ids:
    """Numeric pids in use, and tids in use per pid, to pick free ids. The largest of each is
    kept as ids are added: a trace may need tens of thousands of new ones (one per overlap
    lane), and taking ``max`` of the set for each was quadratic."""

    def __init__(self, ev: _Events) -> None:
        self.pids: set[int] = set()
        self.tids: dict[Hashable, set[int]] = {}
        self.top_pid = 0  # max(pids, default=0)
        self.top_tid: dict[Hashable, int] = {}  # per pid: max of its tids and of pid (or 0)
        for info in ev.threads.infos:
            p, t = info.pid, info.tid
            if isinstance(p, int) and id_in_range(p):
                self._add_pid(p)
            if isinstance(t, int) and id_in_range(t):
                self._add_tid(p, t)

    def _add_pid(self, pid: int) -> None:
        self.top_pid = max(self.top_pid, pid) if self.pids else pid
        self.pids.add(pid)

    def _add_tid(self, pid: Hashable, tid: int) -> None:
        self.tids.setdefault(pid, set()).add(tid)
        floor = pid if isinstance(pid, int) else 0
        self.top_tid[pid] = max(self.top_tid.get(pid, floor), tid)

    def free_pid(self, old: Any) -> int:
        want = abs(int(old)) if isinstance(old, int | float) and not isinstance(old, bool) else -1
        pid = want if 0 < want <= 0xFFFFFFFF and want not in self.pids else self.top_pid + 1
        self._add_pid(pid)
        return pid

    def free_tid(self, pid: Any, old: Any) -> int:
        used = self.tids.get(pid, set())
        want = abs(int(old)) if isinstance(old, int | float) and not isinstance(old, bool) else -1
        top = self.top_tid.get(pid, pid if isinstance(pid, int) else 0)
        tid = want if 0 < want <= 0xFFFFFFFF and want not in used and want != pid else top + 1
        self._add_tid(pid, tid)
        return tid


def _remap_ids(
    ev: _Events, ids: _Ids, extra: list[bytes], changes: list[str]
) -> list[tuple[Any, Any]]:
    """EV503; returns the (pid, tid) each raw pair is written with afterwards."""
    infos = ev.threads.infos
    pairs: list[tuple[Any, Any]] = [(i.pid, i.tid) for i in infos]
    pid_map: dict[str, int] = {}
    moved: list[str] = []
    n = 0
    # A process or thread that names itself keeps its name (its metadata moves with it): a
    # second name for it was a new EV501 / EV502 in the repaired file.
    meta = np.flatnonzero(ev.ph == PH["M"]).tolist()
    named_threads = {int(ev.raw_thread[r]) for r in meta if ev.evs[r].name == "thread_name"}
    named_pids = {repr(ev.evs[r].pid) for r in meta if ev.evs[r].name == "process_name"}
    for rid, info in enumerate(infos):
        pid, tid = info.pid, info.tid
        new_pid, new_tid = pid, tid
        if not id_in_range(pid):
            key = repr(pid)
            if key not in pid_map:
                pid_map[key] = ids.free_pid(pid)
                if key not in named_pids:
                    extra.append(_meta("process_name", pid_map[key], UNSET, f"pid {pid!r}"))
            new_pid = pid_map[key]
        if not id_in_range(tid):
            new_tid = ids.free_tid(new_pid, tid)
            if rid not in named_threads:
                extra.append(_meta("thread_name", new_pid, new_tid, f"tid {tid!r}"))
        if (new_pid, new_tid) == (pid, tid):
            continue
        rows = np.flatnonzero(ev.raw_thread == rid)
        for r in rows.tolist():
            d = ev.edit(r)
            d["pid"] = new_pid
            if new_tid is not UNSET:
                d["tid"] = new_tid
        n += len(rows)
        pairs[rid] = (new_pid, new_tid)
        moved.append(f"({pid!r}, {tid!r}) -> ({new_pid!r}, {new_tid!r})")
    if moved:
        shown = "; ".join(moved[:5]) + ("; ..." if len(moved) > 5 else "")
        changes.append(f"EV503: remapped pid/tid of {n} event(s): {shown}")
    return pairs


def _thread_names(ev: _Events) -> dict[Hashable, str]:
    out: dict[Hashable, str] = {}
    for r in np.flatnonzero(ev.ph == PH["M"]).tolist():
        e = ev.evs[r]
        if e.name == "thread_name":
            args = args_of(e)
            if isinstance(args, dict) and isinstance(args.get("name"), str):
                out.setdefault(resolve_thread(e.pid, e.tid), args["name"].strip())
    return out


def _lanes(
    ev: _Events, pairs: list[tuple[Any, Any]], ids: _Ids, extra: list[bytes], changes: list[str]
) -> None:
    """EV301: move partly overlapping X slices to lanes, with the flow events bound to them."""
    threads = Interner()
    key_of = [resolve_thread(p, t) for p, t in pairs]
    tid_of = np.array([threads[k] for k in key_of] or [0], dtype=np.int32)
    thread = tid_of[ev.raw_thread] if len(ev) else np.zeros(0, np.int32)
    xs = np.flatnonzero((ev.ph == PH["X"]) & ev.ts_ok & ev.dur_ok & (ev.dur >= 0))
    if not len(xs):
        return
    order = xs[np.lexsort((xs, -ev.dur[xs], ev.ts[xs], thread[xs]))]
    th = thread[order]
    bounds = np.flatnonzero(np.diff(th)) + 1
    names = _thread_names(ev)
    moved = 0
    lanes_made = 0
    for seg in np.split(order, bounds):
        starts, ends = ev.ts[seg], ev.ts[seg] + ev.dur[seg]
        if len(seg) < 2 or bool(np.all(ends[:-1] <= starts[1:])):
            continue
        # Lane 1 holds what Perfetto would spill from the thread, lane 2 what lane 1 spills...
        lane = np.array(first_fit_lanes(starts.tolist(), ends.tolist()), dtype=np.int32)
        k = int(lane.max())
        if k == 0:
            continue
        first = int(seg[0])
        pid, tid = pairs[int(ev.raw_thread[first])]
        rkey = key_of[int(ev.raw_thread[first])]
        base_name = names.get(rkey) or f"tid {tid if tid is not UNSET else pid}"
        lane_tid: dict[int, Any] = {}
        for j in range(1, k + 1):
            new = ids.free_tid(pid, None) if not isinstance(rkey[1], tuple) else f"{tid} (lane {j})"
            lane_tid[j] = new
            extra.append(_meta("thread_name", pid, new, f"{base_name} (overlap lane {j})"))
        for j in np.flatnonzero(lane).tolist():
            ev.edit(int(seg[j]))["tid"] = lane_tid[int(lane[j])]
        moved += int(np.count_nonzero(lane))
        lanes_made += k
        _move_flows(ev, thread, int(thread[first]), seg, starts, ends, lane, lane_tid)
    if moved:
        changes.append(
            f"EV301: moved {moved} partly overlapping slice(s) to {lanes_made} overlap lane(s)"
        )


def _move_flows(
    ev: _Events,
    thread: npt.NDArray[np.int32],
    t: int,
    seg: npt.NDArray[np.intp],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    lane: npt.NDArray[np.int32],
    lane_tid: dict[int, Any],
) -> None:
    flows = np.flatnonzero((thread == t) & np.isin(ev.ph, [PH["s"], PH["t"], PH["f"]]) & ev.ts_ok)
    for r in flows.tolist():
        e = ev.evs[r]
        if e.ph == "f" and e.bp != "e":
            continue
        ts = int(ev.ts[r])
        k = int(np.searchsorted(starts, ts, side="right")) - 1
        # The innermost slice containing ts: the latest-starting one that has not ended.
        steps = 0
        while k >= 0 and steps < 256 and ends[k] <= ts:
            k -= 1
            steps += 1
        if k >= 0 and ends[k] > ts and lane[k]:
            ev.edit(r)["tid"] = lane_tid[int(lane[k])]


def _dedupe_flows(ev: _Events, changes: list[str]) -> None:
    """EV404: drop exact copies of a flow start."""
    seen: set[tuple[Any, ...]] = set()
    dropped = 0
    for r in np.flatnonzero((ev.ph == PH["s"]) & ev.ts_ok).tolist():
        e = ev.evs[r]
        fid = parse_flow_id(e.id if e.id is not UNSET else e.id2)
        if fid is None:
            continue
        key = (fid, int(ev.cat[r]), int(ev.name[r]), int(ev.ts[r]), int(ev.raw_thread[r]))
        if key in seen:
            ev.drop.add(r)
            dropped += 1
        else:
            seen.add(key)
    if dropped:
        changes.append(f"EV404: dropped {dropped} duplicate flow start(s)")


def _numbers(ev: _Events, changes: list[str]) -> None:
    """EV207: a ts or dur written as a numeric string becomes that number, its digits kept."""
    n = 0
    for key, kind in (("ts", ev.ts_kind), ("dur", ev.dur_kind)):
        for r in np.flatnonzero(kind == T_STRING).tolist():
            d = ev.edit(r)
            d[key] = Decimal(str(d[key]).strip())
            n += 1
    if n:
        changes.append(f"EV207: wrote {n} ts/dur string(s) as numbers")


def _rebase(ev: _Events, top: dict[str, Any], changes: list[str]) -> None:
    """EV212: shift every ts by a whole number of µs so values fall below 2**42 µs."""
    if not ev.big.any():
        return
    rows = np.flatnonzero(ev.ts_ok)
    base_us = int(ev.ts[rows].min()) // 1000
    span_us = (int(ev.ts[rows].max()) - base_us * 1000) / 1000
    if span_us >= EXACT_FLOAT_US_LIMIT:  # no shift brings the last one below the limit
        changes.append(
            f"EV212: not rebased: the timestamps span {span_us / 86_400e6:,.1f} days, beyond "
            "the ~51 a double holds to the ns (2**42 µs); write them as integers"
        )
        return
    for r in rows.tolist():
        ns = int(ev.ts[r]) - base_us * 1000
        ev.edit(r)["ts"] = ns // 1000 if ns % 1000 == 0 else Decimal(ns_to_us_text(ns))
    ev.ts = ev.ts - base_us * 1000
    meta = top.get("metadata")
    if meta is None:
        meta = top["metadata"] = {}
    if isinstance(meta, dict):
        meta["ts_offset_us"] = base_us + int(meta.get("ts_offset_us", 0) or 0)
    base = top.get("baseTimeNanoseconds")
    if isinstance(base, int) and not isinstance(base, bool):
        top["baseTimeNanoseconds"] = base + base_us * 1000
    changes.append(
        f"EV212: rebased {len(rows)} timestamp(s) by -{base_us} µs (metadata.ts_offset_us)"
    )


def _needs_sort(ev: _Events) -> bool:
    be = np.flatnonzero(np.isin(ev.ph, [PH["B"], PH["E"]]) & ev.ts_ok)
    if len(be) < 2:
        return False
    o = be[np.lexsort((be, ev.raw_thread[be]))]
    return bool(np.any((np.diff(ev.raw_thread[o]) == 0) & (np.diff(ev.ts[o]) < 0)))


def repair(
    raws: Sequence[msgspec.Raw], top: Mapping[str, Any], truncated: bool = False
) -> FixResult:
    """Repair the events ``raws`` (each one event's JSON text) of a file with top-level keys
    ``top``; ``truncated`` says the input array had no closing bracket."""
    ev = _Events(raws)
    out_top = {k: v for k, v in top.items() if k != "traceEvents"}
    changes: list[str] = []
    extra: list[bytes] = []
    if truncated:
        changes.append(f"EV104: closed the truncated array after {len(raws)} event(s)")
    ids = _Ids(ev)
    pairs = _remap_ids(ev, ids, extra, changes)
    _lanes(ev, pairs, ids, extra, changes)
    _dedupe_flows(ev, changes)
    _numbers(ev, changes)
    _rebase(ev, out_top, changes)
    order: npt.NDArray[np.intp] = np.arange(len(ev))
    if _needs_sort(ev):
        key = np.where(ev.ts_ok, ev.ts, np.iinfo(np.int64).min)
        order = np.argsort(key, kind="stable")
        changes.append(f"EV305: sorted {len(ev)} event(s) by timestamp")
    events: list[bytes | msgspec.Raw] = list(extra)
    edits, drop, raw_list = ev.edits, ev.drop, ev.raws
    for r in order.tolist():
        if r in drop:
            continue
        d = edits.get(r)
        events.append(_ENC.encode(d) if d is not None else raw_list[r])
    return FixResult(events, out_top, changes)
