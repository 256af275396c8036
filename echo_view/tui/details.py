"""The details pane: the selected event's fields and args, its launch/kernel partner and its
collective's peers on the other ranks, with the links the app can jump to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from echo_view.analysis.cxx_names import demangle
from echo_view.model import GPU_KINDS, NONE, CollectiveKind, EventKind, Job, Trace
from echo_view.text import printable
from echo_view.tui.raster import short_name
from echo_view.tui.tables import signed_duration
from echo_view.units import format_duration

_GPU = np.array([int(k) for k in GPU_KINDS], dtype=np.uint8)


@dataclass(frozen=True, slots=True)
class Link:
    """An event the selected one is related to: ``(trace index, event row)`` in the same job."""

    trace: int
    row: int
    why: str


def partners(trace: Trace, tidx: int, row: int) -> list[Link]:
    """The launch of a GPU event, or the GPU work of a launch (same correlation id)."""
    ev = trace.events
    corr = int(ev.correlation[row])
    if corr == NONE:
        return []
    same = np.flatnonzero(ev.correlation == corr)
    on_gpu = np.isin(ev.kind[same], _GPU)
    if int(ev.kind[row]) in _GPU:
        hits, why = same[~on_gpu], "launch"
    else:
        hits, why = same[on_gpu], "gpu"
    return [Link(tidx, int(r), why) for r in hits if int(r) != row]


#: At most this many enclosing calls are listed (the outermost and the innermost are kept).
MAX_ANCESTRY = 12


def ancestry(trace: Trace, row: int) -> list[int]:
    """The calls and ranges enclosing event ``row``, outermost first: for GPU work, those
    around its launch (the operator and NVTX/annotation path that issued it); for a CPU event,
    those around it on its thread (same process and thread id, any lane)."""
    ev = trace.events
    if int(ev.kind[row]) in _GPU:
        launches = [lk.row for lk in partners(trace, 0, row) if lk.why == "launch"]
        if not launches:
            return []
        row = launches[0]
    lane = trace.lanes[int(ev.lane[row])]
    same = [i for i, ln in enumerate(trace.lanes) if (ln.pid, ln.tid) == (lane.pid, lane.tid)]
    start = int(ev.start_ns[row])
    end = start + int(ev.dur_ns[row])
    starts = np.asarray(ev.start_ns, dtype=np.int64)
    ends = starts + np.asarray(ev.dur_ns, dtype=np.int64)
    around = np.isin(ev.lane, same) & (starts <= start) & (ends >= end) & (ends > starts)
    around &= ev.kind != int(EventKind.COUNTER)
    around[row] = False
    hits = np.flatnonzero(around)
    order = np.lexsort((-(ends[hits] - starts[hits]), starts[hits]))
    return [int(r) for r in hits[order]]


def _path_text(trace: Trace, rows: list[int]) -> str:
    names = [short_name(trace.name(r)) for r in rows]
    if len(names) > MAX_ANCESTRY:
        keep = MAX_ANCESTRY // 2
        names = [*names[:keep], f"…{len(names) - 2 * keep} more…", *names[-keep:]]
    return " › ".join(names)


def _group_key(trace: Trace, coll: int) -> tuple[str, tuple[int, ...]] | None:
    g = int(trace.collectives.group[coll])
    if 0 <= g < len(trace.groups):
        pg = trace.groups[g]
        return (pg.name, pg.ranks)
    return None


def _ordinal(trace: Trace, coll: int, same: np.ndarray[Any, Any]) -> int:
    """Position of collective ``coll`` among ``same`` (collective rows) by start time."""
    starts = trace.events.start_ns[trace.collectives.event[same]]
    order = same[np.argsort(starts, kind="stable")]
    return int(np.flatnonzero(order == coll)[0])


def collective_peers(job: Job, tidx: int, row: int) -> list[Link]:
    """The same collective on the other ranks: matched by process group and sequence number,
    or by order within the group when the trace has no sequence numbers.

    Without a known group, the collective is matched by order among the collectives of its kind
    only when every rank has the same number of them (what a collective over all ranks
    implies); otherwise there is no honest match and none is returned."""
    trace = job.traces[tidx]
    ct = trace.collectives
    hit = np.flatnonzero(ct.event == row)
    if not len(hit):
        return []
    coll = int(hit[0])
    key = _group_key(trace, coll)
    kind = int(ct.kind[coll])
    seq = int(ct.seq[coll])
    mine = _same_group(trace, key, kind)
    ordinal = _ordinal(trace, coll, mine) if seq == NONE else -1
    if key is None and any(len(_same_group(t, None, kind)) != len(mine) for t in job.traces):
        return []
    out: list[Link] = []
    for j, other in enumerate(job.traces):
        if j == tidx:
            continue
        if key is not None and other.rank not in key[1]:
            continue
        cand = _same_group(other, key, kind)
        if seq != NONE:
            match = cand[np.asarray(other.collectives.seq)[cand] == seq]
        else:
            starts = other.events.start_ns[other.collectives.event[cand]]
            ordered = cand[np.argsort(starts, kind="stable")]
            match = ordered[ordinal : ordinal + 1]
        out.extend(Link(j, int(other.collectives.event[m]), f"r{other.rank}") for m in match[:1])
    return out


def _same_group(
    trace: Trace, key: tuple[str, tuple[int, ...]] | None, kind: int
) -> np.ndarray[Any, Any]:
    ct = trace.collectives
    if key is None:
        return np.flatnonzero((np.asarray(ct.group) < 0) & (np.asarray(ct.kind) == kind))
    ids = [i for i, g in enumerate(trace.groups) if (g.name, g.ranks) == key]
    return np.flatnonzero(np.isin(ct.group, np.array(ids, dtype=np.int32)))


def describe(job: Job, tidx: int, row: int, origin_ns: int) -> tuple[Text, list[Link]]:
    """The pane's text for event ``row`` of trace ``tidx`` and its links (partner first)."""
    trace = job.traces[tidx]
    ev = trace.events
    off = job.alignment.offsets_ns[tidx] - origin_ns
    lane = trace.lanes[int(ev.lane[row])]
    kind = EventKind(int(ev.kind[row]))
    start = int(ev.start_ns[row]) + off
    dur = int(ev.dur_ns[row])
    text = Text()
    text.append(f"{kind.label}", style="bold")
    text.append(f" · r{trace.rank} {printable(lane.name)} · ", style="dim")
    # (before the origin in the diff's Timelines tab, whose origin is the aligned step's start)
    text.append(f"start {signed_duration(start)} · dur {format_duration(dur)}")
    text.append(f"\n{short_name(trace.name(row))}", style="bold")
    path = ancestry(trace, row)
    if path:
        text.append("\npath: ", style="bold")
        text.append(_path_text(trace, path))
    links = partners(trace, tidx, row)
    for link in links:
        other = job.traces[link.trace]
        s = int(other.events.start_ns[link.row]) + off
        text.append(f"\n[p] {link.why}: ", style="bold #e5c07b")
        text.append(f"{printable(other.name(link.row)[:80])} at {signed_duration(s)}")
    hit = np.flatnonzero(trace.collectives.event == row)
    if len(hit):
        c = int(hit[0])
        ct = trace.collectives
        parts = [CollectiveKind(int(ct.kind[c])).label]
        key = _group_key(trace, c)
        if key is not None:
            parts.append(f"group {key[0]!r} ({len(key[1])} ranks)")
        if int(ct.seq[c]) != NONE:
            parts.append(f"seq {int(ct.seq[c])}")
        if int(ct.bytes[c]) >= 0:
            parts.append(f"{int(ct.bytes[c])} B")
        for label, col in (("dtype", ct.dtype), ("algo", ct.algorithm), ("proto", ct.protocol)):
            if int(col[c]) != NONE:
                parts.append(f"{label} {printable(trace.strings[int(col[c])])}")
        text.append("\ncollective: ", style="bold #c678dd")
        text.append(" · ".join(parts))
        peers = collective_peers(job, tidx, row)
        if peers:
            how = "" if key is not None else " (group unknown: by order of this kind)"
            text.append(f"\n[c] peers{how}: ", style="bold #c678dd")
            bits = []
            for p in peers:
                o = job.traces[p.trace]
                skew = int(o.events.start_ns[p.row]) + job.alignment.offsets_ns[p.trace]
                skew -= int(ev.start_ns[row]) + job.alignment.offsets_ns[tidx]
                bits.append(f"{p.why} {signed_duration(skew)}")
            text.append(", ".join(bits))
        links = links + peers
    ids = []
    if int(ev.correlation[row]) != NONE:
        ids.append(f"correlation {int(ev.correlation[row])}")
    if int(ev.external_id[row]) != NONE:
        ids.append(f"external id {int(ev.external_id[row])}")
    if ids:
        text.append("\nids: " + " · ".join(ids), style="dim")
    name = trace.name(row)
    full = demangle(name)
    if short_name(name) != full:
        text.append("\nname: ", style="bold")
        text.append(printable(full[:1000]), style="dim")
    if full != name:
        text.append("\nmangled: ", style="bold")
        text.append(printable(name[:1000]), style="dim")
    args = ev.args(row)
    if args:
        text.append("\nargs: ", style="bold")
        text.append(printable(msgspec.json.encode(args).decode()[:2000]), style="dim")
    return text, links


class DetailsPane(VerticalScroll, can_focus=False):
    """Shows one event (see :func:`describe`)."""

    DEFAULT_CSS = """
    DetailsPane { height: 7; max-height: 40%; border-top: solid $primary-darken-2; padding: 0 1; }
    DetailsPane.-empty { height: 1; border-top: none; color: $text-muted; }
    DetailsPane.-hidden { display: none; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="-empty")
        self.links: list[Link] = []
        self._body = Static("Select an event: Tab/Shift+Tab on a lane, or click it.")

    def compose(self):  # type: ignore[no-untyped-def]
        yield self._body

    def show(self, job: Job | None, tidx: int, row: int, origin_ns: int) -> None:
        """Describe event ``row`` of trace ``tidx`` (or clear when ``job`` is None)."""
        if job is None:
            # Empty, the pane shrinks to this one line and the lanes get its rows.
            self.links = []
            self._body.update("No event selected: Tab/Shift+Tab on a lane, or click one.")
            self.add_class("-empty")
            return
        self.remove_class("-empty")
        text, self.links = describe(job, tidx, row, origin_ns)
        self._body.update(text)
        self.scroll_home(animate=False)
